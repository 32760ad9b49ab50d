//! Remote hooks over real HTTP: an axum server on 127.0.0.1:0 verifies the Standard-Webhooks
//! signature of every request with `norma::signing::verify` and answers as a policy service.
//! Hooks post through the shared outbound client: with private addresses allowed they reach
//! the loopback server; without, loopback, link-local and names resolving to loopback are
//! refused before any connection, and whatever fails, the tenant sees only `HOOK_FAILED`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use norma::egress::{AddressPolicy, EgressClient};
use norma::hooks::runner::failed_reason;
use norma::hooks::{
    FailurePolicy, HOOK_FAILED, Hook, HookCatalog, HookConfig, HookDecision, HookError, HookEvent,
    HookEventName, HookHandlerConfig, HookPayload, HookRunner, HookStatusToken, RemoteHook,
    RemoteTarget,
};
use norma::ids::{SessionId, TenantId};
use norma::permission::{Reason, Stage, Verdict};
use norma::signing::{self, VerifyError, WebhookSecret};
use norma::tools::builder::ToolBuilder;
use norma::tools::pipeline::Pipeline;
use norma::tools::registry::ToolRegistry;
use norma::tools::{Tool, ToolContext, ToolOutput, codes};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "whsec_cG9saWN5LXNlcnZpY2Utc2VjcmV0";

#[derive(Clone, Default)]
struct Received {
    /// Every request that reached `/hook`, verified or not.
    raw: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    /// Events whose signature verified.
    verified: Arc<Mutex<Vec<HookEvent>>>,
}

async fn hook(State(state): State<Received>, headers: HeaderMap, body: Bytes) -> Response {
    state
        .raw
        .lock()
        .unwrap()
        .push((headers.clone(), body.clone()));
    let secret = WebhookSecret::parse(SECRET).unwrap();
    let now = chrono::Utc::now().timestamp();
    if signing::verify(&secret, &headers, &body, now, signing::DEFAULT_TOLERANCE).is_err() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let event: HookEvent = serde_json::from_slice(&body).unwrap();
    state.verified.lock().unwrap().push(event.clone());
    let answer = match &event.payload {
        HookPayload::PreToolUse { tool_name, .. } if tool_name == "Danger" => {
            json!({"decision": "block", "reason": "the policy service refuses"})
        }
        HookPayload::PreToolUse { tool_input, .. } => json!({
            "decision": "continue",
            "updated_input": {"n": tool_input["n"].as_i64().unwrap_or(0) + 1},
            "additional_context": "checked by policy"
        }),
        _ => json!({}),
    };
    axum::Json(answer).into_response()
}

/// 10 MiB of whitespace in 1 KiB chunks, with no `Content-Length`: only a streaming cap stops it.
async fn huge_stream() -> axum::body::Body {
    let chunks = (0..10 * 1024).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 1024])));
    axum::body::Body::from_stream(futures::stream::iter(chunks))
}

async fn spawn_server() -> (String, Received) {
    let state = Received::default();
    let app = Router::new()
        .route("/hook", post(hook))
        .route("/redirect", post(|| async { Redirect::temporary("/hook") }))
        .route("/empty", post(|| async { StatusCode::NO_CONTENT }))
        .route("/garbage", post(|| async { "not json" }))
        .route("/get-only", get(|| async { "only GET here" }))
        .route("/huge", post(|| async { vec![b' '; 10 * 1024 * 1024] }))
        .route("/huge-stream", post(huge_stream))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), state)
}

fn pre_tool_use(tool: &str, input: Value) -> HookEvent {
    HookEvent {
        session_id: SessionId::generate(),
        tenant: TenantId::new("acme"),
        payload: HookPayload::PreToolUse {
            tool_use_id: "tu_1".into(),
            tool_name: tool.into(),
            tool_input: input,
        },
    }
}

/// The outbound client of a server with `allow_private_webhooks` set (or not).
fn egress(allow_private: bool) -> EgressClient {
    EgressClient::new(AddressPolicy::from_allow_private(allow_private)).unwrap()
}

fn remote(url: String, secret: &str) -> RemoteHook {
    RemoteHook::new(
        RemoteTarget::parse(&url, secret).unwrap(),
        egress(true),
        Duration::from_secs(5),
    )
}

fn remote_config(name: &str, url: String) -> HookConfig {
    HookConfig {
        name: name.into(),
        event: HookEventName::PreToolUse,
        matcher: None,
        handler: HookHandlerConfig::Remote {
            url,
            secret: SECRET.into(),
        },
        timeout_ms: Some(2_000),
        failure: FailurePolicy::FailClosed,
        enabled: true,
    }
}

#[tokio::test]
async fn a_signed_event_is_verified_by_the_server_and_its_answer_used() {
    let (base, received) = spawn_server().await;
    let event = pre_tool_use("Counter", json!({"n": 1}));
    let answer = remote(format!("{base}/hook"), SECRET)
        .handle(&event)
        .await
        .unwrap();
    assert_eq!(answer.decision, HookDecision::Continue);
    assert_eq!(answer.updated_input, Some(json!({"n": 2})));
    assert_eq!(
        answer.additional_context.as_deref(),
        Some("checked by policy")
    );
    assert_eq!(received.verified.lock().unwrap().clone(), vec![event]);
    let (headers, _) = received.raw.lock().unwrap()[0].clone();
    assert_eq!(headers["content-type"], "application/json");
    assert!(
        headers["webhook-signature"]
            .to_str()
            .unwrap()
            .starts_with("v1,")
    );
}

#[tokio::test]
async fn a_request_signed_with_another_secret_fails_the_hook() {
    let (base, received) = spawn_server().await;
    let event = pre_tool_use("Counter", json!({"n": 1}));
    let error = remote(format!("{base}/hook"), "some other secret")
        .handle(&event)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        HookError::Failed("hook answered 401 Unauthorized".into())
    );
    assert!(received.verified.lock().unwrap().is_empty());
    assert_eq!(received.raw.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn forged_and_stale_signatures_are_rejected_by_verify() {
    let (base, received) = spawn_server().await;
    remote(format!("{base}/hook"), SECRET)
        .handle(&pre_tool_use("Counter", json!({"n": 1})))
        .await
        .unwrap();
    let (headers, body) = received.raw.lock().unwrap()[0].clone();
    let secret = WebhookSecret::parse(SECRET).unwrap();
    let sent_at: i64 = headers["webhook-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let tolerance = Duration::from_secs(300);
    assert_eq!(
        signing::verify(&secret, &headers, &body, sent_at, tolerance),
        Ok(())
    );

    let mut forged_body = body.to_vec();
    forged_body.extend_from_slice(b" ");
    assert_eq!(
        signing::verify(&secret, &headers, &forged_body, sent_at, tolerance),
        Err(VerifyError::BadSignature)
    );
    let mut forged_headers = headers.clone();
    forged_headers.insert("webhook-signature", "v1,Zm9yZ2Vk".parse().unwrap());
    assert_eq!(
        signing::verify(&secret, &forged_headers, &body, sent_at, tolerance),
        Err(VerifyError::BadSignature)
    );
    assert_eq!(
        signing::verify(&secret, &headers, &body, sent_at + 3_600, tolerance),
        Err(VerifyError::Stale {
            tolerance_secs: 300
        })
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (base, received) = spawn_server().await;
    let error = remote(format!("{base}/redirect"), SECRET)
        .handle(&pre_tool_use("Counter", json!({"n": 1})))
        .await
        .unwrap_err();
    let HookError::Failed(text) = error else {
        panic!("expected a failure, got {error:?}");
    };
    assert!(text.contains("redirects are not followed"), "{text}");
    assert!(received.raw.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_empty_answer_continues_and_garbage_fails() {
    let (base, _) = spawn_server().await;
    let event = pre_tool_use("Counter", json!({"n": 1}));
    let answer = remote(format!("{base}/empty"), SECRET)
        .handle(&event)
        .await
        .unwrap();
    assert_eq!(answer.decision, HookDecision::Continue);
    assert_eq!(answer.updated_input, None);
    let error = remote(format!("{base}/garbage"), SECRET)
        .handle(&event)
        .await
        .unwrap_err();
    assert!(matches!(error, HookError::Failed(text) if text.contains("not a hook response")));
}

#[tokio::test]
async fn an_unreachable_fail_closed_remote_hook_blocks() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let configs = vec![remote_config(
        "policy",
        format!("http://127.0.0.1:{port}/hook"),
    )];
    let catalog = HookCatalog::new().with_egress(egress(true));
    let (runner, _) = HookRunner::from_config(&configs, &catalog).unwrap();
    let outcome = runner.run(pre_tool_use("Counter", json!({"n": 1}))).await;
    let block = outcome.block.unwrap();
    assert!(block.failed);
    // The connection error (and the port) is for the log; the block says only HOOK_FAILED.
    assert_eq!(block.reason, "hook policy failed (HOOK_FAILED)");
    assert!(!block.reason.contains(&port.to_string()));
}

#[tokio::test]
async fn remote_hooks_need_an_outbound_client_to_be_installed() {
    let configs = vec![remote_config(
        "policy",
        "https://policy.example/hook".into(),
    )];
    let (_, statuses) = HookRunner::from_config(&configs, &HookCatalog::new()).unwrap();
    assert_eq!(statuses[0].status_token, HookStatusToken::HookMissing);
    let catalog = HookCatalog::new().with_egress(egress(false));
    let (_, statuses) = HookRunner::from_config(&configs, &catalog).unwrap();
    assert_eq!(statuses[0].status_token, HookStatusToken::HookInstalledOk);
}

#[tokio::test]
async fn loopback_link_local_and_names_resolving_to_loopback_are_refused_by_default() {
    let (base, received) = spawn_server().await;
    let port = base.rsplit(':').next().unwrap().to_owned();
    let strict = egress(false);
    for url in [
        format!("{base}/hook"),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let hook = RemoteHook::new(
            RemoteTarget::parse(&url, SECRET).unwrap(),
            strict.clone(),
            Duration::from_secs(5),
        );
        let error = hook
            .handle(&pre_tool_use("Counter", json!({"n": 1})))
            .await
            .unwrap_err();
        // The log gets the reason...
        let HookError::Failed(detail) = error else {
            panic!("{url}: expected a failure, got {error:?}");
        };
        assert!(detail.contains("is refused"), "{url}: {detail}");
    }
    // ... and nothing ever reached the live server on loopback.
    assert!(received.raw.lock().unwrap().is_empty());

    // Through the pipeline, the tenant sees one generic result whatever the address.
    let calls = Arc::new(AtomicUsize::new(0));
    let mut seen = Vec::new();
    for url in [
        format!("{base}/hook"),
        format!("http://localhost:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let catalog = HookCatalog::new().with_egress(strict.clone());
        let (runner, _) =
            HookRunner::from_config(&[remote_config("policy", url)], &catalog).unwrap();
        let outcome = pipeline_with(runner, calls.clone())
            .call(
                "Counter",
                json!({"n": 1}),
                &ToolContext::for_tests(),
                &HashSet::new(),
            )
            .await;
        seen.push((outcome.result.code.clone(), outcome.result.content.clone()));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "fail-closed: the tool never ran"
    );
    for (code, content) in &seen {
        assert_eq!(code.as_deref(), Some(HOOK_FAILED));
        assert_eq!(content, &seen[0].1);
        assert!(content.starts_with(&failed_reason("policy")), "{content}");
        for leak in ["127.0.0.1", "localhost", "169.254", "refused", &port] {
            assert!(!content.contains(leak), "{content} leaks {leak}");
        }
    }
    assert!(received.raw.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_405_or_a_10_mib_answer_fails_the_hook_with_no_detail_for_the_tenant() {
    let (base, received) = spawn_server().await;
    let event = pre_tool_use("Counter", json!({"n": 1}));
    let error = remote(format!("{base}/get-only"), SECRET)
        .handle(&event)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        HookError::Failed("hook answered 405 Method Not Allowed".into())
    );
    let error = remote(format!("{base}/huge"), SECRET)
        .handle(&event)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, HookError::Failed(text) if text.contains("larger than 65536 bytes")),
        "{error:?}"
    );

    let calls = Arc::new(AtomicUsize::new(0));
    let mut seen = Vec::new();
    for path in ["get-only", "huge"] {
        let catalog = HookCatalog::new().with_egress(egress(true));
        let configs = [remote_config("policy", format!("{base}/{path}"))];
        let (runner, _) = HookRunner::from_config(&configs, &catalog).unwrap();
        let outcome = pipeline_with(runner, calls.clone())
            .call(
                "Counter",
                json!({"n": 1}),
                &ToolContext::for_tests(),
                &HashSet::new(),
            )
            .await;
        seen.push((outcome.result.code.clone(), outcome.result.content.clone()));
    }
    assert_eq!(
        seen[0], seen[1],
        "the same result for a 405 and an oversized answer"
    );
    assert_eq!(seen[0].0.as_deref(), Some(HOOK_FAILED));
    for leak in ["405", "Method", "larger", "65536", "GET"] {
        assert!(!seen[0].1.contains(leak), "{} leaks {leak}", seen[0].1);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(received.verified.lock().unwrap().is_empty());
}

/// A pipeline with `runner` as its hooks, a `Counter` tool counting its calls, and every call
/// allowed.
fn pipeline_with(runner: HookRunner, calls: Arc<AtomicUsize>) -> Pipeline {
    let mut registry = ToolRegistry::new();
    registry.register(counter(calls, "Counter")).unwrap();
    let allow = |_: &dyn Tool, _: &Value| {
        Verdict::Allow(Reason {
            stage: Stage::Allowed,
            rule: None,
            grant_id: None,
            message: "allowed".into(),
        })
    };
    Pipeline::new(registry, Arc::new(allow)).with_hooks(runner)
}

fn counter(calls: Arc<AtomicUsize>, name: &str) -> Arc<dyn Tool> {
    Arc::new(
        ToolBuilder::new(name)
            .schema(json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "maximum": 10}},
                "required": ["n"]
            }))
            .handler(move |input, _| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(format!("n={}", input["n"])))
                }
            })
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn the_pipeline_uses_a_remote_policy_hook() {
    let (base, received) = spawn_server().await;
    let configs = vec![HookConfig {
        name: "policy".into(),
        event: HookEventName::PreToolUse,
        matcher: Some("*".into()),
        handler: HookHandlerConfig::Remote {
            url: format!("{base}/hook"),
            secret: SECRET.into(),
        },
        timeout_ms: None,
        failure: FailurePolicy::FailClosed,
        enabled: true,
    }];
    let catalog = HookCatalog::new().with_egress(egress(true));
    let (runner, statuses) = HookRunner::from_config(&configs, &catalog).unwrap();
    assert_eq!(statuses[0].status_token, HookStatusToken::HookInstalledOk);

    let calls = Arc::new(AtomicUsize::new(0));
    let mut registry = ToolRegistry::new();
    registry
        .register(counter(calls.clone(), "Counter"))
        .unwrap();
    registry.register(counter(calls.clone(), "Danger")).unwrap();
    let allow = |_: &dyn Tool, _: &Value| {
        Verdict::Allow(Reason {
            stage: Stage::Allowed,
            rule: None,
            grant_id: None,
            message: "allowed".into(),
        })
    };
    let pipeline = Pipeline::new(registry, Arc::new(allow)).with_hooks(runner);
    let ctx = ToolContext::for_tests();
    let unlocked = HashSet::new();

    // The policy service blocks Danger: the tool never runs.
    let outcome = pipeline
        .call("Danger", json!({"n": 1}), &ctx, &unlocked)
        .await;
    assert_eq!(outcome.result.code.as_deref(), Some(codes::HOOK_BLOCKED));
    assert!(
        outcome
            .result
            .content
            .contains("the policy service refuses")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // It rewrites Counter's input (n + 1); the rewrite is validated before the call.
    let outcome = pipeline
        .call("Counter", json!({"n": 4}), &ctx, &unlocked)
        .await;
    assert_eq!(outcome.result.content, "n=5");
    assert!(outcome.decision.rewritten_by_hook);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A rewrite that breaks the schema (n = 11 > 10) is refused.
    let outcome = pipeline
        .call("Counter", json!({"n": 10}), &ctx, &unlocked)
        .await;
    assert_eq!(
        outcome.result.code.as_deref(),
        Some(codes::INPUT_SCHEMA_INVALID)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(received.verified.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn an_answer_without_a_length_is_capped_while_streaming() {
    let (base, _) = spawn_server().await;
    let error = remote(format!("{base}/huge-stream"), SECRET)
        .handle(&pre_tool_use("Counter", json!({"n": 1})))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, HookError::Failed(text) if text.contains("larger than 65536 bytes")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_request_that_gets_no_answer_ends_at_its_deadline() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let limits = norma::egress::RequestLimits {
        timeout: Duration::from_millis(200),
        max_response_bytes: 1024,
    };
    let error = egress(true)
        .post(
            norma::egress::Purpose::RemoteHook,
            &url,
            Default::default(),
            b"{}".to_vec(),
            limits,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, norma::egress::EgressError::Timeout(t) if t == limits.timeout),
        "{error}"
    );
}
