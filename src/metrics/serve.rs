//! The metrics listener: `GET /metrics` on `metrics_bind`, a separate address from the API
//! (loopback or a cluster-internal port), without a token. It answers nothing else, and the
//! public listener has no `/metrics` route, so a scrape never reaches the public API and the
//! API never serves metrics.

use super::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// Samples gauges that are read rather than counted (e.g. queued runs) just before a scrape.
pub type Sampler = Arc<dyn Fn(&Metrics) + Send + Sync>;

#[derive(Clone)]
struct Scrape {
    metrics: Arc<Metrics>,
    sample: Sampler,
}

/// The OpenMetrics text format the exposition is written in.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The router of the metrics listener.
pub fn router(metrics: Arc<Metrics>, sample: Sampler) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(Scrape { metrics, sample })
}

async fn scrape(State(scrape): State<Scrape>) -> Response {
    (scrape.sample)(&scrape.metrics);
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        scrape.metrics.render(),
    )
        .into_response()
}

/// Serves the metrics on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    sample: Sampler,
    stop: tokio_util::sync::CancellationToken,
) {
    let served = axum::serve(listener, router(metrics, sample))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "metrics listener stopped");
    }
}
