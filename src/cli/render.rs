//! How the terminal client prints events: coloured and streaming when stdout is a terminal,
//! plain lines when piped (or with `NO_COLOR`); `--json` prints each event as one JSON line.

use std::io::{IsTerminal, Write};

use serde_json::Value;

/// Characters of a tool result printed (the rest is in `GET …/outputs/{id}` when capped).
const RESULT_PREVIEW_CHARS: usize = 600;

/// Output style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// One JSON object per line.
    Json,
    /// Human text with ANSI colours.
    Color,
    /// Human text without colours.
    Plain,
}

impl Style {
    pub fn detect(json: bool) -> Self {
        if json {
            Self::Json
        } else if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
            Self::Color
        } else {
            Self::Plain
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        match self {
            Self::Color => format!("\x1b[{code}m{text}\x1b[0m"),
            _ => text.to_owned(),
        }
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }
    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn blue(self, text: &str) -> String {
        self.paint("34", text)
    }
}

/// Prints a session's events; remembers whether assistant text is mid-line.
pub struct Printer {
    pub style: Style,
    streaming: bool,
}

impl Printer {
    pub fn new(style: Style) -> Self {
        Self {
            style,
            streaming: false,
        }
    }

    /// Prints one event (a JSON object with `seq`, `type`, `payload`).
    pub fn event(&mut self, event: &Value) {
        let mut out = std::io::stdout().lock();
        if self.style == Style::Json {
            let _ = writeln!(out, "{event}");
            let _ = out.flush();
            return;
        }
        let s = self.style;
        let p = &event["payload"];
        let kind = event["type"].as_str().unwrap_or("?");
        if kind != "assistant_delta" && kind != "assistant_message" && self.streaming {
            let _ = writeln!(out);
            self.streaming = false;
        }
        let line = match kind {
            "run_started" => Some(s.bold(&format!(
                "▶ run {} · {}",
                str_of(&p["run_id"]),
                str_of(&p["prompt"])
            ))),
            "assistant_delta" => {
                let _ = write!(out, "{}", str_of(&p["text"]));
                self.streaming = true;
                None
            }
            "assistant_message" => {
                if self.streaming {
                    self.streaming = false;
                    Some(String::new())
                } else {
                    let text = message_text(&p["message"]);
                    (!text.is_empty()).then_some(text)
                }
            }
            "tool_call" => Some(format!(
                "{} {} {}",
                s.blue("⚙"),
                s.bold(str_of(&p["name"])),
                s.dim(&p["input"].to_string())
            )),
            "permission_decision" => {
                let d = &p["decision"];
                let rule = d["rule"]
                    .as_str()
                    .map(|r| format!(" · rule {r}"))
                    .unwrap_or_default();
                Some(s.dim(&format!(
                    "  permission: {}{rule} — {}",
                    str_of(&d["stage"]),
                    str_of(&d["message"])
                )))
            }
            "approval_requested" => {
                let a = &p["approval"];
                Some(s.yellow(&format!(
                    "  ? approval {} needed for {}: {}",
                    str_of(&a["id"]),
                    str_of(&a["tool_name"]),
                    str_of(&a["reason"])
                )))
            }
            "approval_decided" => {
                let a = &p["approval"];
                let reason = a["decision_reason"]
                    .as_str()
                    .map(|r| format!(" — {r}"))
                    .unwrap_or_default();
                let text = format!(
                    "  approval {} by {}{reason}",
                    str_of(&a["status"]),
                    str_of(&a["decided_by"])
                );
                Some(if a["status"] == "allowed" {
                    s.green(&text)
                } else {
                    s.red(&text)
                })
            }
            "tool_result" => Some(self.result(&p["result"])),
            "terminal" => {
                let reason = str_of(&p["reason"]);
                let detail = p["code"]
                    .as_str()
                    .map(|c| format!(" ({c}: {})", str_of(&p["message"])))
                    .unwrap_or_default();
                let text = format!("■ run ended: {reason}{detail}");
                Some(if reason == "end_turn" {
                    s.green(&text)
                } else {
                    s.red(&text)
                })
            }
            "usage" => Some(s.dim(&format!(
                "  usage: {} in / {} out tokens, {} model calls, {} tool calls",
                p["input_tokens"], p["output_tokens"], p["model_calls"], p["tool_calls"]
            ))),
            "egress" => Some(s.dim(&format!(
                "  egress {}: {}:{}",
                str_of(&p["decision"]),
                str_of(&p["host"]),
                p["port"]
            ))),
            "model_request" | "tool_results" | "continue" | "tool_started" | "tool_executing" => {
                None
            }
            other => Some(s.dim(&format!("  · {other} {}", truncate(&p.to_string(), 200)))),
        };
        if let Some(line) = line {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    fn result(&self, result: &Value) -> String {
        let s = self.style;
        let content = truncate(str_of(&result["content"]), RESULT_PREVIEW_CHARS);
        let indented: String = content.lines().map(|l| format!("    {l}\n")).collect();
        let capped = result["output_id"]
            .as_str()
            .map(|id| s.dim(&format!("    (capped; full output: GET …/outputs/{id})\n")))
            .unwrap_or_default();
        let head = if result["is_error"] == true {
            s.red(&format!("  ✗ error {}", str_of(&result["code"])))
        } else {
            s.green("  ✓ result")
        };
        format!("{head}\n{indented}{capped}").trim_end().to_owned()
    }

    /// Ends a streamed line, if any.
    pub fn finish_line(&mut self) {
        if self.streaming {
            println!();
            self.streaming = false;
        }
    }
}

pub fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

fn message_text(message: &Value) -> String {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
