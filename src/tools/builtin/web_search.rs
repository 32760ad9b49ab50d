//! WebSearch: sends a query to the search backend the operator configured for the tenant
//! ([`crate::search`]) through the egress broker (infrastructure traffic) and returns the
//! results as a numbered list of title, URL and snippet.
//!
//! - **Present only with a backend.** Without one the tool is not offered at all, and
//!   `GET /v1/sessions/{id}` lists it under `absent_tools` with the reason.
//! - **Permission.** The query leaves the server (to the operator's backend), so the tool is
//!   not read-only: `WebSearch` rules, grants and the approval callback decide like any call.
//! - **Bounded input.** `query` of 1..=400 characters, `count` 1..=20 (default 10),
//!   `allowed_domains` / `blocked_domains` of at most 20 domains each.
//! - **Filtered results.** A result whose host a session, tenant or server egress deny rule
//!   matches is left out, and so is one outside `allowed_domains` or inside `blocked_domains`
//!   (a domain matches itself and its subdomains); results that are not `http(s)` URLs are
//!   dropped. The output says how many were left out.
//! - **Bounded output.** At most `count` results; titles cut at 200 characters, snippets at
//!   400, URLs longer than 2048 dropped; the backend's answer itself is capped
//!   (`search.max_response_bytes`) and bounded in time (`search.timeout_seconds`).
//! - **Recorded.** The request is an `egress` event (purpose `web_search`) of the run.
//!
//! A failure is `SEARCH_FAILED` (the backend answered an error or an answer of another
//! shape) or `EGRESS_DENIED` with the reason (the backend's address is refused, timeout, too
//! large).

use super::parse_input;
use crate::egress::{
    DomainLists, EGRESS_DENIED, EgressBroker, EgressContext, EgressEvent, EgressRecorder,
    FetchLimits, RefusalReason, Traffic,
    fetch::{GetRequest, NoHops},
    policy::ListVerdict,
};
use crate::ids::TenantId;
use crate::search::{MAX_QUERY_CHARS, MAX_RESULTS, SearchBackend, SearchHit, SearchQuery};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, codes as tool_codes};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Code of a search the backend could not answer.
pub const SEARCH_FAILED: &str = "SEARCH_FAILED";
/// Most domains in `allowed_domains` or `blocked_domains`.
const MAX_DOMAINS: usize = 20;
const MAX_TITLE_CHARS: usize = 200;
const MAX_SNIPPET_CHARS: usize = 400;
const MAX_URL_CHARS: usize = 2048;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    query: String,
    #[serde(default)]
    count: Option<usize>,
    #[serde(default)]
    allowed_domains: Vec<String>,
    #[serde(default)]
    blocked_domains: Vec<String>,
}

/// What a [`WebSearchTool`] is built from.
pub struct WebSearchSetup {
    pub backend: Arc<dyn SearchBackend>,
    pub broker: EgressBroker,
    pub tenant: TenantId,
    /// The session's `egress.allow/deny` (results on denied hosts are left out).
    pub lists: DomainLists,
    pub timeout: Duration,
    pub max_response_bytes: usize,
    pub recorder: Arc<dyn EgressRecorder>,
}

/// The WebSearch tool of one session.
pub struct WebSearchTool {
    setup: WebSearchSetup,
}

impl WebSearchTool {
    pub fn new(setup: WebSearchSetup) -> Self {
        Self { setup }
    }

    /// Whether the egress lists deny `url`'s host.
    fn denied_by_rules(&self, url: &url::Url) -> bool {
        let Some(host) = url
            .host()
            .and_then(|h| crate::egress::policy::canonical_host(&h.to_string()))
        else {
            return true;
        };
        let ctx = EgressContext {
            tenant: self.setup.tenant.as_str(),
            session: &self.setup.lists,
            traffic: Traffic::Tool,
        };
        let port = url.port_or_known_default().unwrap_or(0);
        matches!(
            self.setup.broker.policy().verdict(&ctx, &host, port),
            ListVerdict::Denied(_)
        )
    }
}

/// Adds the tool call's id to the broker's events.
struct CallRecorder<'a> {
    inner: &'a dyn EgressRecorder,
    tool_use_id: &'a str,
}

#[async_trait]
impl EgressRecorder for CallRecorder<'_> {
    async fn record(&self, mut event: EgressEvent) {
        event.tool_use_id = Some(self.tool_use_id.to_owned());
        self.inner.record(event).await;
    }
}

/// A domain of `allowed_domains` / `blocked_domains`: lowercase, no scheme, no trailing dot.
fn parse_domains(field: &str, domains: &[String]) -> Result<Vec<String>, ToolError> {
    if domains.len() > MAX_DOMAINS {
        return Err(ToolError::new(
            tool_codes::INPUT_SCHEMA_INVALID,
            format!("{field}: at most {MAX_DOMAINS} domains"),
        ));
    }
    domains
        .iter()
        .map(|domain| {
            let bare = domain.trim().trim_end_matches('.').to_ascii_lowercase();
            let ok = !bare.is_empty()
                && bare.len() <= 253
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if ok {
                Ok(bare)
            } else {
                Err(ToolError::new(
                    tool_codes::INPUT_SCHEMA_INVALID,
                    format!("{field}: `{domain}` is not a domain name (like docs.rs)"),
                ))
            }
        })
        .collect()
}

fn in_domain(host: &str, domain: &str) -> bool {
    host == domain
        || host
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                          "description": "What to search the web for"},
                "count": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                          "description": "How many results (default 10)"},
                "allowed_domains": {"type": "array", "maxItems": MAX_DOMAINS,
                                    "items": {"type": "string", "maxLength": 253},
                                    "description": "Only results from these domains (and their subdomains)"},
                "blocked_domains": {"type": "array", "maxItems": MAX_DOMAINS,
                                    "items": {"type": "string", "maxLength": 253},
                                    "description": "No results from these domains (and their subdomains)"}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    })
}

#[async_trait]
impl Tool for WebSearchTool {
    fn name(&self) -> &str {
        "WebSearch"
    }

    fn description(&self) -> &str {
        "Searches the web and returns the results (title, URL, snippet). Fetch a result's page \
         with WebFetch."
    }

    fn input_schema(&self) -> &Value {
        schema()
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        let query = input.query.trim();
        if query.is_empty() || query.chars().count() > MAX_QUERY_CHARS {
            return Err(ToolError::new(
                tool_codes::INPUT_SCHEMA_INVALID,
                format!("query must have 1 to {MAX_QUERY_CHARS} characters"),
            ));
        }
        let count = input
            .count
            .unwrap_or(crate::search::DEFAULT_RESULTS)
            .clamp(1, MAX_RESULTS);
        let allowed = parse_domains("allowed_domains", &input.allowed_domains)?;
        let blocked = parse_domains("blocked_domains", &input.blocked_domains)?;
        let backend = &self.setup.backend;
        let request = backend.request(&SearchQuery {
            query: query.to_owned(),
            count,
        });
        let no_lists = DomainLists::default();
        let egress = EgressContext {
            tenant: self.setup.tenant.as_str(),
            session: &no_lists,
            traffic: Traffic::Infrastructure,
        };
        let recorder = CallRecorder {
            inner: self.setup.recorder.as_ref(),
            tool_use_id: &ctx.tool_use_id,
        };
        let limits = FetchLimits {
            deadline: self.setup.timeout,
            max_bytes: self.setup.max_response_bytes,
            max_redirects: 0,
        };
        let fetched = self
            .setup
            .broker
            .get_with(
                &egress,
                GetRequest {
                    purpose: "web_search",
                    url: &request.url,
                    headers: &request.headers,
                    limits,
                },
                &recorder,
                &NoHops,
            )
            .await
            .map_err(|refusal| {
                tracing::warn!(
                    backend = backend.name(), reason = refusal.reason.as_str(),
                    detail = %refusal.detail, "search backend request failed"
                );
                match refusal.reason {
                    RefusalReason::Unreachable | RefusalReason::RedirectDenied => ToolError::new(
                        SEARCH_FAILED,
                        format!("the search backend did not answer: {}", refusal.message),
                    ),
                    reason => ToolError::new(
                        EGRESS_DENIED,
                        format!(
                            "reason {}: the search backend: {}",
                            reason.as_str(),
                            refusal.message
                        ),
                    ),
                }
            })?;
        let hits = backend.parse(&fetched.body).map_err(|problem| {
            tracing::warn!(backend = backend.name(), %problem, "search backend answer unreadable");
            ToolError::new(
                SEARCH_FAILED,
                format!(
                    "the search backend ({}) gave an unreadable answer",
                    backend.name()
                ),
            )
        })?;
        let total = hits.len();
        let kept: Vec<(SearchHit, url::Url)> = hits
            .into_iter()
            .filter(|hit| hit.url.len() <= MAX_URL_CHARS)
            .filter_map(|hit| {
                let url = url::Url::parse(&hit.url).ok()?;
                matches!(url.scheme(), "http" | "https").then_some((hit, url))
            })
            .filter(|(_, url)| {
                let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
                (allowed.is_empty() || allowed.iter().any(|d| in_domain(&host, d)))
                    && !blocked.iter().any(|d| in_domain(&host, d))
                    && !self.denied_by_rules(url)
            })
            .take(count)
            .collect();
        let left_out = total.saturating_sub(kept.len());
        let mut output = format!("Search results for \"{query}\":\n");
        if kept.is_empty() {
            output.push_str("\nNo results.\n");
        }
        for (index, (hit, url)) in kept.iter().enumerate() {
            output.push_str(&format!(
                "\n{}. {}\n   {}\n",
                index + 1,
                crate::search::plain(&hit.title, MAX_TITLE_CHARS),
                url
            ));
            let snippet = crate::search::plain(&hit.snippet, MAX_SNIPPET_CHARS);
            if !snippet.is_empty() {
                output.push_str(&format!("   {snippet}\n"));
            }
        }
        if left_out > 0 {
            output.push_str(&format!(
                "\n({left_out} more results left out: beyond count, filtered by domain, or not http(s))\n"
            ));
        }
        Ok(ToolOutput::text(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_match_themselves_and_subdomains_only() {
        assert!(in_domain("docs.rs", "docs.rs"));
        assert!(in_domain("www.docs.rs", "docs.rs"));
        assert!(!in_domain("evildocs.rs", "docs.rs"));
        assert!(parse_domains("allowed_domains", &["https://x".into()]).is_err());
        assert!(parse_domains("allowed_domains", &vec!["a.b".to_owned(); 21]).is_err());
        assert_eq!(
            parse_domains("blocked_domains", &[" Docs.RS. ".into()]).unwrap(),
            vec!["docs.rs"]
        );
    }
}
