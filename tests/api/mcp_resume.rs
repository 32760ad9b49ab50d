//! A resumed session restarts its MCP servers (issue 12): a run left by a replica that died
//! (its lease expired) while one of its MCP calls waited on an approval is taken over by a
//! new process, which starts the session's servers as it resumes the run — before the call
//! runs and before the approval is answered — so the session's `GET` shows them `ready`,
//! and the approved call then runs on the new server process.

use crate::helpers::{Backend, count, tool_results};
use crate::mcp::{FIXTURE, assert_still_serves_another_tenant, calls, session};
use crate::resume::{Prepared, wait_for_run};
use norma::ids::TenantId;
use norma::store::NewApproval;
use serde_json::json;
use std::time::Duration;

async fn a_resumed_run_restarts_its_servers(backend: Backend) {
    let Some(mut prepared) = Prepared::new(backend).await else {
        return;
    };
    let dir = std::path::Path::new(FIXTURE).parent().unwrap().to_owned();
    prepared.settings.sandbox.extra_read = vec![dir];
    let session_id = prepared
        .session(json!({
            "mcp_servers": [{"name": "fx", "command": FIXTURE}],
            "model": {"script": calls(&[("mcp__fx__pid", json!({}))])}
        }))
        .await;
    let run = prepared
        .crashed_run(&session_id, "go", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    let input = json!({});
    let approval_id = norma::ids::ApprovalId::generate();
    let approval = prepared
        .store
        .create_approval(
            &TenantId::new("acme"),
            NewApproval {
                id: approval_id.clone(),
                session: session_id.clone(),
                run_id: Some(run.id.clone()),
                tool_use_id: "toolu_scripted_0_0".into(),
                tool_name: "mcp__fx__pid".into(),
                input_sha256: norma::runtime::approvals::input_digest(&input),
                input: input.clone(),
                reason: "mcp__fx__pid requires approval".into(),
                expires_at: chrono::Utc::now() + chrono::Duration::minutes(10),
            },
            u32::MAX,
        )
        .await
        .unwrap();
    prepared
        .write(
            &session_id,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                (
                    "tool_call",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "mcp__fx__pid", "input": input }),
                ),
                ("approval_requested", json!({ "approval": approval })),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");
    let id = session_id.as_str();
    app.wait_for_events(&token, id, |e| count(e, "run_resumed") == 1)
        .await;

    // The approval is still pending, and the server is already up again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let shown = session(&app, &token, id).await;
        let server = &shown["mcp_servers"][0];
        if server["state"] == "ready" {
            assert!(
                server["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == "mcp__fx__pid"),
                "{shown}"
            );
            break;
        }
        assert_ne!(server["state"], "failed", "{shown}");
        assert!(tokio::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        app.first_pending_approval(&token, id).await,
        approval_id.as_str()
    );
    let answered = app
        .answer(
            &token,
            id,
            approval_id.as_str(),
            &json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(answered.status(), 200);
    let record = wait_for_run(&app, &token, &session_id, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let results = tool_results(&app.messages(&token, id).await);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    assert!(
        !results[0]["content"].as_str().unwrap().is_empty(),
        "{results:?}"
    );
    let shown = session(&app, &token, id).await;
    assert_eq!(shown["mcp_servers"][0]["state"], "ready", "{shown}");
    assert_eq!(shown["mcp_servers"][0]["restarts"], 0, "{shown}");

    // Another tenant is served meanwhile.
    assert_still_serves_another_tenant(&app).await;
}

#[tokio::test]
async fn a_resumed_run_restarts_its_servers_sqlite() {
    a_resumed_run_restarts_its_servers(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_resumed_run_restarts_its_servers_postgres() {
    a_resumed_run_restarts_its_servers(Backend::Postgres).await;
}
