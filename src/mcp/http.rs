//! The Streamable HTTP transport of MCP servers (`transport: http`): rmcp's client transport
//! on top of [`EgressHttp`], an implementation of rmcp's [`StreamableHttpClient`] over the
//! egress client's checked `reqwest` client.
//!
//! So every request of an HTTP MCP server — the handshake, each call, the event stream, the
//! session's end — goes through the egress address policy: the host name is resolved once and
//! refused when any of its addresses is not public (unless the operator lists its block in
//! `egress.allow_private_cidrs`), an IP-literal URL is checked before each request, the
//! connection is pinned to the checked addresses, proxies are ignored and redirects are never
//! followed. Answers are bounded: a JSON answer by [`MAX_JSON_BYTES`], one event of a stream
//! by [`MAX_EVENT_BYTES`], an error page by [`MAX_ERROR_BYTES`]; each call by its server's
//! timeout and the start by the start timeout (see `server`).
//!
//! Authentication is a bearer token and/or static headers from the server's entry; OAuth 2.1
//! discovery is not built (see README "MCP servers").

use super::config::McpServerConfig;
use crate::egress::{EgressClient, EgressError};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, WWW_AUTHENTICATE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, SseError, StreamableHttpClient,
    StreamableHttpClientTransportConfig, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The largest JSON answer read (one JSON-RPC message).
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;
/// The largest event of an event stream.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
/// The part of an error page kept for the server's status.
pub const MAX_ERROR_BYTES: usize = 1024;

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// Why a request of an HTTP MCP server failed. The egress detail (which address a name
/// resolved to) stays in the server log; the tenant's status says what kind of failure it was.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("the egress policy refuses this address (it is not public)")]
    Refused,
    #[error("the host name does not resolve")]
    Resolve,
    #[error("{0}")]
    Transport(String),
    #[error("an answer is larger than {0} bytes")]
    TooLarge(usize),
}

impl HttpError {
    fn from_egress(error: EgressError) -> Self {
        tracing::warn!(%error, "MCP server request refused or failed");
        match error {
            EgressError::Refused { .. } => Self::Refused,
            EgressError::Resolve { .. } => Self::Resolve,
            EgressError::TooLarge(cap) => Self::TooLarge(cap),
            other => Self::Transport(other.to_string()),
        }
    }
}

type Error = StreamableHttpError<HttpError>;

/// rmcp's HTTP client interface over the egress client (see the module docs).
#[derive(Clone)]
pub struct EgressHttp {
    egress: EgressClient,
    http: reqwest::Client,
}

impl EgressHttp {
    pub fn new(egress: &EgressClient) -> Self {
        Self {
            egress: egress.clone(),
            http: egress.self_bounded_http(),
        }
    }

    /// Checks the URL (an IP literal against the address policy) and builds the request.
    fn request(
        &self,
        method: reqwest::Method,
        uri: &str,
        session_id: Option<&str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(url::Url, reqwest::RequestBuilder), Error> {
        let url = url::Url::parse(uri).map_err(|error| {
            StreamableHttpError::Client(HttpError::Transport(error.to_string()))
        })?;
        self.egress
            .check_endpoint(uri)
            .map_err(|error| StreamableHttpError::Client(HttpError::from_egress(error)))?;
        let mut request = self.http.request(method, url.clone());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(token) = auth {
            request = request.bearer_auth(token);
        }
        if let Some(id) = session_id {
            request = request.header(SESSION_ID, id);
        }
        Ok((url, request))
    }

    async fn send(
        &self,
        url: &url::Url,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        request.send().await.map_err(|error| {
            StreamableHttpError::Client(HttpError::from_egress(
                crate::egress::client::classify_error(url, &error),
            ))
        })
    }
}

fn media_type(headers: &HeaderMap) -> Option<String> {
    headers.get(CONTENT_TYPE).and_then(|value| {
        value.to_str().ok().map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
    })
}

/// 401 and 403 answers, and 429 / 5xx as status errors (rmcp classifies them).
fn refusal(response: &reqwest::Response) -> Option<Error> {
    let status = response.status();
    let challenge = || {
        response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("Bearer")
            .chars()
            .take(MAX_ERROR_BYTES)
            .collect::<String>()
    };
    match status {
        StatusCode::UNAUTHORIZED => Some(StreamableHttpError::AuthRequired(
            AuthRequiredError::new(challenge()),
        )),
        StatusCode::FORBIDDEN => Some(StreamableHttpError::UnexpectedServerResponse(
            format!(
                "HTTP 403: the server refuses the credentials ({})",
                challenge()
            )
            .into(),
        )),
        StatusCode::TOO_MANY_REQUESTS => Some(HttpStatusError::new(status.as_u16(), None).into()),
        status if status.is_server_error() => {
            Some(HttpStatusError::new(status.as_u16(), None).into())
        }
        _ => None,
    }
}

/// The body of `response`, at most `cap` bytes (`TooLarge` past it).
async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, Error> {
    if response
        .content_length()
        .is_some_and(|len| len > cap as u64)
    {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: cap });
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            StreamableHttpError::Client(HttpError::Transport(error.to_string()))
        })?;
        if body.len() + chunk.len() > cap {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: cap });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The first [`MAX_ERROR_BYTES`] of an error page, as text.
async fn error_text(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < MAX_ERROR_BYTES {
        match stream.next().await {
            Some(Ok(chunk)) => {
                let room = MAX_ERROR_BYTES - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).trim().to_owned()
}

/// The events of an event stream, each at most `max` bytes.
fn events(response: reqwest::Response, max: usize) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(EventBound {
        inner: response.bytes_stream().boxed(),
        max,
        event_bytes: 0,
        line_start: true,
        failed: false,
    })
    .boxed()
}

/// Ends a byte stream with an error once one event (the bytes up to a blank line) is larger
/// than `max`.
struct EventBound<E> {
    inner: BoxStream<'static, Result<Bytes, E>>,
    max: usize,
    event_bytes: usize,
    /// Whether the last byte seen ended a line (so a `\n` now ends the event).
    line_start: bool,
    failed: bool,
}

impl<E: std::fmt::Display> Stream for EventBound<E> {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                for &byte in chunk.iter() {
                    match byte {
                        b'\n' if self.line_start => self.event_bytes = 0,
                        b'\n' => self.line_start = true,
                        b'\r' => {}
                        _ => {
                            self.line_start = false;
                            self.event_bytes += 1;
                        }
                    }
                    if self.event_bytes > self.max {
                        self.failed = true;
                        let max = self.max;
                        return Poll::Ready(Some(Err(std::io::Error::other(format!(
                            "an event is larger than {max} bytes"
                        )))));
                    }
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(error))) => {
                Poll::Ready(Some(Err(std::io::Error::other(error.to_string()))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl StreamableHttpClient for EgressHttp {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let attached = session_id.is_some();
        let (url, request) = self.request(
            reqwest::Method::POST,
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
        )?;
        let body = serde_json::to_vec(&message)?;
        let request = request
            .header(ACCEPT, format!("{JSON}, {EVENT_STREAM}"))
            .header(CONTENT_TYPE, JSON)
            .body(body);
        let response = self.send(&url, request).await?;
        if let Some(error) = refusal(&response) {
            return Err(error);
        }
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        let new_session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let kind = media_type(response.headers());
        if !status.is_success() {
            if kind.as_deref() == Some(JSON) {
                let body = read_capped(response, limits.max_json_response_size.min(MAX_JSON_BYTES))
                    .await?;
                if let Ok(message @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&body)
                {
                    return Ok(StreamableHttpPostResponse::Json(message, new_session));
                }
                let text =
                    String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BYTES)]).into_owned();
                return Err(StreamableHttpError::UnexpectedServerResponse(
                    format!("HTTP {status}: {text}").into(),
                ));
            }
            let text = error_text(response).await;
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}: {text}").into(),
            ));
        }
        match kind.as_deref() {
            Some(EVENT_STREAM) => Ok(StreamableHttpPostResponse::Sse(
                events(response, limits.max_sse_event_size.min(MAX_EVENT_BYTES)),
                new_session,
            )),
            Some(JSON) => {
                let body = read_capped(response, limits.max_json_response_size.min(MAX_JSON_BYTES))
                    .await?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(message) => Ok(StreamableHttpPostResponse::Json(message, new_session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(error) => Err(StreamableHttpError::Deserialize(error)),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            )),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let (url, request) = self.request(
            reqwest::Method::DELETE,
            &uri,
            Some(&session_id),
            auth_header,
            custom_headers,
        )?;
        let response = self.send(&url, request).await?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED || response.status().is_success() {
            return Ok(());
        }
        Err(StreamableHttpError::UnexpectedServerResponse(
            format!("HTTP {} to the session's end", response.status()).into(),
        ))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            MAX_EVENT_BYTES,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let (url, mut request) = self.request(
            reqwest::Method::GET,
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
        )?;
        request = request.header(ACCEPT, EVENT_STREAM);
        if let Some(id) = last_event_id {
            request = request.header(LAST_EVENT_ID, id);
        }
        let response = self.send(&url, request).await?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(error) = refusal(&response) {
            return Err(error);
        }
        if !response.status().is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {} to the event stream", response.status()).into(),
            ));
        }
        if media_type(response.headers()).as_deref() != Some(EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(media_type(
                response.headers(),
            )));
        }
        Ok(events(response, max_sse_event_size.min(MAX_EVENT_BYTES)))
    }
}

/// The transport of an `http` server entry, through `egress`.
pub fn transport(
    config: &McpServerConfig,
    egress: &EgressClient,
) -> Result<StreamableHttpClientTransport<EgressHttp>, String> {
    let url = config
        .url
        .clone()
        .ok_or_else(|| "the entry has no url".to_owned())?;
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name {name:?}"))?;
        let mut value = HeaderValue::from_str(value.expose())
            .map_err(|_| format!("invalid value of header {name}"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let mut settings = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .max_json_response_size(MAX_JSON_BYTES)
        .max_sse_event_size(MAX_EVENT_BYTES)
        .max_error_response_size(MAX_ERROR_BYTES)
        .max_concurrent_requests(8);
    if let Some(token) = &config.bearer_token {
        settings = settings.auth_header(token.expose().to_owned());
    }
    Ok(StreamableHttpClientTransport::with_client(
        EgressHttp::new(egress),
        settings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(chunks: Vec<&'static [u8]>, max: usize) -> Vec<Result<Bytes, String>> {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        );
        let bound = EventBound {
            inner: stream.boxed(),
            max,
            event_bytes: 0,
            line_start: true,
            failed: false,
        };
        bound.map(|r| r.map_err(|e| e.to_string())).collect().await
    }

    #[tokio::test]
    async fn an_event_larger_than_the_bound_ends_the_stream() {
        let ok = collect(vec![b"data: abc\n\n", b"data: def\n\n"], 9).await;
        assert!(ok.iter().all(Result::is_ok));
        let cut = collect(vec![b"data: abc\n", b"data: defghij\n\n"], 12).await;
        assert!(
            cut.last()
                .unwrap()
                .as_ref()
                .unwrap_err()
                .contains("larger than 12")
        );
    }
}
