//! Server settings seen through the API: session scripts gated by `allow_session_scripts`,
//! NUL characters refused in request bodies and made storable at run time, on both backends.

use crate::helpers::{Backend, TestApp, count};
use secrecy::SecretString;
use serde_json::{Value, json};

const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

fn scripted(text: &str) -> Value {
    json!({"model": {"script": {"turns": [{"text": text}]}}})
}

async fn body_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn nul_characters_in_request_bodies_are_422_and_store_nothing() {
    for backend in BACKENDS {
        let Some(app) = TestApp::spawn(backend).await else {
            continue;
        };
        let token = app.token("acme");
        let (status, body) = body_of(
            app.post_json("/v1/sessions", &token, &json!({"title": "a\u{0}"}))
                .await,
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("INVALID_REQUEST"))
        );
        assert_eq!(body["details"]["field"], "title", "{backend:?}: {body}");
        let (_, list) = body_of(app.get("/v1/sessions", &token).await).await;
        assert_eq!(list["sessions"], json!([]), "nothing stored: {list}");

        let session = app.create_session("acme", &scripted("ok")).await;
        let (status, body) = body_of(
            app.post_json(
                &format!("/v1/sessions/{session}/prompts"),
                &token,
                &json!({"text": "x\u{0}y"}),
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("INVALID_REQUEST"))
        );
        assert_eq!(body["details"]["field"], "text", "{backend:?}: {body}");
        let (_, runs) = body_of(
            app.get(&format!("/v1/sessions/{session}/runs"), &token)
                .await,
        )
        .await;
        assert_eq!(runs["runs"], json!([]), "no run started: {runs}");
    }
}

#[tokio::test]
async fn a_nul_printing_command_and_a_model_repeating_it_complete_the_run() {
    for backend in BACKENDS {
        let Some(app) = TestApp::spawn(backend).await else {
            continue;
        };
        let token = app.token("acme");
        let session = app
            .create_session(
                "acme",
                &json!({
                    "permission": {"mode": "bypass"},
                    "model": {"script": {"turns": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": "printf 'a\\0b'"}}]},
                        {"text": "it printed {{last_tool_result}}"}
                    ]}}
                }),
            )
            .await;
        assert_eq!(app.prompt(&token, &session, "go").await.status(), 202);
        let events = app
            .wait_for_events(&token, &session, |e| count(e, "terminal") == 1)
            .await;
        let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
        assert_eq!(
            terminal["payload"]["reason"], "end_turn",
            "{backend:?}: {events:#?}"
        );
        let messages = app.messages(&token, &session).await;
        let text = messages.to_string();
        assert!(text.contains("a\u{FFFD}b"), "{backend:?}: {text}");
        assert!(!text.contains("\\u0000"), "{backend:?}: {text}");
    }
}

#[tokio::test]
async fn session_scripts_are_refused_unless_allowed() {
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        settings.allow_session_scripts = false;
    })
    .await
    .unwrap();
    let token = app.token("acme");
    let (status, body) =
        body_of(app.post_json("/v1/sessions", &token, &scripted("hi")).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("INVALID_REQUEST"))
    );
    assert_eq!(body["details"]["field"], "model.script", "{body}");
    // Without a script the session is fine.
    app.create_session("acme", &json!({"title": "no script"}))
        .await;
}

/// A scripted turn may wait at most `MAX_DELAY_MS` before it answers: a longer wait is refused
/// at creation (it would hold a run slot), and the server goes on serving the next tenant.
#[tokio::test]
async fn a_script_delay_over_the_limit_is_refused_at_creation() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("mallory");
    let slow = json!({"model": {"script": {"turns": [
        {"text": "late", "delay_ms": norma::llm::scripted::MAX_DELAY_MS + 1}
    ]}}});
    let (status, body) = body_of(app.post_json("/v1/sessions", &token, &slow).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("INVALID_REQUEST")),
        "{body}"
    );
    assert_eq!(body["details"]["field"], "model.script", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("delay_ms"),
        "{body}"
    );
    app.create_session("acme", &scripted("still served")).await;
}

/// A session stored by a server that allowed scripts, run by one that does not (a second
/// application on the same store): the run fails with `SCRIPTS_NOT_ALLOWED` instead of
/// playing the script; forking it is refused.
#[tokio::test]
async fn a_stored_script_fails_its_run_where_scripts_are_no_longer_allowed() {
    for backend in BACKENDS {
        let Some(allowing) = TestApp::spawn(backend).await else {
            continue;
        };
        let session = allowing
            .create_session("acme", &scripted("from the script"))
            .await;
        let database_url = match &allowing.database_url {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}",
                allowing.data_dir().join("norma.db").display()
            ),
        };
        let refusing = TestApp::spawn_with(Backend::Sqlite, |settings| {
            settings.allow_session_scripts = false;
            settings.database_url = Some(SecretString::from(database_url.clone()));
        })
        .await
        .unwrap();
        let token = refusing.token("acme");
        let (status, body) = body_of(
            refusing
                .post_json(&format!("/v1/sessions/{session}/fork"), &token, &json!({}))
                .await,
        )
        .await;
        assert_eq!(body["details"]["field"], "model.script", "{body}");
        assert_eq!(status, 422);

        assert_eq!(refusing.prompt(&token, &session, "go").await.status(), 202);
        let events = refusing
            .wait_for_events(&token, &session, |e| count(e, "terminal") == 1)
            .await;
        let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
        assert_eq!(terminal["payload"]["reason"], "error", "{events:#?}");
        assert_eq!(terminal["payload"]["code"], "SCRIPTS_NOT_ALLOWED");
        assert_eq!(count(&events, "model_request"), 0, "{events:#?}");
        assert!(
            !events
                .iter()
                .any(|e| e.to_string().contains("from the script"))
        );
        let (_, runs) = body_of(
            refusing
                .get(&format!("/v1/sessions/{session}/runs"), &token)
                .await,
        )
        .await;
        assert_eq!(runs["runs"][0]["status"], "failed", "{backend:?}: {runs}");
    }
}
