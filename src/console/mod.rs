//! The web console: static HTML, CSS and JavaScript modules embedded in the binary and served
//! same-origin at `/console` (no Node build step, no CDN: the server may run offline).
//!
//! The console talks to the public API with the bearer token the operator pastes (kept in
//! `sessionStorage`, sent only in the `Authorization` header, never in a URL) and follows a
//! session's stream with `fetch` + a stream reader, resuming with `Last-Event-ID`.
//!
//! Every console response carries a strict Content-Security-Policy (scripts, styles and
//! connections from this origin only, no inline script or style, no framing), `nosniff`, no
//! referrer and `no-store`.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The Content-Security-Policy of every console response.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its path under `/console/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "",
        content_type: "text/html; charset=utf-8",
        body: include_str!("assets/index.html"),
    },
    Asset {
        path: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/style.css"),
    },
    Asset {
        path: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/app.js"),
    },
    Asset {
        path: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/api.js"),
    },
    Asset {
        path: "stream.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/stream.js"),
    },
    Asset {
        path: "transcript.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/transcript.js"),
    },
    Asset {
        path: "panels.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/panels.js"),
    },
    Asset {
        path: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_str!("assets/favicon.svg"),
    },
];

/// The console's routes (merged into the API router, outside `/v1` and its auth).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new().route(
        "/console",
        get(|| async { Redirect::permanent("/console/") }),
    );
    for asset in ASSETS {
        router = router.route(
            &format!("/console/{}", asset.path),
            get(move || async move { serve(asset) }),
        );
    }
    router
}

fn serve(asset: &'static Asset) -> Response {
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                HeaderName::from_static("cross-origin-opener-policy"),
                HeaderValue::from_static("same-origin"),
            ),
        ],
        asset.body,
    )
        .into_response()
}

/// The console's URL for a server listening on `addr`.
pub fn url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/console/")
}
