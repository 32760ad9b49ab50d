//! Approvals over REST: persisted, listed, decided exactly once, expiring, adding grants.

use crate::helpers::{Backend, TestApp, count, error_code, tool_results};
use crate::on_both_backends;
use serde_json::{Value, json};

on_both_backends! {
    concurrent_answers_decide_once_and_grants_apply_later => concurrent_answers_decide_once;
    a_prompt_while_an_approval_is_pending_follows_the_session_policy => prompt_while_pending;
    approvals_are_listed_in_pages_with_a_checked_cursor => approvals_in_pages;
}

/// `GET …/approvals` pages (oldest first, `next_after` while more may follow); a cursor that
/// names no approval of the session and a limit out of range are `422`, not an empty page.
async fn approvals_in_pages(app: TestApp) {
    let token = app.token("acme");
    let calls: Vec<Value> = (0..3)
        .map(|n| json!({"name": "Bash", "input": {"command": format!("echo {n}")}}))
        .collect();
    let config = json!({"model": {"script": {"turns": [{"tool_calls": calls}, {"text": "done"}]}}});
    let id = app.create_session("acme", &config).await;
    let other = app.create_session("acme", &config).await;
    // The calls ask one after the other: each is allowed in turn.
    for session in [&id, &other] {
        app.prompt(&token, session, "go").await;
        for asked in 1..=3 {
            app.wait_for_events(&token, session, |e| count(e, "approval_requested") == asked)
                .await;
            let approval = app.first_pending_approval(&token, session).await;
            let allow = json!({"decision": "allow"});
            assert_eq!(
                app.answer(&token, session, &approval, &allow)
                    .await
                    .status(),
                200
            );
        }
    }
    let page = |query: String| {
        let app = &app;
        let token = token.clone();
        let id = id.clone();
        async move {
            let response = app
                .get(&format!("/v1/sessions/{id}/approvals?{query}"), &token)
                .await;
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = page("limit=2".into()).await;
    assert_eq!(status, 200, "{first}");
    let commands = |page: &Value| -> Vec<String> {
        page["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["input"]["command"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(commands(&first), ["echo 0", "echo 1"]);
    let cursor = first["next_after"].as_str().unwrap();
    assert_eq!(cursor, first["approvals"][1]["id"].as_str().unwrap());
    let (_, second) = page(format!("after={cursor}&limit=2&status=allowed")).await;
    assert_eq!(commands(&second), ["echo 2"]);
    assert!(second.get("next_after").is_none(), "{second}");
    let (_, all) = page(String::new()).await;
    assert_eq!(commands(&all), ["echo 0", "echo 1", "echo 2"]);

    // Another session's approval, an unknown id and limits out of range are refused.
    let others: Value = app
        .get(&format!("/v1/sessions/{other}/approvals"), &token)
        .await
        .json()
        .await
        .unwrap();
    let foreign = others["approvals"][0]["id"].as_str().unwrap().to_owned();
    for query in [
        format!("after={foreign}"),
        "after=apr_unknown".to_owned(),
        format!("after={}", "a".repeat(200)),
    ] {
        let (status, body) = page(query.clone()).await;
        assert_eq!(
            (status, &body["code"]),
            (422, &json!("INVALID_REQUEST")),
            "{query}"
        );
        assert_eq!(body["details"]["field"], "after", "{query}");
    }
    for query in ["limit=0", "limit=1001"] {
        let (status, body) = page(query.into()).await;
        assert_eq!(
            (status, &body["details"]["field"]),
            (422, &json!("limit")),
            "{query}"
        );
    }
}

async fn concurrent_answers_decide_once(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session("acme", &json!({
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "echo first-$((20+1))"}}]},
                {"tool_calls": [{"name": "Bash", "input": {"command": "echo second"}}]},
                {"text": "done"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "go").await;
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let pending: Value = app
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    let approval = pending["approvals"][0].clone();
    assert_eq!(approval["tool_name"], "Bash");
    assert_eq!(approval["input"]["command"], "echo first-$((20+1))");
    assert_eq!(approval["input_sha256"].as_str().unwrap().len(), 64);
    let approval_id = approval["id"].as_str().unwrap().to_owned();

    // Another tenant cannot see or answer it; a token without approvals:write cannot answer.
    let other = app.token("intruder");
    assert_eq!(
        error_code(
            app.get(&format!("/v1/sessions/{id}/approvals"), &other)
                .await
        )
        .await
        .0,
        404
    );
    let path = format!("/v1/sessions/{id}/approvals/{approval_id}");
    // The answer reads the approval by tenant and session (no session read first): another
    // tenant's session reads as no session, an unknown approval of ours as no approval.
    let not_found = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        (status, body["code"].clone(), body["message"].clone())
    };
    assert_eq!(
        not_found(
            app.post_json(&path, &other, &json!({"decision": "allow"}))
                .await
        )
        .await,
        (404, json!("NOT_FOUND"), json!("session not found"))
    );
    assert_eq!(
        not_found(
            app.post_json(
                &format!("/v1/sessions/{id}/approvals/apr_unknown"),
                &token,
                &json!({"decision": "allow"})
            )
            .await
        )
        .await,
        (404, json!("NOT_FOUND"), json!("approval not found"))
    );
    let reader = app.token_with_scopes("acme", &["sessions:read", "sessions:write"]);
    assert_eq!(
        error_code(
            app.post_json(&path, &reader, &json!({"decision": "allow"}))
                .await
        )
        .await,
        (403, "FORBIDDEN_SCOPE".into())
    );
    let bad_rule = app
        .post_json(
            &path,
            &token,
            &json!({"decision": "allow", "grant": {"scope": "session", "rule": "Bash(echo"}}),
        )
        .await;
    assert_eq!(error_code(bad_rule).await, (422, "INVALID_REQUEST".into()));

    // Eight concurrent answers on separate connections: exactly one wins.
    let mut answers = Vec::new();
    for i in 0..8 {
        let client = reqwest::Client::new();
        let url = app.url(&path);
        let token = token.clone();
        let body = if i % 2 == 0 {
            json!({"decision": "allow", "reason": "looks fine", "grant": {"scope": "session", "rule": "Bash(echo:*)"}})
        } else {
            json!({"decision": "deny", "reason": "no"})
        };
        answers.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for answer in answers {
        let response = answer.await.unwrap();
        if response.status() == 200 {
            won += 1;
        } else {
            assert_eq!(
                error_code(response).await,
                (409, "APPROVAL_ALREADY_DECIDED".into())
            );
        }
    }
    assert_eq!(won, 1, "exactly one answer decides");

    let all = app
        .wait_for_events(&token, &id, |e| {
            count(e, "terminal") == 1 || count(e, "approval_requested") == 2
        })
        .await;
    if count(&all, "approval_requested") == 2 {
        // The deny won, so the second call asks again: deny it too.
        let second = app.first_pending_approval(&token, &id).await;
        let response = app
            .answer(&token, &id, &second, &json!({"decision": "deny"}))
            .await;
        assert_eq!(response.status(), 200);
    }
    let all = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let decided: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "approval_decided")
        .collect();
    let record = &decided[0]["payload"]["approval"];
    assert_eq!(record["decided_by"], "user-of-acme");
    let messages = app.messages(&token, &id).await;
    let results = tool_results(&messages);
    assert_eq!(results.len(), 2);
    if record["status"] == "allowed" {
        assert!(
            results[0]["content"].as_str().unwrap().contains("first-21"),
            "{results:?}"
        );
        {
            // The decision's event joins the run's next write — the allowed call's journal
            // entry, or the lingering write 10 ms later when the call is slower to get there
            // (the decision itself was already durable in the approval's row): either way it
            // comes right before that entry.
            let seq = |kind: &str| {
                all.iter()
                    .find(|e| e["type"] == kind)
                    .and_then(|e| e["seq"].as_i64())
                    .unwrap()
            };
            assert_eq!(
                seq("approval_decided") + 1,
                seq("tool_executing"),
                "{all:?}"
            );
            // The session grant allowed the second echo without a new approval.
            assert!(record["grant_id"].is_string());
            assert_eq!(count(&all, "approval_requested"), 1);
            let stages: Vec<&Value> = all
                .iter()
                .filter(|e| e["type"] == "permission_decision")
                .map(|e| &e["payload"]["decision"]["stage"])
                .collect();
            assert_eq!(stages, [&json!("callback"), &json!("grant")]);
            assert!(results[1]["content"].as_str().unwrap().contains("second"));
            let grants: Value = app
                .get(&format!("/v1/sessions/{id}/grants"), &token)
                .await
                .json()
                .await
                .unwrap();
            let grant_id = grants["grants"][0]["id"].as_str().unwrap().to_owned();
            assert_eq!(grants["grants"][0]["rule"], "Bash(echo:*)");
            let revoke = app
                .delete(&format!("/v1/sessions/{id}/grants/{grant_id}"), &token)
                .await;
            assert_eq!(revoke.status(), 204);
            let grants: Value = app
                .get(&format!("/v1/sessions/{id}/grants"), &token)
                .await
                .json()
                .await
                .unwrap();
            assert_eq!(grants["grants"], json!([]));
        }
    } else {
        assert_eq!(results[0]["code"], "PERMISSION_DENIED");
    }
    // The exactly-once answer also holds afterwards.
    let late = app
        .post_json(&path, &token, &json!({"decision": "deny"}))
        .await;
    assert_eq!(
        error_code(late).await,
        (409, "APPROVAL_ALREADY_DECIDED".into())
    );
}

#[tokio::test]
async fn unanswered_approvals_expire_with_a_code() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let id = app
        .create_session("acme", &json!({
            "approvals": {"timeout_seconds": 1},
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "touch should-not-exist"}}]},
                {"text": "ok"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "go").await;
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let messages = app.messages(&token, &id).await;
    assert_eq!(tool_results(&messages)[0]["code"], "APPROVAL_EXPIRED");
    let approvals: Value = app
        .get(&format!("/v1/sessions/{id}/approvals"), &token)
        .await
        .json()
        .await
        .unwrap();
    let approval = &approvals["approvals"][0];
    assert_eq!(approval["status"], "expired");
    let late = app
        .post_json(
            &format!(
                "/v1/sessions/{id}/approvals/{}",
                approval["id"].as_str().unwrap()
            ),
            &token,
            &json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(error_code(late).await, (409, "APPROVAL_EXPIRED".into()));
}

#[tokio::test]
async fn ask_user_questions_travel_the_durable_approval_channel() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let questions = json!([{"question": "Which colour?", "options": ["red", "blue"]}]);
    let id = app
        .create_session("acme", &json!({
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "AskUserQuestion", "input": {"questions": questions}}]},
                {"text": "You said: {{last_tool_result}}"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "ask me").await;
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let pending: Value = app
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    let approval = &pending["approvals"][0];
    assert_eq!(approval["tool_name"], "AskUserQuestion");
    assert_eq!(approval["input"]["questions"], questions);
    let path = format!(
        "/v1/sessions/{id}/approvals/{}",
        approval["id"].as_str().unwrap()
    );
    let answered = app.post_json(&path, &token, &json!({"decision": "allow", "updated_input": {"questions": questions, "answers": ["blue"]}})).await;
    assert_eq!(answered.status(), 200);
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let messages = app.messages(&token, &id).await;
    let last = messages["messages"].as_array().unwrap().last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        last.contains("Q: Which colour?") && last.contains("A: blue"),
        "{last}"
    );
}

#[tokio::test]
async fn once_grants_are_used_up_and_plan_mode_applies_mid_run() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let echo = |text: &str| json!({"tool_calls": [{"name": "Bash", "input": {"command": format!("echo {text}")}}]});
    let id = app
        .create_session("acme", &json!({
            "permission": {"allow": ["Write"]},
            "model": {"script": {"turns": [
                echo("one"), echo("two"), echo("three"),
                {"tool_calls": [{"name": "TodoWrite", "input": {"todos": [{"id": "1", "content": "ship it", "status": "pending", "priority": "high"}]}}]},
                {"tool_calls": [{"name": "EnterPlanMode", "input": {}}]},
                {"tool_calls": [{"name": "Write", "input": {"file_path": "x.txt", "content": "x"}}]},
                {"text": "done"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "go").await;
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let first = app.first_pending_approval(&token, &id).await;
    let allow = json!({"decision": "allow", "grant": {"scope": "once", "rule": "Bash(echo:*)"}});
    assert_eq!(
        app.post_json(
            &format!("/v1/sessions/{id}/approvals/{first}"),
            &token,
            &allow
        )
        .await
        .status(),
        200
    );
    // "two" runs on the once grant; "three" must ask again.
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 2)
        .await;
    let grants: Value = app
        .get(&format!("/v1/sessions/{id}/grants"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(grants["grants"], json!([]), "the once grant is used up");
    let third = app.first_pending_approval(&token, &id).await;
    app.answer(&token, &id, &third, &json!({"decision": "deny"}))
        .await;
    let all = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let stages: Vec<(String, String)> = all
        .iter()
        .filter(|e| e["type"] == "permission_decision")
        .map(|e| {
            (
                e["payload"]["tool"].as_str().unwrap().to_owned(),
                e["payload"]["decision"]["stage"]
                    .as_str()
                    .unwrap_or("-")
                    .to_owned(),
            )
        })
        .collect();
    let expected = [
        ("Bash", "callback"),
        ("Bash", "grant"),
        ("Bash", "callback"),
        ("TodoWrite", "tool_allow"),
        ("EnterPlanMode", "tool_allow"),
        ("Write", "mode_plan"),
    ];
    assert_eq!(stages, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
    let progress: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "tool_progress")
        .collect();
    assert_eq!(
        progress[0]["payload"]["data"]["todos"][0]["content"],
        "ship it"
    );
}

async fn prompt_while_pending(app: TestApp) {
    let token = app.token("acme");
    let script = json!({"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "echo waiting"}}]},
        {"text": "after the call"}
    ]});
    // Default policy: reject, whatever the busy policy, with the pending ids.
    let strict = app
        .create_session("acme", &json!({ "model": {"script": script} }))
        .await;
    app.prompt(&token, &strict, "first").await;
    app.wait_for_events(&token, &strict, |e| count(e, "approval_requested") == 1)
        .await;
    let pending = app.first_pending_approval(&token, &strict).await;
    let refused = app
        .post_json(
            &format!("/v1/sessions/{strict}/prompts"),
            &token,
            &json!({ "text": "second", "busy": "enqueue" }),
        )
        .await;
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "APPROVAL_PENDING", "{body}");
    assert_eq!(body["details"]["approval_ids"], json!([pending]));
    // Nothing was queued: the pending request is untouched.
    assert_eq!(app.first_pending_approval(&token, &strict).await, pending);

    // `deny`: the pending call is denied and the new prompt goes on.
    let lenient = app
        .create_session(
            "acme",
            &json!({ "model": {"script": script}, "approvals": {"on_new_prompt": "deny"} }),
        )
        .await;
    app.prompt(&token, &lenient, "first").await;
    app.wait_for_events(&token, &lenient, |e| count(e, "approval_requested") == 1)
        .await;
    let accepted = app
        .post_json(
            &format!("/v1/sessions/{lenient}/prompts"),
            &token,
            &json!({ "text": "second" }),
        )
        .await;
    assert_eq!(accepted.status(), 202);
    let second: Value = accepted.json().await.unwrap();
    let events = app
        .wait_for_events(&token, &lenient, |e| count(e, "terminal") == 2)
        .await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "approval_decided")
        .unwrap();
    assert_eq!(decided["payload"]["approval"]["status"], "denied");
    assert_eq!(decided["payload"]["approval"]["decided_by"], "system");
    let runs: Value = app
        .get(&format!("/v1/sessions/{lenient}/runs"), &token)
        .await
        .json()
        .await
        .unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[1]["id"], second["run_id"]);
    assert_eq!(runs[1]["prompt"], "second");
    assert_eq!(runs[1]["status"], "completed");
    // The denied call never ran: the first run read the denial, then the second prompt ran.
    let results = tool_results(&app.messages(&token, &lenient).await);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(results[0]["code"], "PERMISSION_DENIED");
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("a new prompt arrived"),
        "{}",
        results[0]
    );
}

fn parking(settings: &mut norma::config::Settings) {
    settings.approval_park_after_ms = 50;
}

fn parked_marker_session(timeout_seconds: u64) -> Value {
    json!({
        "approvals": {"timeout_seconds": timeout_seconds},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": "echo ran >> marker"}}]},
            {"text": "after: {{last_tool_result}}"}
        ]}}
    })
}

#[tokio::test]
async fn a_parked_run_resumes_on_the_answer_and_runs_the_call_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = TestApp::spawn_with(backend, parking).await else {
            continue;
        };
        let token = app.token("acme");
        let id = app
            .create_session("acme", &parked_marker_session(600))
            .await;
        let accepted: Value = app.prompt(&token, &id, "go").await.json().await.unwrap();
        let events = app
            .wait_for_events(&token, &id, |e| count(e, "run_parked") == 1)
            .await;
        let approval = app.first_pending_approval(&token, &id).await;
        let parked = events.iter().find(|e| e["type"] == "run_parked").unwrap();
        assert_eq!(parked["payload"]["approval_ids"], json!([approval]));
        // Parked, the run holds its lease and the session stays busy.
        let run: Value = app
            .get(
                &format!(
                    "/v1/sessions/{id}/runs/{}",
                    accepted["run_id"].as_str().unwrap()
                ),
                &token,
            )
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(run["status"], "running");
        let busy = app.prompt(&token, &id, "again").await;
        assert_eq!(error_code(busy).await.1, "APPROVAL_PENDING");

        let answered = app
            .answer(&token, &id, &approval, &json!({ "decision": "allow" }))
            .await;
        assert_eq!(answered.status(), 200);
        let events = app
            .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
            .await;
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
        assert_eq!(count(&events, "run_resumed"), 1);
        assert_eq!(
            count(&events, "approval_requested"),
            1,
            "the request was reused"
        );
        assert_eq!(count(&events, "approval_decided"), 1);
        let marker = app
            .data_dir()
            .join("workspaces/acme")
            .join(&id)
            .join("marker");
        assert_eq!(std::fs::read_to_string(marker).unwrap(), "ran\n");
        let results = tool_results(&app.messages(&token, &id).await);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0]["is_error"], false, "{}", results[0]);
    }
}

#[tokio::test]
async fn a_parked_run_can_be_cancelled_and_expires_without_an_answer() {
    let app = TestApp::spawn_with(Backend::Sqlite, parking).await.unwrap();
    let token = app.token("acme");
    // Cancelled while parked: the request is settled as denied and the run ends cancelled.
    let id = app
        .create_session("acme", &parked_marker_session(600))
        .await;
    let accepted: Value = app.prompt(&token, &id, "go").await.json().await.unwrap();
    app.wait_for_events(&token, &id, |e| count(e, "run_parked") == 1)
        .await;
    let cancelled = app
        .post_json(
            &format!(
                "/v1/sessions/{id}/runs/{}/cancel",
                accepted["run_id"].as_str().unwrap()
            ),
            &token,
            &json!({}),
        )
        .await;
    assert_eq!(cancelled.status(), 202);
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["payload"]["reason"], "cancelled");
    let all: Value = app
        .get(&format!("/v1/sessions/{id}/approvals"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["approvals"][0]["status"], "denied", "{all}");
    assert_eq!(all["approvals"][0]["decided_by"], "system");
    assert!(
        !app.data_dir()
            .join("workspaces/acme")
            .join(&id)
            .join("marker")
            .exists()
    );

    // Nobody answers: the parked run wakes at the expiry and the call fails APPROVAL_EXPIRED.
    let id = app.create_session("acme", &parked_marker_session(1)).await;
    app.prompt(&token, &id, "go").await;
    app.wait_for_events(&token, &id, |e| count(e, "run_parked") == 1)
        .await;
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results[0]["code"], "APPROVAL_EXPIRED", "{}", results[0]);
}
