//! A session's transcript (events, as JSON pages and as SSE with replay), its history
//! (messages) and its hook status report.

use crate::api::extract::AppQuery;
use crate::api::runs::load_owned_session;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::hooks::runner::{HookRunner, HookStatus};
use crate::limits::{HoldError, HoldKind};
use crate::session_config::SessionConfig;
use crate::store::{EventRecord, MessageRecord};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    /// Return items with `seq` greater than this (default 0).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1..=1000 (default 100); outside that range `422 INVALID_REQUEST`. A page
    /// also ends after the item that brings it to 4 MiB of payload or content (one larger
    /// item comes alone), so a shorter page is not the end: page on with `next_after` until
    /// a page is empty.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl PageParams {
    fn resolve(&self) -> ApiResult<(i64, u32)> {
        let limit = self.limit.unwrap_or(100);
        if !(1..=1000).contains(&limit) {
            return Err(ApiError::invalid("limit must be between 1 and 1000"));
        }
        let after = self.after.unwrap_or(0);
        if after < 0 {
            return Err(ApiError::invalid("after must not be negative"));
        }
        Ok((after, limit))
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<EventRecord>,
    /// Pass as `after` for the next page (the last `seq` returned, or the given `after`); the
    /// end is an empty page.
    pub next_after: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessagePage {
    pub messages: Vec<MessageRecord>,
    /// Pass as `after` for the next page (the last `seq` returned, or the given `after`); the
    /// end is an empty page.
    pub next_after: i64,
}

/// Pages the session's events (the same events the SSE stream carries).
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = String, Path, description = "Session id"), PageParams),
    responses((status = 200, body = EventPage)),
    security(("bearer" = [])))]
pub async fn list_events(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<PageParams>,
) -> ApiResult<Json<EventPage>> {
    principal.require(scopes::SESSIONS_READ)?;
    let (after, limit) = params.resolve()?;
    let session = load_owned_session(&state, &principal, id).await?;
    let events = state
        .store
        .list_events(&principal.tenant, &session.id, after, limit)
        .await?;
    let next_after = events.last().map_or(after, |e| e.seq);
    Ok(Json(EventPage { events, next_after }))
}

/// The session's history: what the model has seen and said.
#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "events",
    params(("id" = String, Path, description = "Session id"), PageParams),
    responses((status = 200, body = MessagePage)),
    security(("bearer" = [])))]
pub async fn list_messages(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<PageParams>,
) -> ApiResult<Json<MessagePage>> {
    principal.require(scopes::SESSIONS_READ)?;
    let (after, limit) = params.resolve()?;
    let session = load_owned_session(&state, &principal, id).await?;
    let messages = state
        .store
        .list_messages_page(&principal.tenant, &session.id, after, limit)
        .await?;
    let next_after = messages.last().map_or(after, |m| m.seq);
    Ok(Json(MessagePage {
        messages,
        next_after,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// Replay events after this `seq` (the `Last-Event-ID` header wins when present).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// A stream ticket (`POST …/stream-tickets`) instead of `Authorization`, for a browser
    /// `EventSource`: read-only, this session only, reusable until it expires.
    #[param(max_length = 2048)]
    pub ticket: Option<String>,
}

/// Events read from the store per query when replaying or filling a gap.
const STORE_PAGE: u32 = 500;

/// A subscriber that has fallen more than [`SUBSCRIBER_BUFFER`] events behind the live channel
/// is caught up from the store while its connection keeps accepting data; once its connection
/// has accepted nothing for this long while it is behind, it gets `reconnect` and is closed.
///
/// [`SUBSCRIBER_BUFFER`]: crate::runtime::bus::SUBSCRIBER_BUFFER
pub const STALL_LIMIT: Duration = Duration::from_secs(2);

/// The caller's session `id` as read, with an `sse_streams` hold for a stream of it (one round
/// trip on Postgres); `404` when the session is not the caller's, `429 TENANT_LIMIT` when the
/// tenant's streams are all open. The stream keeps the hold until it ends.
pub(crate) async fn stream_hold(
    state: &AppState,
    principal: &Principal,
    id: &crate::ids::SessionId,
) -> ApiResult<(crate::store::SessionRecord, crate::limits::HoldGuard)> {
    state
        .runtime
        .holds()
        .acquire_on_session(&principal.tenant, id, HoldKind::SseStream)
        .await
        .map_err(|error| match error {
            HoldError::Limit(exceeded) => ApiError::from(exceeded),
            HoldError::Store(error) => ApiError::from(error),
        })?
        .ok_or_else(|| ApiError::not_found("session"))
}

fn reconnect(last_event_id: i64) -> Event {
    Event::default()
        .event("reconnect")
        .data(json!({ "last_event_id": last_event_id }).to_string())
}

fn sse_event(event: &EventRecord) -> Event {
    sse_frame(event, &serde_json::to_string(event).unwrap_or_default())
}

/// An SSE frame for `event` whose JSON text is already rendered.
fn sse_frame(event: &EventRecord, json: &str) -> Event {
    Event::default()
        .id(event.seq.to_string())
        .event(event.kind.clone())
        .data(json)
}

/// Server-sent events: replays everything after `Last-Event-ID` (or `?after=`), then follows
/// live without gap or duplicate. A client that falls behind but keeps reading is caught up
/// from the store; one that stops reading while behind gets a `reconnect` event with its last
/// id and is closed (resume with `Last-Event-ID`). A replica that shuts down sends every
/// stream `reconnect` too.
///
/// Authenticated by a bearer token or, for a browser `EventSource`, by `?ticket=` (see
/// `POST /v1/sessions/{id}/stream-tickets`; `401 TICKET_INVALID | TICKET_EXPIRED |
/// TICKET_WRONG_SESSION`).
#[utoipa::path(get, path = "/v1/sessions/{id}/stream", tag = "events",
    params(("id" = String, Path, description = "Session id"), StreamParams,
           ("Last-Event-ID" = Option<String>, Header, pattern = r"^[0-9]{1,18}$",
            description = "Resume after this event `seq` (what an `EventSource` sends when it reconnects); wins over `?after=`")),
    responses((status = 200, content_type = "text/event-stream",
               description = "Server-sent events without end: each frame is `id: <seq>`, `event: <type>` and `data:` an `EventRecord` as JSON; `event: reconnect` (`data: {\"last_event_id\"}`) asks the client to reconnect with `Last-Event-ID`"),
              (status = 401, body = ErrorBody, description = "No valid bearer token or ticket: `TICKET_INVALID`, `TICKET_EXPIRED`, `TICKET_WRONG_SESSION` for `?ticket=`"),
              (status = 429, body = ErrorBody, description = "TENANT_LIMIT: open streams (`sse_streams`)")),
    security(("bearer" = []), ()))]
pub async fn stream(
    State(state): State<AppState>,
    caller: crate::api::stream_tickets::StreamCaller,
    Path(id): Path<String>,
    headers: HeaderMap,
    AppQuery(params): AppQuery<StreamParams>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let principal = caller.for_session(&state, &id)?;
    principal.require(scopes::SESSIONS_READ)?;
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .filter(|v| (1..=18).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "Last-Event-ID must be a non-negative integer (1 to 18 digits)",
                    )
                    .with_details(json!({ "field": "Last-Event-ID" }))
                })?,
        ),
        None => None,
    };
    if params.after.is_some_and(|after| after < 0) {
        return Err(ApiError::invalid("after must not be negative")
            .with_details(json!({ "field": "after" })));
    }
    let after = last_event_id.or(params.after).unwrap_or(0);
    // Subscribed before the session is read, so an event committed after the read reaches the
    // stream live: the backlog read from the store is the events up to the session's last one
    // as read (none when it has nothing after `after`). Nothing is yielded before the session
    // is known to be the caller's; then the channel is named the tenant's (for its catch-up
    // from the store). A request refused after subscribing (not the caller's session, a
    // limit) leaves no channel behind: `_unheard` drops after `live` (declared before it).
    let bus = state.runtime.bus();
    let subscribed_to = crate::ids::SessionId::from_string(id.clone());
    let _unheard = bus.drop_when_unheard(&subscribed_to);
    let mut live = bus.subscribe(&subscribed_to);
    tracing::Span::current().record("session_id", subscribed_to.as_str());
    // The session as read and the stream's hold, in one round trip on Postgres: the open
    // stream counts against the tenant's `sse_streams` on every replica until the client
    // goes (the hold is dropped with the stream). Not the caller's session: no hold, `404`.
    let (session, hold) = stream_hold(&state, &principal, &subscribed_to).await?;
    bus.follow(&principal.tenant, &session.id);
    let horizon = session.last_event_seq;
    let store = state.store.clone();
    let tenant = principal.tenant.clone();
    let session_id = session.id.clone();
    let shutdown = state.runtime.shutdown_token();
    let subscribed = state.runtime.metrics().sse_subscribed();
    let events = async_stream::stream! {
        let _hold = hold;
        let _subscribed = subscribed;
        let mut last = after;
        while last < horizon {
            match store.list_events(&tenant, &session_id, last, STORE_PAGE).await {
                Ok(page) if page.is_empty() => break,
                Ok(page) => {
                    for event in &page {
                        last = event.seq;
                        yield Ok(sse_event(event));
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "SSE backlog read failed");
                    yield Ok(reconnect(last));
                    return;
                }
            }
        }
        // How long the client took to accept the last event yielded (the time this stream was
        // not polled because the connection was not draining).
        let mut last_wait = Duration::ZERO;
        loop {
            // A stopping replica sends its clients elsewhere: `reconnect` with the last id.
            let received = tokio::select! {
                biased;
                () = shutdown.cancelled() => None,
                received = live.recv() => Some(received),
            };
            let Some(received) = received else {
                yield Ok(reconnect(last));
                return;
            };
            match received {
                Ok(event) if event.seq <= last => {}
                Ok(event) => {
                    // Fill a gap from the store: events the channel overwrote before this
                    // subscriber got them (a burst larger than its buffer), or a channel that
                    // was recreated meanwhile.
                    while last < event.seq - 1 {
                        let limit = (event.seq - 1 - last).min(i64::from(STORE_PAGE)) as u32;
                        let missing = match store.list_events(&tenant, &session_id, last, limit).await {
                            Ok(missing) if !missing.is_empty() => missing,
                            Ok(_) => break,
                            Err(error) => {
                                tracing::warn!(%error, "SSE gap read failed");
                                yield Ok(reconnect(last));
                                return;
                            }
                        };
                        for missed in &missing {
                            last = missed.seq;
                            let offered = Instant::now();
                            yield Ok(sse_event(missed));
                            if offered.elapsed() >= STALL_LIMIT {
                                // Behind, and the connection stopped draining.
                                yield Ok(reconnect(last));
                                return;
                            }
                        }
                    }
                    if event.seq > last {
                        last = event.seq;
                        let offered = Instant::now();
                        yield Ok(sse_frame(&event, &event.json));
                        last_wait = offered.elapsed();
                    }
                }
                // The channel overwrote events this subscriber had not received. A client that
                // keeps reading is caught up from the store (the next `recv` returns the oldest
                // event still buffered and the gap is filled above); one whose connection
                // accepted nothing for `STALL_LIMIT` is told to reconnect.
                Err(RecvError::Lagged(_)) if last_wait >= STALL_LIMIT => {
                    yield Ok(reconnect(last));
                    return;
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HookStatusReport {
    /// One entry per configured hook; clients branch on `status_token`.
    #[schema(value_type = Vec<Object>)]
    pub hooks: Vec<HookStatus>,
}

/// The status of every hook the session configures (`HOOK_INSTALLED_OK`,
/// `HOOK_CONFIG_DISABLED`, `HOOK_MISSING` + `missing_reason`, `HOOK_UNSUPPORTED`).
#[utoipa::path(get, path = "/v1/sessions/{id}/hooks", tag = "sessions",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = HookStatusReport)),
    security(("bearer" = [])))]
pub async fn hook_status(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<HookStatusReport>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let config: SessionConfig = serde_json::from_value(session.config)
        .map_err(|_| ApiError::new(crate::error::ErrorCode::Internal, "internal error"))?;
    let (_, hooks) = HookRunner::from_config(&config.hooks, state.runtime.hook_catalog())
        .map_err(|error| ApiError::invalid(error.to_string()))?;
    Ok(Json(HookStatusReport { hooks }))
}
