//! Tenant spend budgets and the operator API through the real server: a spent budget refuses
//! prompts with `429 BUDGET_EXCEEDED` (reset time in the body, `Retry-After`), a run that
//! crosses it ends after its turn with `budget_exhausted`, cost budgets need priced models,
//! the operator API takes only the operator token, hostile values are refused, and two
//! replicas on one Postgres enforce one budget. The scripted model reports usage (estimated
//! tokens, always at least one per call), so a budget of one token or one micro-unit is
//! crossed by the first turn.

use crate::helpers::{Backend, TestApp, count, error_code, fresh_pg_database, test_settings};
use norma::config::Settings;
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const OPERATOR_TOKEN: &str = "operator-token-0123456789";

fn with_operator(settings: &mut Settings) {
    settings.operator.token_sha256 = Some(hex::encode(Sha256::digest(OPERATOR_TOKEN)));
    // `priced` of the scripted provider costs one unit (10^6 micro-units) per token.
    settings.prices = vec![norma::usage::Price {
        provider: "scripted".into(),
        model: "priced".into(),
        input: 1_000_000_000_000,
        output: 1_000_000_000_000,
        cache_read: 0,
        cache_write: 0,
    }];
}

async fn app(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, with_operator).await
}

fn budgets_path(tenant: &str) -> String {
    format!("/v1/operator/tenants/{tenant}/budgets")
}

async fn put_budget(app: &TestApp, tenant: &str, body: &Value) -> reqwest::Response {
    app.client
        .put(app.url(&budgets_path(tenant)))
        .bearer_auth(OPERATOR_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn get_budget(app: &TestApp, tenant: &str) -> Value {
    let response = app.get(&budgets_path(tenant), OPERATOR_TOKEN).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// A session whose run calls a tool, then ends: the tool call is one whole turn.
fn tool_then_done(model: Option<&str>) -> Value {
    let mut config = json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "echo first-turn-ran"}}]},
        {"text": "second turn"}
    ]}}});
    if let Some(model) = model {
        config["model"]["name"] = json!(model);
    }
    config
}

async fn terminal_of(app: &TestApp, token: &str, id: &str) -> (Value, Vec<Value>) {
    let events = app
        .wait_for_events(token, id, |e| count(e, "terminal") >= 1)
        .await;
    let terminal = events
        .iter()
        .find(|e| e["type"] == "terminal")
        .unwrap()
        .clone();
    (terminal["payload"].clone(), events)
}

/// Reads a `429 BUDGET_EXCEEDED` and returns its `details` after checking `Retry-After`.
async fn budget_exceeded(response: reqwest::Response) -> Value {
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .expect("Retry-After")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("BUDGET_EXCEEDED")),
        "{body}"
    );
    let resets_at =
        chrono::DateTime::parse_from_rfc3339(body["details"]["resets_at"].as_str().unwrap())
            .unwrap()
            .to_utc();
    let seconds = (resets_at - chrono::Utc::now()).num_seconds();
    assert!(
        retry_after.abs_diff(seconds.max(1) as u64) <= 5,
        "Retry-After {retry_after} matches resets_at {resets_at}"
    );
    body["details"].clone()
}

async fn assert_other_tenant_served(app: &TestApp) {
    let token = app.token("other");
    let id = app
        .create_session(
            "other",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "hello").await.status(), 202);
    let (terminal, _) = terminal_of(app, &token, &id).await;
    assert_eq!(terminal["reason"], "end_turn", "{terminal}");
}

/// Declares `mod $name { sqlite(); postgres(); }` running `$case(backend)` on each store.
macro_rules! on_both_stores {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                $case(crate::helpers::Backend::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                $case(crate::helpers::Backend::Postgres).await;
            }
        }
    )*};
}

on_both_stores! {
    token_budget_ends_the_run_after_its_turn_and_refuses_prompts => super::token_budget_case;
    cost_budget_needs_priced_models => super::cost_budget_case;
    operator_api_takes_only_the_operator_token => super::operator_auth_case;
    hostile_budget_values_are_refused => super::hostile_values_case;
    configured_default_budget_applies_to_every_tenant => super::default_budget_case;
}

async fn token_budget_case(backend: Backend) {
    let Some(app) = app(backend).await else {
        return;
    };
    token_budget(app).await;
}

async fn token_budget(app: TestApp) {
    let token = app.token("acme");
    let id = app.create_session("acme", &tool_then_done(None)).await;
    let set = put_budget(&app, "acme", &json!({"tokens_per_day": 1})).await;
    assert_eq!(set.status(), 200);
    let view: Value = set.json().await.unwrap();
    assert_eq!(view["source"], "operator");
    assert_eq!(view["budget"]["tokens_per_day"], 1);
    assert!(view["exceeded"].is_null(), "nothing spent yet: {view}");

    // Admitted (nothing spent), the run crosses the budget in its first turn: the turn's
    // tool call runs and is answered, and no second turn starts.
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let (terminal, events) = terminal_of(&app, &token, &id).await;
    assert_eq!(
        terminal,
        json!({"reason": "budget_exhausted", "budget": "tenant_tokens"})
    );
    assert_eq!(count(&events, "assistant_message"), 1, "one turn only");
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("the turn's tool call was answered");
    assert_eq!(result["payload"]["result"]["is_error"], false, "{result}");
    assert!(
        result["payload"]["result"]["content"]
            .as_str()
            .unwrap()
            .contains("first-turn-ran")
    );

    // Spent: the next prompt (any session of the tenant) is refused with the reset time.
    let details = budget_exceeded(app.prompt(&token, &id, "again").await).await;
    assert_eq!(details["budget"], "tenant_tokens");
    assert_eq!(details["period"], "day");
    assert_eq!(details["limit"], 1);
    assert!(details["spent"].as_u64().unwrap() >= 1);
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1))
        .format("%Y-%m-%dT00:00:00Z")
        .to_string();
    assert_eq!(details["resets_at"], tomorrow);
    let fresh = app.create_session("acme", &tool_then_done(None)).await;
    budget_exceeded(app.prompt(&token, &fresh, "go").await).await;
    // An AG-UI run is a prompt too.
    let ag_ui = app
        .post_json(
            &format!("/v1/sessions/{fresh}/ag-ui"),
            &token,
            &json!({"threadId": fresh, "runId": "client-run",
                    "messages": [{"id": "m1", "role": "user", "content": "go"}]}),
        )
        .await;
    budget_exceeded(ag_ui).await;

    // The operator sees the spend, equal to the usage ledger's sums.
    let view = get_budget(&app, "acme").await;
    let usage: Value = app
        .get(
            &format!(
                "/v1/usage?from={}&to={}&group_by=day",
                chrono::Utc::now().format("%Y-%m-%dT00:00:00Z"),
                tomorrow
            ),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    let group = &usage["groups"][0];
    let ledger_tokens: u64 = [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ]
    .iter()
    .map(|key| group[key].as_u64().unwrap())
    .sum();
    assert_eq!(view["spend"]["day"]["tokens"], ledger_tokens, "{view}");
    assert_eq!(view["spend"]["month"]["tokens"], ledger_tokens, "{view}");
    assert_eq!(view["exceeded"]["budget"], "tenant_tokens");

    // Another tenant is still served.
    assert_other_tenant_served(&app).await;

    // Raising the budget works at once; resetting it to the default (none) too.
    let raised = put_budget(&app, "acme", &json!({"tokens_per_month": 1_000_000_000})).await;
    assert_eq!(raised.status(), 200);
    assert_eq!(app.prompt(&token, &fresh, "go").await.status(), 202);
    terminal_of(&app, &token, &fresh).await;
    let reset = app
        .client
        .delete(app.url(&budgets_path("acme")))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 200);
    let view: Value = reset.json().await.unwrap();
    assert_eq!(view["source"], "default");
    assert_eq!(
        view["budget"],
        json!({
            "tokens_per_day": null, "tokens_per_month": null,
            "cost_micros_per_day": null, "cost_micros_per_month": null
        })
    );
}

async fn cost_budget_case(backend: Backend) {
    let Some(app) = app(backend).await else {
        return;
    };
    let token = app.token("acme");
    // Created before the cost budget: its unpriced model is refused at the prompt.
    let unpriced = app
        .create_session("acme", &tool_then_done(Some("unpriced")))
        .await;
    let set = put_budget(&app, "acme", &json!({"cost_micros_per_day": 1})).await;
    assert_eq!(set.status(), 200);

    let response = app.prompt(&token, &unpriced, "go").await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "MODEL_NOT_PRICED", "{body}");
    assert_eq!(
        body["details"],
        json!({"provider": "scripted", "model": "unpriced"})
    );
    // A new session with an unpriced model is refused at creation.
    let created = app
        .post_json("/v1/sessions", &token, &tool_then_done(Some("unpriced")))
        .await;
    assert_eq!(error_code(created).await, (422, "MODEL_NOT_PRICED".into()));

    // A priced model: the first turn costs more than one micro-unit and ends the run.
    let priced = app
        .create_session("acme", &tool_then_done(Some("priced")))
        .await;
    assert_eq!(app.prompt(&token, &priced, "go").await.status(), 202);
    let (terminal, events) = terminal_of(&app, &token, &priced).await;
    assert_eq!(
        terminal,
        json!({"reason": "budget_exhausted", "budget": "tenant_cost"})
    );
    assert_eq!(count(&events, "tool_result"), 1);
    let details = budget_exceeded(app.prompt(&token, &priced, "again").await).await;
    assert_eq!(details["budget"], "tenant_cost");
    let view = get_budget(&app, "acme").await;
    assert!(
        view["spend"]["day"]["cost_micros"].as_u64().unwrap() >= 1,
        "{view}"
    );

    // A tenant without a cost budget may still use the unpriced model.
    let other = app.token("other");
    let id = app
        .create_session("other", &tool_then_done(Some("unpriced")))
        .await;
    assert_eq!(app.prompt(&other, &id, "go").await.status(), 202);
    let (terminal, _) = terminal_of(&app, &other, &id).await;
    assert_eq!(terminal["reason"], "end_turn", "{terminal}");
}

async fn operator_auth_case(backend: Backend) {
    // Without `operator.token_sha256` the operator API does not exist.
    let Some(off) = TestApp::spawn(backend).await else {
        return;
    };
    let response = off.get(&budgets_path("acme"), OPERATOR_TOKEN).await;
    assert_eq!(error_code(response).await, (404, "NOT_FOUND".into()));
    drop(off);
    let Some(app) = app(backend).await else {
        return;
    };
    // A tenant's own JWT (even its admin's) cannot read or raise its limits.
    let jwt = app.token_with_scopes("acme", &["sessions:read", "sessions:write", "tenant:admin"]);
    let response = app.get(&budgets_path("acme"), &jwt).await;
    assert_eq!(error_code(response).await, (401, "UNAUTHENTICATED".into()));
    let response = app
        .client
        .put(app.url(&budgets_path("acme")))
        .bearer_auth(&jwt)
        .json(&json!({"tokens_per_day": 1_000_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (401, "UNAUTHENTICATED".into()));
    // A wrong operator token, and none at all.
    let response = app.get(&budgets_path("acme"), "operator-token-wrong").await;
    assert_eq!(error_code(response).await, (401, "UNAUTHENTICATED".into()));
    let response = app
        .client
        .get(app.url(&budgets_path("acme")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (401, "UNAUTHENTICATED".into()));
    // The operator token works; the tenant's budget is the (empty) default.
    let view = get_budget(&app, "acme").await;
    assert_eq!(view["tenant"], "acme");
    assert_eq!(view["source"], "default");
    assert_eq!(view["spend"]["day"]["tokens"], 0);
    // The operator token is no tenant credential either.
    let response = app.get("/v1/sessions", OPERATOR_TOKEN).await;
    assert_eq!(response.status(), 401);
}

async fn hostile_values_case(backend: Backend) {
    let Some(app) = app(backend).await else {
        return;
    };
    for (body, field) in [
        (json!({"tokens_per_day": -1}), "tokens_per_day"),
        (
            json!({"tokens_per_day": 1_000_000_000_000_001_u64}),
            "tokens_per_day",
        ),
        (
            json!({"cost_micros_per_month": u64::MAX}),
            "cost_micros_per_month",
        ),
        (json!({"tokens_per_month": 1.5}), "tokens_per_month"),
        (json!({"tokens_per_month": "ten"}), "tokens_per_month"),
        (
            json!({"tokens_per_month": 18_446_744_073_709_551_616_f64}),
            "tokens_per_month",
        ),
        (json!({"tokens_per_week": 10}), ""),
        (json!([1, 2]), ""),
    ] {
        let response = put_budget(&app, "acme", &body).await;
        let status = response.status().as_u16();
        let error: Value = response.json().await.unwrap();
        assert_eq!(
            (status, error["code"].as_str()),
            (422, Some("INVALID_REQUEST")),
            "{body}: {error}"
        );
        assert!(
            error.to_string().contains(field),
            "{body}: the error names {field}: {error}"
        );
    }
    for tenant in ["bad%20tenant", &"t".repeat(129), "semi%3Bcolon"] {
        let response = app.get(&budgets_path(tenant), OPERATOR_TOKEN).await;
        assert_eq!(
            error_code(response).await,
            (422, "INVALID_REQUEST".into()),
            "{tenant}"
        );
    }
    // Nothing was stored, and the tenant is served.
    assert_eq!(get_budget(&app, "acme").await["source"], "default");
    let token = app.token("acme");
    let id = app.create_session("acme", &tool_then_done(None)).await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let (terminal, _) = terminal_of(&app, &token, &id).await;
    assert_eq!(terminal["reason"], "end_turn");
    assert_other_tenant_served(&app).await;
}

async fn default_budget_case(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        with_operator(settings);
        settings.limits.budget.tokens_per_month = Some(1);
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let id = app.create_session("acme", &tool_then_done(None)).await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let (terminal, _) = terminal_of(&app, &token, &id).await;
    assert_eq!(terminal["budget"], "tenant_tokens", "{terminal}");
    let details = budget_exceeded(app.prompt(&token, &id, "again").await).await;
    assert_eq!(details["period"], "month");
    let view = get_budget(&app, "acme").await;
    assert_eq!(view["source"], "default");
    assert_eq!(view["default"]["tokens_per_month"], 1);
    // The operator lifts it for this tenant only.
    let lifted = put_budget(&app, "acme", &json!({})).await;
    assert_eq!(lifted.status(), 200);
    assert_eq!(app.prompt(&token, &id, "again").await.status(), 202);
}

async fn replica(url: &str, name: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(SecretString::from(url.to_owned()));
    settings.replica_id = Some(name.into());
    with_operator(&mut settings);
    TestApp::start(settings, Backend::Postgres, dir).await
}

/// Two replicas on one Postgres: a budget set through one is enforced by the other, the
/// spend of runs on one refuses prompts on the other, and both show the same spend.
#[tokio::test]
async fn two_replicas_enforce_one_budget() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let a = replica(&url, "replica-a").await;
    let b = replica(&url, "replica-b").await;
    let token = a.token("acme");
    let set = put_budget(&b, "acme", &json!({"tokens_per_day": 1})).await;
    assert_eq!(set.status(), 200);

    // The run on A crosses the budget set on B.
    let first = a.create_session("acme", &tool_then_done(None)).await;
    assert_eq!(a.prompt(&token, &first, "go").await.status(), 202);
    let (terminal, _) = terminal_of(&a, &token, &first).await;
    assert_eq!(
        terminal,
        json!({"reason": "budget_exhausted", "budget": "tenant_tokens"})
    );
    // B refuses the tenant's next prompt, on a session of its own too.
    let second = b.create_session("acme", &tool_then_done(None)).await;
    let details = budget_exceeded(b.prompt(&token, &second, "go").await).await;
    assert_eq!(details["budget"], "tenant_tokens");
    budget_exceeded(a.prompt(&token, &second, "go").await).await;
    let (on_a, on_b) = (get_budget(&a, "acme").await, get_budget(&b, "acme").await);
    assert_eq!(on_a["spend"], on_b["spend"]);
    assert!(on_a["spend"]["day"]["tokens"].as_u64().unwrap() >= 1);

    // Raised through A, B admits as soon as the change's signal reaches it (B kept the row
    // it read for its refusals; the signal makes it forget it); the other tenant was served
    // all along.
    let raised = put_budget(&a, "acme", &json!({"tokens_per_day": 1_000_000_000})).await;
    assert_eq!(raised.status(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let response = b.prompt(&token, &second, "go").await;
        if response.status() == 202 {
            break;
        }
        budget_exceeded(response).await;
        assert!(
            std::time::Instant::now() < deadline,
            "B never heard of the raised budget"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (terminal, _) = terminal_of(&b, &token, &second).await;
    assert_eq!(terminal["reason"], "end_turn", "{terminal}");
    assert_other_tenant_served(&b).await;
}
