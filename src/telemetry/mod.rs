//! Logging and tracing: a `tracing` subscriber (text or JSON lines) and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OpenTelemetry span export over OTLP/HTTP (the other
//! `OTEL_*` variables of the exporter and batch processor apply, e.g.
//! `OTEL_BSP_SCHEDULE_DELAY`). Runs, model calls and tool calls are spans following the
//! OpenTelemetry GenAI conventions ([`genai`]); text log lines leave out the attributes only
//! OpenTelemetry needs ([`text_fields`]).

pub mod genai;
pub mod text_fields;

use crate::config::LogSettings;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Flushes and stops span export when dropped (last thing before exit).
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("opentelemetry shutdown: {error}");
        }
    }
}

/// Installs the global subscriber. Call before the async runtime starts (the OTLP exporter
/// uses a blocking HTTP client on its own thread).
pub fn init(settings: &LogSettings) -> TelemetryGuard {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let provider = otel_provider();
    let otel_layer = provider
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("norma")));
    let registry = tracing_subscriber::registry().with(filter).with(otel_layer);
    let result = if settings.json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true),
            )
            .try_init()
    } else {
        registry
            .with(tracing_subscriber::fmt::layer().fmt_fields(text_fields::TextFields))
            .try_init()
    };
    if let Err(error) = result {
        eprintln!("tracing already initialised: {error}");
    }
    TelemetryGuard { provider }
}

fn otel_provider() -> Option<SdkTracerProvider> {
    std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT")?;
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("OTLP exporter disabled: {error}");
            return None;
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("norma")
        .build();
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    )
}
