//! The terminal client in the `norma` binary: `norma chat`, `norma sessions list|create|show`,
//! `norma prompt`, `norma events [--follow]`, `norma approve|deny`. It talks to a server URL
//! (`--url`, `NORMA_URL`, default `http://127.0.0.1:8080`) with a bearer token (`--token`,
//! `NORMA_TOKEN`); the server ignores both variables as settings. `--json` prints the API's
//! JSON (one event per line for streams); otherwise coloured text on a terminal, plain text
//! when piped.

pub mod chat;
pub mod client;
pub mod render;

use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::{Value, json};

use client::encode;
pub use client::{CliError, Client};
use render::{Printer, Style};

/// Where the server is and who the client is.
#[derive(Args, Clone, Debug)]
pub struct Connection {
    /// The server's base URL.
    #[arg(
        long,
        env = "NORMA_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// A bearer token (never printed).
    #[arg(long, env = "NORMA_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The client subcommands.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Chat with a session interactively: streams each run, asks y/n/always for approvals,
    /// Ctrl-C cancels the running run (a second Ctrl-C, or Ctrl-D at the prompt, quits).
    Chat {
        /// An existing session (default: a new one).
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// List, create or show sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Send a prompt; prints the run id (with `--follow`, streams the run until it ends).
    Prompt {
        session: String,
        text: String,
        /// What to do when the session is busy.
        #[arg(long, default_value = "reject", value_parser = ["reject", "enqueue", "interrupt"])]
        busy: String,
        /// Stream the run's events until it ends.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// Print a session's events (with `--follow`, keep streaming; resumes after a drop).
    Events {
        session: String,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: i64,
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// Allow a pending approval (the only pending one when no id is given).
    Approve {
        session: String,
        approval: Option<String>,
        #[arg(long)]
        reason: Option<String>,
        /// Add a grant: once, session or tenant.
        #[arg(long, value_parser = ["once", "session", "tenant"])]
        grant: Option<String>,
        /// The grant's rule (default: the tool name).
        #[arg(long, requires = "grant")]
        rule: Option<String>,
        /// Replace the tool input (JSON).
        #[arg(long)]
        input: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Deny a pending approval (the only pending one when no id is given).
    Deny {
        session: String,
        approval: Option<String>,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Create a session (from flags, or a full JSON config with --body).
    Create {
        #[arg(long)]
        title: Option<String>,
        /// Permission mode (default, acceptEdits, plan, dontAsk, bypass, auto).
        #[arg(long)]
        mode: Option<String>,
        /// The whole session config as JSON (`@FILE` reads it from a file).
        #[arg(long, conflicts_with_all = ["title", "mode"])]
        body: Option<String>,
    },
    /// Show one session.
    Show { session: String },
}

/// Runs a client command; the process exit code is 0 on success.
pub async fn run(command: ClientCommand) -> Result<(), CliError> {
    match command {
        ClientCommand::Chat {
            session,
            connection,
        } => {
            chat::run(
                &client(&connection)?,
                session,
                Style::detect(connection.json),
            )
            .await
        }
        ClientCommand::Sessions {
            command,
            connection,
        } => {
            sessions(
                &client(&connection)?,
                command,
                Style::detect(connection.json),
            )
            .await
        }
        ClientCommand::Prompt {
            session,
            text,
            busy,
            follow,
            connection,
        } => {
            let client = client(&connection)?;
            let style = Style::detect(connection.json);
            let last = client
                .get(&format!("/v1/sessions/{}", encode(&session)))
                .await?["last_event_seq"]
                .as_i64()
                .unwrap_or(0);
            let run = client
                .post(
                    &format!("/v1/sessions/{}/prompts", encode(&session)),
                    &json!({"text": text, "busy": busy}),
                )
                .await?;
            if !follow {
                return print_value(style, &run, |run| {
                    format!(
                        "{} {}",
                        render::str_of(&run["run_id"]),
                        render::str_of(&run["status"])
                    )
                });
            }
            let run_id = render::str_of(&run["run_id"]).to_owned();
            follow_run(&client, &session, last, &run_id, style).await
        }
        ClientCommand::Events {
            session,
            after,
            follow,
            connection,
        } => {
            let client = client(&connection)?;
            let mut printer = Printer::new(Style::detect(connection.json));
            if follow {
                let mut events = Box::pin(client.follow(&session, after));
                while let Some(event) = events.next().await {
                    printer.event(&event?);
                }
                return Ok(());
            }
            let mut after = after;
            loop {
                let page = client
                    .get(&format!(
                        "/v1/sessions/{}/events?after={after}&limit=1000",
                        encode(&session)
                    ))
                    .await?;
                let events = page["events"].as_array().cloned().unwrap_or_default();
                // A page ends early at 4 MiB of payload: the end is an empty page.
                if events.is_empty() {
                    printer.finish_line();
                    return Ok(());
                }
                for event in &events {
                    printer.event(event);
                    after = event["seq"].as_i64().unwrap_or(after);
                }
            }
        }
        ClientCommand::Approve {
            session,
            approval,
            reason,
            grant,
            rule,
            input,
            connection,
        } => {
            let client = client(&connection)?;
            let mut body = json!({"decision": "allow"});
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            if let Some(scope) = grant {
                body["grant"] = json!({"scope": scope});
                if let Some(rule) = rule {
                    body["grant"]["rule"] = json!(rule);
                }
            }
            if let Some(input) = input {
                body["updated_input"] = serde_json::from_str(&input)
                    .map_err(|e| CliError::Usage(format!("--input is not JSON: {e}")))?;
            }
            answer(
                &client,
                &session,
                approval,
                &body,
                Style::detect(connection.json),
            )
            .await
        }
        ClientCommand::Deny {
            session,
            approval,
            reason,
            connection,
        } => {
            let client = client(&connection)?;
            let mut body = json!({"decision": "deny"});
            if let Some(reason) = reason {
                body["reason"] = json!(reason);
            }
            answer(
                &client,
                &session,
                approval,
                &body,
                Style::detect(connection.json),
            )
            .await
        }
    }
}

fn client(connection: &Connection) -> Result<Client, CliError> {
    Client::new(&connection.url, connection.token.as_deref().unwrap_or(""))
}

fn print_value(
    style: Style,
    value: &Value,
    text: impl Fn(&Value) -> String,
) -> Result<(), CliError> {
    if style == Style::Json {
        println!("{value}");
    } else {
        println!("{}", text(value));
    }
    Ok(())
}

async fn sessions(client: &Client, command: SessionsCommand, style: Style) -> Result<(), CliError> {
    match command {
        SessionsCommand::List { limit, cursor } => {
            let mut path = format!("/v1/sessions?limit={limit}");
            if let Some(cursor) = cursor {
                path.push_str(&format!("&cursor={}", encode(&cursor)));
            }
            let page = client.get(&path).await?;
            print_value(style, &page, |page| {
                let mut out = String::new();
                for s in page["sessions"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "{}  {:<6}  {}  {}\n",
                        render::str_of(&s["id"]),
                        render::str_of(&s["status"]),
                        render::str_of(&s["created_at"]),
                        render::str_of(&s["config"]["title"]),
                    ));
                }
                if let Some(cursor) = page["next_cursor"].as_str() {
                    out.push_str(&style.dim(&format!("more: --cursor {cursor}\n")));
                }
                out.trim_end().to_owned()
            })
        }
        SessionsCommand::Create { title, mode, body } => {
            let config = match body {
                Some(body) => {
                    let text = match body.strip_prefix('@') {
                        Some(path) => std::fs::read_to_string(path)?,
                        None => body,
                    };
                    serde_json::from_str(&text)
                        .map_err(|e| CliError::Usage(format!("--body is not JSON: {e}")))?
                }
                None => {
                    let mut config = json!({});
                    if let Some(title) = title {
                        config["title"] = json!(title);
                    }
                    if let Some(mode) = mode {
                        config["permission"] = json!({"mode": mode});
                    }
                    config
                }
            };
            let session = client.post("/v1/sessions", &config).await?;
            print_value(style, &session, |s| render::str_of(&s["id"]).to_owned())
        }
        SessionsCommand::Show { session } => {
            let session = client
                .get(&format!("/v1/sessions/{}", encode(&session)))
                .await?;
            print_value(style, &session, |s| {
                format!(
                    "id:      {}\ntitle:   {}\nstatus:  {}\ncreated: {}\nevents:  {}\nmode:    {}",
                    render::str_of(&s["id"]),
                    render::str_of(&s["config"]["title"]),
                    render::str_of(&s["status"]),
                    render::str_of(&s["created_at"]),
                    s["last_event_seq"],
                    s["config"]["permission"]["mode"]
                        .as_str()
                        .unwrap_or("default"),
                )
            })
        }
    }
}

/// Streams the session's events after `after` until the run `run_id` ends.
async fn follow_run(
    client: &Client,
    session: &str,
    after: i64,
    run_id: &str,
    style: Style,
) -> Result<(), CliError> {
    let mut printer = Printer::new(style);
    let mut events = Box::pin(client.follow(session, after));
    while let Some(event) = events.next().await {
        let event = event?;
        printer.event(&event);
        if event["type"] == "terminal" && event["run_id"].as_str() == Some(run_id) {
            printer.finish_line();
            return Ok(());
        }
    }
    Ok(())
}

/// The given approval id, or the session's only pending one.
pub async fn pending_approval(
    client: &Client,
    session: &str,
    approval: Option<String>,
) -> Result<String, CliError> {
    if let Some(id) = approval {
        return Ok(id);
    }
    let page = client
        .get(&format!(
            "/v1/sessions/{}/approvals?status=pending",
            encode(session)
        ))
        .await?;
    let pending: Vec<&str> = page["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["id"].as_str())
        .collect();
    match pending.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(CliError::Usage(
            "no pending approval in this session".into(),
        )),
        many => Err(CliError::Usage(format!(
            "{} approvals are pending ({}); name one",
            many.len(),
            many.join(", ")
        ))),
    }
}

async fn answer(
    client: &Client,
    session: &str,
    approval: Option<String>,
    body: &Value,
    style: Style,
) -> Result<(), CliError> {
    let id = pending_approval(client, session, approval).await?;
    let decided = client
        .post(
            &format!("/v1/sessions/{}/approvals/{}", encode(session), encode(&id)),
            body,
        )
        .await?;
    print_value(style, &decided, |a| {
        format!(
            "{} {}",
            render::str_of(&a["id"]),
            render::str_of(&a["status"])
        )
    })
}
