//! `norma chat`: an interactive session in the terminal. Each line read is a prompt; the run's
//! events stream as they happen; an approval request asks y/n/always right there (always adds
//! a session grant for the tool); Ctrl-C cancels the running run (twice quits), Ctrl-D or
//! Ctrl-C at the prompt quits.

use std::io::{BufRead, IsTerminal, Write};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::client::{CliError, Client, encode};
use super::render::{Printer, Style, str_of};

/// Longest input line kept (a longer line is cut; the server bounds prompts too).
const MAX_LINE_CHARS: usize = 100_000;

pub async fn run(client: &Client, session: Option<String>, style: Style) -> Result<(), CliError> {
    let session = match session {
        Some(id) => client.get(&format!("/v1/sessions/{}", encode(&id))).await?,
        None => {
            client
                .post("/v1/sessions", &json!({"title": "norma chat"}))
                .await?
        }
    };
    let id = str_of(&session["id"]).to_owned();
    let after = session["last_event_seq"].as_i64().unwrap_or(0);
    let interactive = std::io::stdin().is_terminal();
    eprintln!(
        "{}",
        style.dim(&format!(
            "session {id} · Enter sends · Ctrl-C cancels a run · Ctrl-D quits"
        ))
    );
    let mut lines = stdin_lines();
    let mut printer = Printer::new(style);
    let mut events = Box::pin(client.follow(&id, after));
    loop {
        if interactive {
            eprint!("{} ", style.bold(">"));
            let _ = std::io::stderr().flush();
        }
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let run = match client
            .post(
                &format!("/v1/sessions/{}/prompts", encode(&id)),
                &json!({"text": line, "busy": "enqueue"}),
            )
            .await
        {
            Ok(run) => run,
            Err(error) => {
                eprintln!("{}", style.red(&format!("error: {error}")));
                continue;
            }
        };
        let run_id = str_of(&run["run_id"]).to_owned();
        let mut cancelled = false;
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { return Ok(()) };
                    let event = event?;
                    printer.event(&event);
                    if event["type"] == "approval_requested" {
                        printer.finish_line();
                        if !ask(client, &id, &event["payload"]["approval"], &mut lines, style).await? {
                            eprintln!("{}", style.yellow("input closed; the approval stays pending"));
                            return Ok(());
                        }
                    }
                    if event["type"] == "terminal" && event["run_id"].as_str() == Some(&run_id) {
                        printer.finish_line();
                        break;
                    }
                }
                _ = tokio::signal::ctrl_c() => {
                    if cancelled {
                        return Ok(());
                    }
                    cancelled = true;
                    printer.finish_line();
                    eprintln!("{}", style.yellow("cancelling the run (Ctrl-C again quits)…"));
                    let path = format!("/v1/sessions/{}/runs/{}/cancel", encode(&id), encode(&run_id));
                    if let Err(error) = client.post(&path, &json!({})).await {
                        eprintln!("{}", style.red(&format!("cancel failed: {error}")));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Asks y/n/always for one approval and answers it; false when input ended first.
async fn ask(
    client: &Client,
    session: &str,
    approval: &Value,
    lines: &mut mpsc::Receiver<String>,
    style: Style,
) -> Result<bool, CliError> {
    let tool = str_of(&approval["tool_name"]);
    eprintln!(
        "{} {} {}",
        style.yellow("Allow"),
        style.bold(tool),
        style.dim(&approval["input"].to_string())
    );
    let body = loop {
        eprint!("[y]es / [n]o / [a]lways for this session: ");
        let _ = std::io::stderr().flush();
        let Some(answer) = lines.recv().await else {
            return Ok(false);
        };
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => break json!({"decision": "allow"}),
            "a" | "always" => {
                break json!({"decision": "allow", "grant": {"scope": "session", "rule": tool}});
            }
            "n" | "no" => {
                eprint!("reason (optional): ");
                let _ = std::io::stderr().flush();
                let reason = lines.recv().await.unwrap_or_default();
                let reason = reason.trim();
                break if reason.is_empty() {
                    json!({"decision": "deny"})
                } else {
                    json!({"decision": "deny", "reason": reason})
                };
            }
            _ => continue,
        }
    };
    let path = format!(
        "/v1/sessions/{}/approvals/{}",
        encode(session),
        encode(str_of(&approval["id"]))
    );
    if let Err(error) = client.post(&path, &body).await {
        // Another operator (or the policy webhook) may have answered first.
        eprintln!("{}", style.red(&format!("answer not taken: {error}")));
    }
    Ok(true)
}

/// Lines of standard input, read on a thread of their own (a blocking read never holds the
/// runtime); the channel closes at end of input.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(mut line) = line else { break };
            if let Some((at, _)) = line.char_indices().nth(MAX_LINE_CHARS) {
                line.truncate(at);
            }
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}
