//! SearXNG: `GET {endpoint}/search?q=…&format=json`; the answer's `results` carry `url`,
//! `title` and `content`. The instance must allow the JSON format (`search.formats: [html,
//! json]` in its `settings.yml`); one that does not answers 403, which WebSearch reports.

use super::{SearchBackend, SearchHit, SearchQuery, SearchRequest};
use serde::Deserialize;

/// A SearXNG instance.
#[derive(Clone, Debug)]
pub struct Searxng {
    search_url: url::Url,
}

impl Searxng {
    /// The instance at `base` (its search endpoint is `base` + `/search`).
    pub fn new(mut base: url::Url) -> Self {
        let path = base.path().trim_end_matches('/').to_owned();
        let path = if path.ends_with("/search") {
            path
        } else {
            format!("{path}/search")
        };
        base.set_path(&path);
        base.set_query(None);
        base.set_fragment(None);
        Self { search_url: base }
    }
}

#[derive(Deserialize)]
struct Answer {
    results: Vec<Hit>,
}

#[derive(Deserialize)]
struct Hit {
    #[serde(default)]
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: String,
}

impl SearchBackend for Searxng {
    fn name(&self) -> &'static str {
        "searxng"
    }

    fn request(&self, query: &SearchQuery) -> SearchRequest {
        let mut url = self.search_url.clone();
        url.query_pairs_mut()
            .append_pair("q", &query.query)
            .append_pair("format", "json")
            .append_pair("pageno", "1");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        SearchRequest { url, headers }
    }

    fn parse(&self, body: &[u8]) -> Result<Vec<SearchHit>, String> {
        let answer: Answer = serde_json::from_slice(body)
            .map_err(|error| format!("not a SearXNG JSON answer: {error}"))?;
        Ok(answer
            .results
            .into_iter()
            .map(|hit| SearchHit {
                title: hit.title,
                url: hit.url,
                snippet: hit.content,
            })
            .collect())
    }
}
