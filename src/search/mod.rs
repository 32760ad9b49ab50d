//! WebSearch backends: where the WebSearch tool sends a query, behind one trait
//! ([`SearchBackend`]): [`searxng`] (self-hosted, keyless, its JSON API) and [`brave`] (the
//! Brave Search API, keyed).
//!
//! **Configured like providers**, per server (`[search]`) and per tenant
//! (`[search.tenants.<id>]`, replacing the server's backend for that tenant's sessions).
//! Nothing configured means no WebSearch tool: the tool is left out of the session's tools
//! and `GET /v1/sessions/{id}` lists it under `absent_tools` with the reason. A configuration
//! that is present but wrong (no endpoint for SearXNG, no key for Brave, an endpoint that is
//! not an `http(s)` URL, a key or endpoint without a backend) is a start-up error: search is
//! never silently omitted (SPEC D8).
//!
//! **Through the broker.** A backend only builds the request (URL and headers) and parses the
//! answer; the request itself is the egress broker's GET as *infrastructure traffic*: the
//! address checks, pinning, one deadline and a byte cap, and an `egress` event, but never the
//! permission ladder. An operator's SearXNG on a private address is reached when its block is
//! listed in `egress.allow_private_cidrs`.

pub mod brave;
pub mod searxng;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 400;
/// The most results one search returns (and the default).
pub const MAX_RESULTS: usize = 20;
/// The default number of results.
pub const DEFAULT_RESULTS: usize = 10;

/// Which search API a backend speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackendKind {
    /// A SearXNG instance's JSON API (`format=json` must be enabled in its `settings.yml`).
    Searxng,
    /// The Brave Search API (`X-Subscription-Token`).
    Brave,
}

/// One backend's settings (`[search]` itself, or `[search.tenants.<id>]`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchBackendSettings {
    /// `searxng` or `brave`; absent: no backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<SearchBackendKind>,
    /// SearXNG: the instance's base URL (required). Brave: the API URL (default
    /// [`brave::DEFAULT_ENDPOINT`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Brave: the subscription token (required); never serialized, redacted in `Debug`.
    #[serde(skip_serializing)]
    pub api_key: Option<SecretString>,
}

/// `[search]`: the WebSearch backend of the server and of tenants.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<SearchBackendKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing)]
    pub api_key: Option<SecretString>,
    /// One deadline for a search request (every byte of the answer).
    pub timeout_seconds: u64,
    /// The largest answer read from a backend.
    pub max_response_bytes: usize,
    /// Backends per tenant id, replacing the server's for that tenant.
    pub tenants: BTreeMap<String, SearchBackendSettings>,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            backend: None,
            endpoint: None,
            api_key: None,
            timeout_seconds: 15,
            max_response_bytes: 2 * 1024 * 1024,
            tenants: BTreeMap::new(),
        }
    }
}

/// One search as a backend is asked for it (already bounded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchQuery {
    pub query: String,
    /// 1..=[`MAX_RESULTS`].
    pub count: usize,
}

/// One result as a backend gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// The request a backend sends: a GET of `url` with `headers`.
#[derive(Clone, Debug)]
pub struct SearchRequest {
    pub url: url::Url,
    pub headers: reqwest::header::HeaderMap,
}

/// A search API: builds the request, parses the answer. The request is sent by the egress
/// broker (see the module docs), never by the backend.
pub trait SearchBackend: Send + Sync + std::fmt::Debug {
    /// `searxng` or `brave` (logs, errors).
    fn name(&self) -> &'static str;
    fn request(&self, query: &SearchQuery) -> SearchRequest;
    /// The hits of an answer body; `Err` with what is wrong for an answer of another shape.
    fn parse(&self, body: &[u8]) -> Result<Vec<SearchHit>, String>;
}

/// The backends of the server and of each tenant, built and checked at start-up.
#[derive(Clone, Debug, Default)]
pub struct SearchBackends {
    server: Option<Arc<dyn SearchBackend>>,
    tenants: BTreeMap<String, Arc<dyn SearchBackend>>,
    /// Bounds of every search request.
    pub timeout: Duration,
    pub max_response_bytes: usize,
}

/// Why WebSearch is absent for a tenant's sessions (shown in `absent_tools`).
pub const NO_BACKEND: &str = "no search backend is configured for this tenant (the operator \
     sets [search] backend = \"searxng\" or \"brave\", or [search.tenants.<id>])";

impl SearchBackends {
    /// Builds the backends `settings` describe; a backend configured wrongly is the error
    /// (naming the setting), so start-up refuses it.
    pub fn from_settings(settings: &SearchSettings) -> Result<Self, String> {
        let server = build(
            "search",
            &SearchBackendSettings {
                backend: settings.backend,
                endpoint: settings.endpoint.clone(),
                api_key: settings.api_key.clone(),
            },
        )?;
        let mut tenants = BTreeMap::new();
        for (tenant, entry) in &settings.tenants {
            let section = format!("search.tenants.{tenant}");
            match build(&section, entry)? {
                Some(backend) => {
                    tenants.insert(tenant.clone(), backend);
                }
                None => return Err(format!("{section}: `backend` is required")),
            }
        }
        if settings.timeout_seconds == 0 {
            return Err("search.timeout_seconds must be at least 1".into());
        }
        if settings.max_response_bytes < 1024 {
            return Err("search.max_response_bytes must be at least 1024".into());
        }
        Ok(Self {
            server,
            tenants,
            timeout: Duration::from_secs(settings.timeout_seconds),
            max_response_bytes: settings.max_response_bytes,
        })
    }

    /// The backend of `tenant`'s sessions, or why there is none.
    pub fn for_tenant(&self, tenant: &str) -> Result<Arc<dyn SearchBackend>, &'static str> {
        self.tenants
            .get(tenant)
            .or(self.server.as_ref())
            .cloned()
            .ok_or(NO_BACKEND)
    }
}

/// The backend of one settings section (`None`: nothing configured there).
fn build(
    section: &str,
    settings: &SearchBackendSettings,
) -> Result<Option<Arc<dyn SearchBackend>>, String> {
    use secrecy::ExposeSecret;
    let key = settings
        .api_key
        .as_ref()
        .map(|key| key.expose_secret().trim().to_owned());
    let endpoint = match &settings.endpoint {
        Some(text) => Some(parse_endpoint(section, text)?),
        None => None,
    };
    match settings.backend {
        None if endpoint.is_some() || key.is_some() => Err(format!(
            "{section}: `endpoint` or `api_key` is set but `backend` is not (\"searxng\" or \
             \"brave\")"
        )),
        None => Ok(None),
        Some(SearchBackendKind::Searxng) => {
            if key.is_some() {
                return Err(format!(
                    "{section}: SearXNG takes no `api_key` (it is keyless; protect it by network)"
                ));
            }
            let endpoint = endpoint.ok_or_else(|| {
                format!("{section}: backend \"searxng\" needs `endpoint`, the instance's base URL")
            })?;
            Ok(Some(Arc::new(searxng::Searxng::new(endpoint))))
        }
        Some(SearchBackendKind::Brave) => {
            let key = key.filter(|key| !key.is_empty()).ok_or_else(|| {
                format!("{section}: backend \"brave\" needs `api_key` (the subscription token)")
            })?;
            let endpoint = match endpoint {
                Some(endpoint) => endpoint,
                None => url::Url::parse(brave::DEFAULT_ENDPOINT).map_err(|e| e.to_string())?,
            };
            let backend = brave::Brave::new(endpoint, &key)
                .map_err(|problem| format!("{section}: {problem}"))?;
            Ok(Some(Arc::new(backend)))
        }
    }
}

fn parse_endpoint(section: &str, text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text.trim())
        .map_err(|error| format!("{section}.endpoint `{text}`: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!(
            "{section}.endpoint `{text}` must be an http(s) URL with a host"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{section}.endpoint must not carry credentials"));
    }
    Ok(url)
}

/// `text` without HTML tags and entities for the common ones, whitespace collapsed, cut at
/// `max` characters (snippets of both APIs carry `<strong>` highlights).
pub fn plain(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            c => out.push(c),
        }
    }
    let out = out
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'");
    let collapsed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max {
        collapsed
    } else {
        let mut cut: String = collapsed.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests;
