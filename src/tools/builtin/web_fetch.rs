//! WebFetch: GETs an `http(s)` URL through the egress broker and returns its readable text
//! (see [`super::web_content`]).
//!
//! - **Permission.** Judged by `WebFetch(domain:…)` rules on the URL's host like any tool
//!   call. The tool decides itself first from the egress lists (server, tenant, session):
//!   a denied host is refused (`EGRESS_DENIED`, reason `not_allowed`), a listed host is
//!   allowed, and an unlisted one goes up the ladder (rules, grants, the approval callback,
//!   the policy webhook). It is not read-only: a fetch sends data out, so plan mode and
//!   `dontAsk` refuse it unless a rule allows it.
//! - **Redirects.** A hop to another site is followed when an egress allow rule lists its
//!   host, or when the session's permission ladder allows a WebFetch of the hop's URL
//!   without asking (`WebFetch(domain:…)` rules, grants — an approval answered with a session
//!   grant for the domain counts). Otherwise the result is `redirect_denied` naming the
//!   target, and fetching it directly goes up the ladder (the approval callback included).
//! - **Exfiltration guard.** By default a URL is fetched only when it appears in a user
//!   message or an earlier tool result of the session (the model cannot invent a URL that
//!   carries data out); `egress.fetch_any_url` in the session config lifts this.
//! - **Bounds.** The broker's deadline, byte cap, redirect checks and address checks (see
//!   [`crate::egress::fetch`]); the output is cut at `max_chars` and then capped and spilled
//!   by the pipeline like every output.
//! - **Cache.** Answers are kept per session for [`CACHE_TTL`] (at most [`CACHE_ENTRIES`]
//!   entries, [`CACHE_CHARS`] characters in all), so the same URL is not fetched twice in a
//!   short while.

use super::{blocking, parse_input};
use crate::egress::{
    DomainLists, EGRESS_DENIED, EgressBroker, EgressContext, EgressEvent, EgressRecorder,
    EgressRefusal, FetchLimits, RefusalReason, Traffic, fetch::HopGate, policy::ListVerdict,
};
use crate::ids::{SessionId, TenantId};
use crate::message::{ContentBlock, Role};
use crate::permission::Verdict;
use crate::permission::{SelfDecision, Subject};
use crate::sandbox::Sandbox;
use crate::store::Store;
use crate::tools::pipeline::PermissionGate;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a fetched answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(15 * 60);
/// Answers kept per session.
pub const CACHE_ENTRIES: usize = 32;
/// Characters kept in one session's cache in all.
pub const CACHE_CHARS: usize = 4 * 1024 * 1024;
/// The default and largest `max_chars`.
pub const MAX_CHARS: usize = 100_000;
/// Messages the exfiltration guard reads at most (the oldest beyond are not searched).
const GUARD_MAX_MESSAGES: u32 = 5_000;

/// One session's fetched answers.
#[derive(Debug, Default)]
pub struct WebCache {
    entries: Mutex<VecDeque<(String, Instant, Arc<str>)>>,
}

impl WebCache {
    fn get(&self, url: &str) -> Option<Arc<str>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, at, _)| at.elapsed() < CACHE_TTL);
        entries
            .iter()
            .find(|(key, _, _)| key == url)
            .map(|(_, _, text)| text.clone())
    }

    fn put(&self, url: String, text: Arc<str>) {
        if text.len() > CACHE_CHARS {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(key, _, _)| key != &url);
        entries.push_back((url, Instant::now(), text));
        while entries.len() > CACHE_ENTRIES
            || entries.iter().map(|(_, _, t)| t.len()).sum::<usize>() > CACHE_CHARS
        {
            entries.pop_front();
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    url: String,
    #[serde(default)]
    max_chars: Option<usize>,
}

/// The WebFetch tool of one session.
pub struct WebFetchTool {
    broker: EgressBroker,
    limits: FetchLimits,
    tenant: TenantId,
    session: SessionId,
    lists: DomainLists,
    fetch_any_url: bool,
    store: Arc<dyn Store>,
    cache: Arc<WebCache>,
    hops: Option<Arc<dyn PermissionGate>>,
    recorder: Arc<dyn EgressRecorder>,
    sandbox: Arc<Sandbox>,
}

/// What a [`WebFetchTool`] is built from.
pub struct WebFetchSetup {
    pub broker: EgressBroker,
    pub limits: FetchLimits,
    pub tenant: TenantId,
    pub session: SessionId,
    /// The session's `egress.allow/deny` (already validated).
    pub lists: DomainLists,
    pub fetch_any_url: bool,
    pub store: Arc<dyn Store>,
    pub cache: Arc<WebCache>,
    /// The session's permission gate, judging redirect hops to hosts no allow rule lists
    /// (`None`: such hops are refused).
    pub hops: Option<Arc<dyn PermissionGate>>,
    pub recorder: Arc<dyn EgressRecorder>,
    /// Runs the PDF reader confined ([`crate::sandbox::pdf_text`]).
    pub sandbox: Arc<Sandbox>,
}

impl WebFetchTool {
    pub fn new(setup: WebFetchSetup) -> Self {
        Self {
            broker: setup.broker,
            limits: setup.limits,
            tenant: setup.tenant,
            session: setup.session,
            lists: setup.lists,
            fetch_any_url: setup.fetch_any_url,
            store: setup.store,
            cache: setup.cache,
            hops: setup.hops,
            recorder: setup.recorder,
            sandbox: setup.sandbox,
        }
    }

    /// The text of a fetched PDF, read in a confined child; any failure is a refusal with
    /// reason `unsupported_content` (the document, not the server, is at fault).
    async fn pdf_text(&self, pdf: Vec<u8>) -> Result<String, ToolError> {
        crate::sandbox::pdf_text::extract(&self.sandbox, pdf)
            .await
            .map_err(|error| {
                denied(&EgressRefusal::new(
                    RefusalReason::UnsupportedContent,
                    format!("the PDF gave no text: {error}"),
                ))
            })
    }

    fn context(&self) -> EgressContext<'_> {
        EgressContext {
            tenant: self.tenant.as_str(),
            session: &self.lists,
            traffic: Traffic::Tool,
        }
    }

    /// The lists' verdict on the input's URL (`None`: no usable URL).
    fn verdict(&self, input: &Value) -> Option<ListVerdict> {
        let url = url::Url::parse(input.get("url")?.as_str()?).ok()?;
        let host = crate::egress::policy::canonical_host(&url.host()?.to_string())?;
        let port = url.port_or_known_default()?;
        Some(self.broker.policy().verdict(&self.context(), &host, port))
    }

    /// Whether `url` appears in a user message or a tool result of the session.
    async fn in_context(&self, raw: &str, url: &url::Url) -> Result<bool, ToolError> {
        let normalized = url.as_str();
        let mut after = 0;
        let mut read = 0u32;
        while read < GUARD_MAX_MESSAGES {
            let page = self
                .store
                .list_messages_page(&self.tenant, &self.session, after, 500)
                .await
                .map_err(super::store_error)?;
            let Some(last) = page.last() else {
                return Ok(false);
            };
            after = last.seq;
            read += page.len() as u32;
            for record in page.iter().filter(|r| r.role == Role::User) {
                for block in &record.content {
                    let text = match block {
                        ContentBlock::Text { text } => text.as_str(),
                        ContentBlock::ToolResult(result) => result.content.as_str(),
                        _ => continue,
                    };
                    if text.contains(raw) || text.contains(normalized) {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// Redirect hops to unlisted hosts, judged like a WebFetch of the hop's URL by the session's
/// rules and grants (no approval is asked mid-fetch: an `ask` refuses the hop, naming the
/// URL, and fetching it directly asks).
struct LadderHops<'a> {
    gate: Option<&'a dyn PermissionGate>,
    tool: &'a WebFetchTool,
}

impl HopGate for LadderHops<'_> {
    fn allows(&self, url: &url::Url) -> Result<String, String> {
        match self.gate {
            Some(gate) => ladder_allows(gate, self.tool, url),
            None => Err("no allow rule lists it".into()),
        }
    }
}

/// The session's permission ladder judging, without asking, a WebFetch of destinations no
/// egress rule lists: the commands' egress proxy asks it for their connections (see
/// [`crate::egress::proxy::gate`]).
pub struct FetchLadder {
    pub gate: Arc<dyn PermissionGate>,
    /// The session's WebFetch (its own decision and facts feed the ladder).
    pub tool: crate::tools::DynTool,
}

impl HopGate for FetchLadder {
    fn allows(&self, url: &url::Url) -> Result<String, String> {
        ladder_allows(self.gate.as_ref(), self.tool.as_ref(), url)
    }
}

/// What allows a WebFetch of `url` without asking (a rule, a grant, the mode), or why not.
fn ladder_allows(
    gate: &dyn PermissionGate,
    tool: &dyn Tool,
    url: &url::Url,
) -> Result<String, String> {
    match gate.evaluate(tool, &json!({"url": url.as_str()})) {
        Verdict::Allow(reason) => Ok(reason
            .rule
            .or(reason.grant_id.map(|grant| format!("grant {grant}")))
            .unwrap_or_else(|| format!("permission stage {:?}", reason.stage))),
        Verdict::Deny(reason) => Err(reason.message),
        Verdict::Ask => Err("no rule or grant of the session allows it".into()),
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

/// A refusal as the model sees it: `EGRESS_DENIED` with the reason first.
fn denied(refusal: &EgressRefusal) -> ToolError {
    if refusal.detail != refusal.message {
        tracing::info!(reason = refusal.reason.as_str(), detail = %refusal.detail, "egress refused");
    }
    ToolError::new(
        EGRESS_DENIED,
        format!("reason {}: {}", refusal.reason.as_str(), refusal.message),
    )
}

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL to fetch", "maxLength": 8192},
                "max_chars": {"type": "integer", "minimum": 1, "maximum": MAX_CHARS,
                              "description": "Characters of the page's text to return (default 100000)"}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    })
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &str {
        "WebFetch"
    }

    fn description(&self) -> &str {
        "Fetches an http(s) URL and returns its content as text: HTML as Markdown, JSON and \
         text as they are. Only URLs from the user or from earlier tool results can be fetched."
    }

    fn input_schema(&self) -> &Value {
        schema()
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }

    fn self_decision(&self, input: &Value) -> SelfDecision {
        match self.verdict(input) {
            Some(ListVerdict::Denied(_)) => SelfDecision::Deny,
            Some(ListVerdict::Listed(_)) => SelfDecision::Allow,
            Some(ListVerdict::Unlisted) | None => SelfDecision::Ask,
        }
    }

    fn self_denial(&self, input: &Value) -> Option<(&'static str, String)> {
        match self.verdict(input)? {
            ListVerdict::Denied(rule) => Some((
                EGRESS_DENIED,
                format!("reason not_allowed: the host is denied by the egress rule `{rule}`"),
            )),
            _ => None,
        }
    }

    fn permission_subject(&self) -> Subject {
        Subject::Url { field: "url" }
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        let max_chars = input.max_chars.unwrap_or(MAX_CHARS).clamp(1, MAX_CHARS);
        let url = url::Url::parse(input.url.trim()).map_err(|error| {
            denied(&EgressRefusal::new(
                RefusalReason::InvalidUrl,
                format!("not a URL: {error}"),
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(denied(&EgressRefusal::new(
                RefusalReason::InvalidUrl,
                "only http(s) URLs with a host can be fetched",
            )));
        }
        if !self.fetch_any_url && !self.in_context(input.url.trim(), &url).await? {
            return Err(denied(&EgressRefusal::new(
                RefusalReason::UrlNotInContext,
                "this URL appears in no user message or earlier tool result of the session; \
                 only such URLs can be fetched",
            )));
        }
        let text = match self.cache.get(url.as_str()) {
            Some(text) => text,
            None => {
                let recorder = CallRecorder {
                    inner: self.recorder.as_ref(),
                    tool_use_id: &ctx.tool_use_id,
                };
                let hops = LadderHops {
                    gate: self.hops.as_deref(),
                    tool: self,
                };
                let fetched = self
                    .broker
                    .get(
                        &self.context(),
                        "web_fetch",
                        &url,
                        self.limits,
                        &recorder,
                        &hops,
                    )
                    .await
                    .map_err(|refusal| denied(&refusal))?;
                let kind =
                    super::web_content::kind_of(fetched.content_type.as_deref(), &fetched.body)
                        .map_err(|refusal| denied(&refusal))?;
                let body = fetched.body;
                let text = match kind {
                    super::web_content::Kind::Pdf => self.pdf_text(body).await?,
                    kind => {
                        blocking(move |_| {
                            super::web_content::to_text(kind, &body)
                                .map_err(|refusal| denied(&refusal))
                        })
                        .await?
                    }
                };
                let text: Arc<str> = Arc::from(format!("URL: {}\n\n{text}", fetched.url));
                self.cache.put(url.as_str().to_owned(), text.clone());
                text
            }
        };
        let mut output: String = text.chars().take(max_chars).collect();
        if output.len() < text.len() {
            output.push_str(&format!("\n\n[cut at {max_chars} characters]"));
        }
        Ok(ToolOutput::text(output))
    }
}
