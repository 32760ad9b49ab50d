//! The fields the text log layer writes: every field of an event and of the spans around it,
//! except the attributes only OpenTelemetry needs.
//!
//! The GenAI spans ([`super::genai`]) carry fixed attributes for trace backends (`otel.name`,
//! `otel.kind`, `gen_ai.operation.name`, `gen_ai.system` …), the session id twice (as
//! `gen_ai.conversation.id` and `session_id`) and, when the operator turns
//! `telemetry.capture_content` on, prompts, outputs, tool arguments and results. A text log line
//! repeats its spans' fields, so each would be formatted for every span and printed on every
//! line logged inside it: the text layer leaves out `otel.*` and `gen_ai.*` but for the model,
//! the token counts, the finish reasons and the tool's name and call id. The JSON layer and the
//! OpenTelemetry export keep every field.

use std::fmt;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The `gen_ai.*` attributes a text log line keeps.
const KEPT_GENAI: [&str; 7] = [
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
];

/// Whether the text layer leaves the field out.
fn omitted(name: &str) -> bool {
    name.starts_with("otel.") || (name.starts_with("gen_ai.") && !KEPT_GENAI.contains(&name))
}

/// [`FormatFields`] of the text layer: `name=value` pairs separated by spaces (the event's
/// `message` bare), the OpenTelemetry-only attributes left out (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
pub struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || omitted(name) || name.starts_with("log.") {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{separator}{value:?}")
        } else {
            write!(self.writer, "{separator}{name}={value:?}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{RunId, SessionId, TenantId};
    use crate::telemetry::genai;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_lines_keep_the_ids_model_and_call_but_not_the_opentelemetry_attributes() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(TextFields)
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        );
        let ids = genai::RunIds {
            tenant: TenantId::new("acme"),
            session: SessionId::from_string("ses_1"),
            run: RunId::from_string("run_1"),
        };
        tracing::subscriber::with_default(subscriber, || {
            let agent = genai::invoke_agent(&ids);
            let _agent = agent.enter();
            let tool = genai::execute_tool(&ids, "Write", "toolu_1");
            tool.record("gen_ai.tool.call.arguments", "{\"secret\":1}");
            let _tool = tool.enter();
            tracing::info!(code = "X", "the call failed");
        });
        let line = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        for kept in [
            "tenant=acme",
            "session_id=ses_1",
            "run_id=run_1",
            "gen_ai.tool.name=\"Write\"",
            "gen_ai.tool.call.id=\"toolu_1\"",
            "the call failed code=\"X\"",
        ] {
            assert!(line.contains(kept), "{kept} missing from {line}");
        }
        for left_out in [
            "otel.",
            "gen_ai.operation.name",
            "gen_ai.conversation.id",
            "gen_ai.tool.call.arguments",
            "secret",
        ] {
            assert!(!line.contains(left_out), "{left_out} in {line}");
        }
    }
}
