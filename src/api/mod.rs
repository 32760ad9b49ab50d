//! The HTTP API: one router per resource, merged here, plus the OpenAPI document.

pub mod ag_ui;
pub mod approvals;
pub mod archives;
pub mod contract;
pub mod cors;
pub mod events;
pub mod extract;
pub mod health;
pub mod idempotency;
pub mod mcp_servers;
pub mod operator;
pub mod outputs;
pub mod runs;
pub mod sessions;
pub mod skills;
pub mod stream_tickets;
pub mod subagents;
pub mod usage;
pub mod webhooks;

use crate::app::AppState;
use crate::error::{ApiError, ErrorCode};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use contract::CommonResponses;
use std::any::Any;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

/// The OpenAPI document, generated from the handlers; [`contract::CommonResponses`] adds the
/// error answers every operation shares.
#[derive(OpenApi)]
#[openapi(
    info(title = "Norma Server", description = "Multi-tenant network agent server"),
    paths(
        health::healthz,
        health::readyz,
        sessions::create_session,
        sessions::list_sessions,
        sessions::get_session,
        sessions::close_session,
        sessions::fork_session,
        outputs::get_output,
        archives::list_archives,
        archives::get_archive,
        runs::post_prompt,
        runs::cancel_run,
        runs::list_runs,
        runs::get_run,
        events::list_events,
        events::list_messages,
        events::stream,
        stream_tickets::issue_ticket,
        ag_ui::run,
        events::hook_status,
        approvals::list_approvals,
        approvals::answer_approval,
        approvals::list_grants,
        approvals::revoke_grant,
        usage::get_usage,
        webhooks::create_webhook,
        webhooks::list_webhooks,
        webhooks::get_webhook,
        webhooks::delete_webhook,
        webhooks::list_deliveries,
        mcp_servers::create_server,
        mcp_servers::list_servers,
        mcp_servers::get_server,
        mcp_servers::replace_server,
        mcp_servers::delete_server,
        skills::create_skill,
        skills::list_skills,
        skills::get_skill,
        skills::delete_skill,
        operator::get_budget,
        operator::put_budget,
        operator::delete_budget,
    ),
    components(schemas(crate::error::ErrorBody)),
    modifiers(&BearerAuth, &CommonResponses),
    tags((name = "sessions"), (name = "runs"), (name = "events"), (name = "approvals"), (name = "outputs"), (name = "usage"), (name = "webhooks"), (name = "mcp-servers"), (name = "skills"), (name = "operator"), (name = "health"))
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The operator token, whose SHA-256 is `operator.token_sha256` (never a \
                         tenant JWT)",
                    ))
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document as pretty JSON (what `openapi/openapi.json` holds).
/// The `next_after` cursor of a page read with `limit`: the last item's id when the page ended
/// at `limit` items or at the store's byte bound ([`crate::store::PAGE_BYTES`] of what
/// `bytes` counts; the next page may then be empty), `None` on the last page.
pub(crate) fn next_after<T>(
    page: &[T],
    limit: u32,
    bytes: impl Fn(&T) -> usize,
    id: impl Fn(&T) -> &str,
) -> Option<String> {
    let cut = page.len() == limit as usize
        || page.iter().map(bytes).sum::<usize>() >= crate::store::PAGE_BYTES;
    cut.then(|| page.last().map(|item| id(item).to_owned()))
        .flatten()
}

pub fn openapi_json() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    text.push('\n');
    text
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The full router with its middleware.
pub fn router(state: AppState) -> Router {
    let body_limit = state.settings.max_body_bytes;
    let cors = cors::layer(
        &state.settings.browser,
        state.settings.auth.is_development(),
    );
    // One stack, outermost first, applied with one `layer` (and CORS around it, which needs
    // a response body of its own type): each `Router::layer` boxes every route's service once
    // more, and a request clones every box on its way in (nine allocations per request for
    // nine layers; two now).
    let middleware = tower::ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            axum::http::header::AUTHORIZATION,
        ]))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(TraceLayer::new_for_http().make_span_with(make_span))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.runtime.metrics().clone(),
            count_request,
        ))
        .layer(axum::middleware::from_fn(refuse_nul_in_uri));
    let v1 = Router::new()
        .route(
            "/sessions",
            get(sessions::list_sessions).post(sessions::create_session),
        )
        .route(
            "/sessions/{id}",
            get(sessions::get_session).delete(sessions::close_session),
        )
        .route(
            "/sessions/{id}/outputs/{output_id}",
            get(outputs::get_output),
        )
        .route(
            "/sessions/{id}/prompts",
            axum::routing::post(runs::post_prompt),
        )
        .route("/sessions/{id}/runs", get(runs::list_runs))
        .route("/sessions/{id}/runs/{run_id}", get(runs::get_run))
        .route(
            "/sessions/{id}/runs/{run_id}/cancel",
            axum::routing::post(runs::cancel_run),
        )
        .route("/sessions/{id}/archives", get(archives::list_archives))
        .route(
            "/sessions/{id}/archives/{archive_id}",
            get(archives::get_archive),
        )
        .route("/sessions/{id}/events", get(events::list_events))
        .route("/sessions/{id}/messages", get(events::list_messages))
        .route("/sessions/{id}/stream", get(events::stream))
        .route("/sessions/{id}/ag-ui", axum::routing::post(ag_ui::run))
        .route(
            "/sessions/{id}/stream-tickets",
            axum::routing::post(stream_tickets::issue_ticket),
        )
        .route("/sessions/{id}/hooks", get(events::hook_status))
        .route(
            "/sessions/{id}/fork",
            axum::routing::post(sessions::fork_session),
        )
        .route("/sessions/{id}/approvals", get(approvals::list_approvals))
        .route(
            "/sessions/{id}/approvals/{approval_id}",
            axum::routing::post(approvals::answer_approval),
        )
        .route("/sessions/{id}/grants", get(approvals::list_grants))
        .route(
            "/sessions/{id}/grants/{grant_id}",
            axum::routing::delete(approvals::revoke_grant),
        )
        .route("/usage", get(usage::get_usage))
        .route(
            "/webhooks",
            get(webhooks::list_webhooks).post(webhooks::create_webhook),
        )
        .route(
            "/webhooks/{id}",
            get(webhooks::get_webhook).delete(webhooks::delete_webhook),
        )
        .route("/webhooks/{id}/deliveries", get(webhooks::list_deliveries))
        .route(
            "/mcp-servers",
            get(mcp_servers::list_servers).post(mcp_servers::create_server),
        )
        .route(
            "/mcp-servers/{name}",
            get(mcp_servers::get_server)
                .put(mcp_servers::replace_server)
                .delete(mcp_servers::delete_server),
        )
        .route(
            "/skills",
            get(skills::list_skills).post(skills::create_skill),
        )
        .route(
            "/skills/{name}",
            get(skills::get_skill).delete(skills::delete_skill),
        )
        .route(
            "/operator/tenants/{tenant}/budgets",
            get(operator::get_budget)
                .put(operator::put_budget)
                .delete(operator::delete_budget),
        );
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(|| async { openapi_document() }))
        .nest("/v1", v1)
        .merge(crate::console::router())
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this route",
            )
        })
        .layer(middleware)
        // Outermost: a preflight is answered before routing, and every answer (errors
        // included) carries the CORS headers an allowed origin needs to read it.
        .layer(cors)
        .with_state(state)
}

/// A NUL (`%00`) in the URI never reaches a handler (the store cannot keep it, so an id or
/// cursor carrying one would fail as a `500` on Postgres): in the path it names nothing
/// (`404 NOT_FOUND`, like any unknown id), in the query it is `422 INVALID_REQUEST`. Request
/// bodies are checked by [`extract::AppJson`].
async fn refuse_nul_in_uri(
    request: Request<axum::body::Body>,
    next: axum::middleware::Next,
) -> Response {
    let has_nul = |text: &str| text.as_bytes().windows(3).any(|w| w == b"%00");
    let uri = request.uri();
    if has_nul(uri.path()) {
        return ApiError::not_found("resource").into_response();
    }
    if uri.query().is_some_and(has_nul) {
        return ApiError::invalid("query parameters must not contain NUL characters (%00)")
            .with_details(serde_json::json!({ "field": "(query)" }))
            .into_response();
    }
    next.run(request).await
}

/// Counts every answered request by route template (never the raw path: ids stay out of the
/// labels), method and status, with the time to the response head.
async fn count_request(
    axum::extract::State(metrics): axum::extract::State<std::sync::Arc<crate::metrics::Metrics>>,
    request: Request<axum::body::Body>,
    next: axum::middleware::Next,
) -> Response {
    let began = std::time::Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let response = next.run(request).await;
    metrics.http_request(
        &method,
        route.as_ref().map(|path| path.as_str()),
        response.status().as_u16(),
        began.elapsed(),
    );
    response
}

fn openapi_document() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        openapi_json(),
    )
        .into_response()
}

fn make_span<B>(request: &Request<B>) -> tracing::Span {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |path| path.as_str());
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        request_id,
        tenant = tracing::field::Empty,
        session_id = tracing::field::Empty,
    )
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("handler panicked");
    ApiError::new(ErrorCode::Internal, "internal error").into_response()
}
