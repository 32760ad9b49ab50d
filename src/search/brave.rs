//! The Brave Search API: `GET {endpoint}?q=…&count=N` with `X-Subscription-Token`; the
//! answer's `web.results` carry `url`, `title` and `description`.

use super::{SearchBackend, SearchHit, SearchQuery, SearchRequest};
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Deserialize;

/// Brave's web search endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.search.brave.com/res/v1/web/search";

/// The Brave Search API with one subscription token.
pub struct Brave {
    endpoint: url::Url,
    token: HeaderValue,
}

impl std::fmt::Debug for Brave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Brave")
            .field("endpoint", &self.endpoint.as_str())
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Brave {
    /// The API at `endpoint` with the subscription token `key`.
    pub fn new(endpoint: url::Url, key: &str) -> Result<Self, String> {
        let mut token = HeaderValue::from_str(key)
            .map_err(|_| "`api_key` is not a valid header value".to_owned())?;
        token.set_sensitive(true);
        Ok(Self { endpoint, token })
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    web: Option<Web>,
}

#[derive(Deserialize)]
struct Web {
    #[serde(default)]
    results: Vec<Hit>,
}

#[derive(Deserialize)]
struct Hit {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
}

impl SearchBackend for Brave {
    fn name(&self) -> &'static str {
        "brave"
    }

    fn request(&self, query: &SearchQuery) -> SearchRequest {
        let mut url = self.endpoint.clone();
        url.query_pairs_mut()
            .append_pair("q", &query.query)
            .append_pair("count", &query.count.to_string());
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        headers.insert("x-subscription-token", self.token.clone());
        SearchRequest { url, headers }
    }

    fn parse(&self, body: &[u8]) -> Result<Vec<SearchHit>, String> {
        let answer: Answer = serde_json::from_slice(body)
            .map_err(|error| format!("not a Brave Search answer: {error}"))?;
        Ok(answer
            .web
            .map(|web| web.results)
            .unwrap_or_default()
            .into_iter()
            .map(|hit| SearchHit {
                title: hit.title,
                url: hit.url,
                snippet: hit.description,
            })
            .collect())
    }
}
