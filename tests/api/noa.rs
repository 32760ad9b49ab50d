//! Noa through the real server: a scripted model that compresses when nudged keeps a session
//! of 1,000 model turns inside a small context window (without Noa the same script overflows),
//! every compressed original reads back from the archive API, and the `context` section is
//! validated strictly.

use crate::helpers::{Backend, TestApp, error_code};
use crate::on_both_backends;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

on_both_backends! {
    noa_compresses_and_archives_every_original => noa_compresses_and_archives_every_original;
    invalid_context_settings_are_refused_with_reasons => invalid_context_settings_are_refused_with_reasons;
}

/// Soft / hard limits and the scripted model's window (estimated tokens).
const SOFT: u64 = 8_000;
const HARD: u64 = 10_000;
const WINDOW: u64 = 13_000;

/// A model that works with Glob, writing ~2,000 characters per turn, and compresses everything
/// but the protected tail when nudged (retrying one message later when the cut fell inside a
/// tool call/result pair).
fn script(max_turns: u32, noa: bool) -> Value {
    let filler = "Working through the plan step by step; nothing new yet. ".repeat(36);
    let compress = |to: &str| {
        json!({"tool_calls": [{"name": "Compress", "input": {"ranges": [
            {"from_ref": "{{ref:0}}", "to_ref": to, "summary": "Globbed the workspace; nothing found."}
        ]}}]})
    };
    let mut turns = vec![
        json!({"when_last_tool_result_contains": "NOA_BLOCK_BOUNDARY"}),
        json!({"when_last_tool_result_contains": "<noa_nudge"}),
    ];
    turns[0]
        .as_object_mut()
        .unwrap()
        .extend(compress("{{ref:-10}}").as_object().unwrap().clone());
    turns[1]
        .as_object_mut()
        .unwrap()
        .extend(compress("{{ref:-9}}").as_object().unwrap().clone());
    for _ in 0..300 {
        turns.push(json!({"text": filler, "tool_calls": [{"name": "Glob", "input": {"pattern": "*.none"}}]}));
    }
    let mut config = json!({
        "tools": ["Glob"],
        "budgets": {"max_turns": max_turns},
        "model": {"script": {"context_window": WINDOW, "turns": turns}},
    });
    if noa {
        config["context"] = json!({
            "policy": "noa", "soft_limit_tokens": SOFT, "hard_limit_tokens": HARD,
            "protected_tail": 8, "min_range_tokens": 200
        });
    }
    config
}

/// Every message of the session, paged, by position.
async fn all_messages(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    let mut messages = Vec::new();
    let mut after = 0;
    loop {
        let page: Value = app
            .get(
                &format!("/v1/sessions/{id}/messages?after={after}&limit=1000"),
                token,
            )
            .await
            .json()
            .await
            .unwrap();
        let batch = page["messages"].as_array().unwrap().clone();
        if batch.is_empty() {
            return messages;
        }
        after = page["next_after"].as_i64().unwrap();
        messages.extend(batch);
    }
}

/// Sends a prompt and waits for its run to end; returns the run record.
async fn run_prompt(app: &TestApp, token: &str, id: &str, text: &str) -> Value {
    let accepted: Value = app.prompt(token, id, text).await.json().await.unwrap();
    let run = accepted["run_id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let record: Value = app
            .get(&format!("/v1/sessions/{id}/runs/{run}"), token)
            .await
            .json()
            .await
            .unwrap();
        if !matches!(record["status"].as_str(), Some("queued" | "running")) {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run did not end: {record}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kinds(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

/// The archive ids of the compressed ranges (of `compression` events) that end before
/// position `below`, in order.
fn archive_ids(compressions: &[Value], below: usize) -> Vec<String> {
    compressions
        .iter()
        .flat_map(|c| c["payload"]["ranges"].as_array().unwrap().clone())
        .filter(|r| r["to_ref"].as_str().unwrap()[1..].parse::<usize>().unwrap() < below)
        .map(|r| r["archive_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Checks that the session's archives are `expected` and every archived original is the
/// message at its ref, and returns how many messages the archives hold.
async fn check_archives(app: &TestApp, token: &str, id: &str, expected: &[String]) -> usize {
    let history = all_messages(app, token, id).await;
    let mut archived = BTreeMap::new();
    let mut after: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        let path = match &after {
            Some(after) => format!("/v1/sessions/{id}/archives?limit=7&after={after}"),
            None => format!("/v1/sessions/{id}/archives?limit=7"),
        };
        let page: Value = app.get(&path, token).await.json().await.unwrap();
        listed.extend(page["archives"].as_array().unwrap().clone());
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let ids: Vec<String> = listed
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, expected, "one archive per compressed range");
    for archive in &listed {
        assert!(archive.get("messages").is_none(), "lists carry no messages");
        let full: Value = app
            .get(
                &format!(
                    "/v1/sessions/{id}/archives/{}",
                    archive["id"].as_str().unwrap()
                ),
                token,
            )
            .await
            .json()
            .await
            .unwrap();
        let messages = full["messages"].as_array().unwrap();
        assert_eq!(
            messages.len() as u64,
            full["message_count"].as_u64().unwrap()
        );
        for original in messages {
            let position: usize = original["ref"].as_str().unwrap()[1..].parse().unwrap();
            assert_eq!(original["message"]["content"], history[position]["content"]);
            assert_eq!(original["message"]["role"], history[position]["role"]);
            assert!(archived.insert(position, ()).is_none(), "archived twice");
        }
    }
    archived.len()
}

async fn noa_compresses_and_archives_every_original(app: TestApp) {
    let token = app.token("acme");
    let id = app.create_session("acme", &script(40, true)).await;
    for prompt in ["first", "second"] {
        let run = run_prompt(&app, &token, &id, prompt).await;
        assert_eq!(run["terminal"]["reason"], "max_turns", "{run}");
    }
    let events = app.events(&token, &id).await;
    assert!(kinds(&events, "provider_error").is_empty());
    let compressions = kinds(&events, "compression");
    assert!(compressions.len() >= 2, "compressed when nudged");
    assert!(!kinds(&events, "context_nudge").is_empty());
    let archived = check_archives(&app, &token, &id, &archive_ids(&compressions, usize::MAX)).await;
    let counted: u64 = compressions
        .iter()
        .flat_map(|c| c["payload"]["ranges"].as_array().unwrap().clone())
        .map(|r| r["messages"].as_u64().unwrap())
        .sum();
    assert_eq!(archived as u64, counted);

    // Tenant-scoped: another tenant sees no such session, nor its archives.
    let other = app.token("globex");
    let (status, code) = error_code(
        app.get(&format!("/v1/sessions/{id}/archives"), &other)
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    let (status, _) = error_code(
        app.get(&format!("/v1/sessions/{id}/archives/a1"), &other)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = error_code(
        app.get(&format!("/v1/sessions/{id}/archives/zz"), &token)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, code) = error_code(
        app.get(&format!("/v1/sessions/{id}/archives?limit=0"), &token)
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (422, "INVALID_REQUEST"));

    forks_keep_the_compressions_before_their_cut(&app, &token, &id, &compressions).await;
}

/// A fork of a Noa session starts with the source's Noa state cut to what it copies: the
/// compressions wholly before its cut, their archives (reading back as the fork's own
/// history), and its first request shows their summaries instead of the whole history.
async fn forks_keep_the_compressions_before_their_cut(
    app: &TestApp,
    token: &str,
    id: &str,
    compressions: &[Value],
) {
    let history = all_messages(app, token, id).await;
    // A cut in the middle, after a complete call and result (a user message).
    let cut = (history.len() / 2..history.len())
        .find(|&i| history[i]["role"] == "user")
        .unwrap();
    let partial = archive_ids(compressions, cut + 1);
    let whole = archive_ids(compressions, usize::MAX);
    assert!(
        !partial.is_empty() && partial.len() < whole.len(),
        "{partial:?} of {whole:?}"
    );
    let mut fork_id = String::new();
    for (body, expected) in [
        (json!({"up_to_seq": history[cut]["seq"]}), &partial),
        (json!({}), &whole),
    ] {
        let fork = app
            .post_json(&format!("/v1/sessions/{id}/fork"), token, &body)
            .await;
        assert_eq!(fork.status(), 201);
        let fork: Value = fork.json().await.unwrap();
        fork_id = fork["id"].as_str().unwrap().to_owned();
        assert!(check_archives(app, token, &fork_id, expected).await > 0);
    }

    // The whole fork's first request: the copied history is far over the hard limit, but the
    // view shows the summaries, so nothing is truncated on the way to its first compression.
    let copied_chars: usize = history.iter().map(|m| m["content"].to_string().len()).sum();
    assert!(
        copied_chars / 4 > 3 * HARD as usize,
        "the history alone overflows"
    );
    let run = run_prompt(app, token, &fork_id, "third").await;
    assert_eq!(run["terminal"]["reason"], "max_turns", "{run}");
    let events = app.events(token, &fork_id).await;
    assert!(kinds(&events, "provider_error").is_empty());
    let truncated = kinds(&events, "context_truncated");
    assert!(
        truncated
            .iter()
            .all(|t| t["payload"]["tokens_before"].as_u64().unwrap() < 2 * HARD),
        "the fork's views start from the summaries: {truncated:?}"
    );
}

async fn invalid_context_settings_are_refused_with_reasons(app: TestApp) {
    let token = app.token("acme");
    for (context, field, reason) in [
        (
            json!({"policy": "noa", "soft_limit_tokens": 9000, "hard_limit_tokens": 5000}),
            "context.soft_limit_tokens",
            "NOA_LIMITS_ORDER",
        ),
        (
            json!({"protected_tail": 4}),
            "context.protected_tail",
            "NOA_SETTING_WITHOUT_NOA",
        ),
        (
            json!({"policy": "noa", "protected_tail": 0}),
            "context.protected_tail",
            "NOA_TAIL_RANGE",
        ),
        (
            json!({"policy": "noa", "nudge": ""}),
            "context.nudge",
            "NOA_NUDGE_LENGTH",
        ),
    ] {
        let response = app
            .post_json("/v1/sessions", &token, &json!({"context": context}))
            .await;
        assert_eq!(response.status(), 422);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_REQUEST");
        assert_eq!(body["details"]["field"], field, "{body}");
        assert_eq!(body["details"]["reason"], reason, "{body}");
    }
    let response = app
        .post_json(
            "/v1/sessions",
            &token,
            &json!({"context": {"policy": "noa", "extra": 1}}),
        )
        .await;
    assert_eq!(response.status(), 422);
    let response = app
        .post_json(
            "/v1/sessions",
            &token,
            &json!({"context": {"policy": "lossy"}}),
        )
        .await;
    assert_eq!(response.status(), 422);
    // The server still serves another tenant.
    let other = app
        .create_session("globex", &json!({"context": {"policy": "noa"}}))
        .await;
    let session: Value = app
        .get(&format!("/v1/sessions/{other}"), &app.token("globex"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(session["config"]["context"]["policy"], "noa");
}

/// 1,000 model turns over ten prompts (max_turns stops each run at 100) inside a window that
/// the same script overflows without Noa.
#[tokio::test]
async fn a_thousand_turns_fit_a_small_window_with_noa() {
    let app = TestApp::spawn(Backend::Sqlite).await.expect("sqlite app");
    let token = app.token("acme");

    let plain = app.create_session("acme", &script(100, false)).await;
    let run = run_prompt(&app, &token, &plain, "without noa").await;
    assert_ne!(run["terminal"]["reason"], "max_turns", "{run}");
    let events = app.events(&token, &plain).await;
    assert!(
        kinds(&events, "provider_error")
            .iter()
            .any(|e| e["payload"]["code"] == "CONTEXT_OVERFLOW"),
        "the window overflows without Noa"
    );

    let id = app.create_session("acme", &script(100, true)).await;
    for prompt in 0..10 {
        let run = run_prompt(&app, &token, &id, &format!("prompt {prompt}")).await;
        assert_eq!(run["terminal"]["reason"], "max_turns", "{run}");
    }
    let events = app.events(&token, &id).await;
    let responses = kinds(&events, "assistant_message");
    assert_eq!(responses.len(), 1000, "1,000 model turns");
    assert!(
        kinds(&events, "provider_error").is_empty(),
        "never over the window"
    );
    let biggest = responses
        .iter()
        .map(|e| e["payload"]["usage"]["input_tokens"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(biggest <= WINDOW, "largest request {biggest} tokens");
    let compressions = kinds(&events, "compression");
    assert!(
        compressions.len() >= 20,
        "{} compressions",
        compressions.len()
    );
    let archived = check_archives(&app, &token, &id, &archive_ids(&compressions, usize::MAX)).await;
    assert!(
        archived > 1000,
        "more than half of the 2,000+ messages were archived: {archived}"
    );
}
