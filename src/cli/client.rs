//! The terminal client's HTTP side: one bearer token, the server's stable error codes, and a
//! session stream that resumes with `Last-Event-ID` after a drop.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use reqwest::Method;
use serde_json::Value;

/// Largest response body the client reads into memory (a page of events, an output).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// How long one request (not a stream) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What a client command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The server answered an error body (`code` is its stable code).
    #[error("{code}: {message} (HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot reach the server: {0}")]
    Http(#[from] reqwest::Error),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A client of one server with one token.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
    streaming: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: &str) -> Result<Self, CliError> {
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--url must start with http:// or https://, got {base:?}"
            )));
        }
        if token.is_empty() {
            return Err(CliError::Usage(
                "no token: pass --token or set NORMA_TOKEN (norma serve prints one in development \
                 mode; norma token --tenant dev mints one)"
                    .into(),
            ));
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        let streaming = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            base,
            token: token.to_owned(),
            http,
            streaming,
        })
    }

    /// Sends a request and returns the JSON body (Null when empty), or the API error.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let bytes = read_bounded(response).await?;
        let json: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok(json);
        }
        Err(CliError::Api {
            status: status.as_u16(),
            code: json["code"].as_str().unwrap_or("HTTP_ERROR").to_owned(),
            message: json["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect()),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// The session's events after `after`, live, for as long as the caller reads: every
    /// event once, in order; a dropped connection (or the server's `reconnect`) resumes with
    /// `Last-Event-ID` after a short pause. Fatal answers (401, 403, 404) end the stream.
    pub fn follow(
        &self,
        session: &str,
        after: i64,
    ) -> impl Stream<Item = Result<Value, CliError>> + Send + 'static {
        let client = self.clone();
        let path = format!("/v1/sessions/{}/stream", encode(session));
        async_stream::stream! {
            let mut last = after;
            let mut delay = Duration::from_millis(200);
            loop {
                let mut request = client
                    .streaming
                    .get(format!("{}{path}", client.base))
                    .bearer_auth(&client.token)
                    .header("Accept", "text/event-stream");
                if last > 0 {
                    request = request.header("Last-Event-ID", last.to_string());
                }
                match request.send().await {
                    Ok(response) if response.status().is_success() => {
                        delay = Duration::from_millis(200);
                        let mut events = response.bytes_stream().eventsource();
                        while let Some(event) = events.next().await {
                            let Ok(event) = event else { break };
                            if event.event == "reconnect" {
                                break;
                            }
                            let Ok(seq) = event.id.parse::<i64>() else { continue };
                            if seq <= last {
                                continue;
                            }
                            last = seq;
                            if let Ok(value) = serde_json::from_str::<Value>(&event.data) {
                                yield Ok(value);
                            }
                        }
                    }
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        let error = CliError::Api {
                            status,
                            code: body["code"].as_str().unwrap_or("HTTP_ERROR").to_owned(),
                            message: body["message"].as_str().unwrap_or("").to_owned(),
                        };
                        if matches!(status, 401 | 403 | 404) {
                            yield Err(error);
                            return;
                        }
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn read_bounded(response: reqwest::Response) -> Result<Vec<u8>, CliError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(CliError::Usage(format!(
                "the server's answer is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Percent-encodes a path segment (ids are URL-safe; anything else is encoded).
pub fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}
