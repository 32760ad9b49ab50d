//! The usage ledger through the API: per-run and per-session totals with their cost from the
//! price table, `GET /v1/usage` grouped per day, session and model, tenant isolation, and the
//! bounds of the report's parameters. Runs against a fake Anthropic endpoint (exact token
//! counts, cache tokens included) on both stores.

use crate::helpers::{Backend, TestApp, error_code};
use serde_json::{Value, json};
use std::time::Duration;

use crate::tenant_providers::fake_llm;

#[tokio::test]
async fn usage_is_totalled_and_priced_on_sqlite() {
    usage_is_totalled_and_priced(Backend::Sqlite).await;
}

#[tokio::test]
async fn usage_is_totalled_and_priced_on_postgres() {
    usage_is_totalled_and_priced(Backend::Postgres).await;
}

#[tokio::test]
async fn usage_report_parameters_are_bounded_on_sqlite() {
    usage_report_parameters_are_bounded(Backend::Sqlite).await;
}

#[tokio::test]
async fn usage_report_parameters_are_bounded_on_postgres() {
    usage_report_parameters_are_bounded(Backend::Postgres).await;
}

/// A server where tenant `acme` talks to the fake Anthropic model `acme-model` (priced) and
/// every other tenant to the scripted default (not priced).
async fn app_with_fake(backend: Backend) -> Option<(TestApp, fake_llm::FakeLlm)> {
    let fake = fake_llm::FakeLlm::start().await;
    let url = fake.url();
    let app = TestApp::spawn_with(backend, move |settings| {
        let mut acme = norma::llm::ProviderConfig::new(norma::llm::ProviderKind::Anthropic);
        acme.base_url = Some(url);
        acme.model = "acme-model".into();
        acme.api_key = Some(secrecy::SecretString::from("sk-acme"));
        settings.tenant_providers.insert("acme".into(), acme);
        settings.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        settings.prices = vec![norma::usage::Price {
            provider: "anthropic".into(),
            model: "acme-model".into(),
            input: 3_000_000,
            output: 15_000_000,
            cache_read: 300_000,
            cache_write: 3_750_000,
        }];
    })
    .await?;
    Some((app, fake))
}

async fn finished_run(app: &TestApp, token: &str, session: &str, text: &str) -> Value {
    let accepted: Value = app.prompt(token, session, text).await.json().await.unwrap();
    let run = accepted["run_id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let record: Value = app
            .get(&format!("/v1/sessions/{session}/runs/{run}"), token)
            .await
            .json()
            .await
            .unwrap();
        if !matches!(record["status"].as_str(), Some("running" | "queued")) {
            return record;
        }
        assert!(tokio::time::Instant::now() < deadline, "run: {record}");
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

async fn report(app: &TestApp, token: &str, query: &str) -> Value {
    let response = app.get(&format!("/v1/usage?{query}"), token).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn usage_is_totalled_and_priced(backend: Backend) {
    let Some((app, fake)) = app_with_fake(backend).await else {
        return;
    };
    // Each fake turn reports input 10, cache write 3, cache read 7; output 9 for the tool
    // turn, 5 for the text turn.
    fake.push(fake_llm::Reply::sse(fake_llm::anthropic::tool_turn(
        "toolu_1",
        "NoSuchTool",
        &json!({}),
        1,
    )));
    fake.push(fake_llm::Reply::sse(fake_llm::anthropic::text_turn("done")));
    fake.set_fallback(fake_llm::Reply::sse(fake_llm::anthropic::text_turn(
        "again",
    )));
    let token = app.token("acme");
    let session = app.create_session("acme", &json!({})).await;
    let before = chrono::Utc::now() - chrono::Duration::minutes(1);

    let first = finished_run(&app, &token, &session, "one").await;
    assert_eq!(first["status"], "completed", "{first}");
    // 2 calls: input 20, output 14, cache read 14, cache write 6. Cost in pico-units:
    // 20×3e6 + 14×15e6 + 14×3e5 + 6×3.75e6 = 296.7e6 → 297 micro-units.
    assert_eq!(
        first["usage"],
        json!({
            "model_calls": 2, "input_tokens": 20, "output_tokens": 14,
            "cache_read_tokens": 14, "cache_write_tokens": 6,
            "cost_micros": 297, "unpriced_model_calls": 0
        })
    );
    let events = app.events(&token, &session).await;
    let usage_event = events.iter().find(|e| e["type"] == "usage").unwrap();
    assert_eq!(usage_event["payload"]["model_calls"], 2);
    assert_eq!(
        usage_event["payload"]["input_tokens"], 40,
        "the event counts cached input too"
    );

    let second = finished_run(&app, &token, &session, "two").await;
    assert_eq!(second["usage"]["model_calls"], 1, "{second}");
    // 1 call: 10×3e6 + 5×15e6 + 7×3e5 + 3×3.75e6 = 118.35e6 pico.
    assert_eq!(second["usage"]["cost_micros"], 118);

    let record: Value = app
        .get(&format!("/v1/sessions/{session}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["usage"]["model_calls"], 3, "{record}");
    assert_eq!(record["usage"]["output_tokens"], 19);
    // Summed exactly in pico-units, then rounded: 415.05e6 → 415.
    assert_eq!(record["usage"]["cost_micros"], 415);

    let after = chrono::Utc::now() + chrono::Duration::minutes(1);
    let range = format!(
        "from={}&to={}",
        urlencode(&before.to_rfc3339()),
        urlencode(&after.to_rfc3339())
    );
    let by_model = report(&app, &token, &format!("{range}&group_by=model")).await;
    assert_eq!(by_model["truncated"], false);
    let groups = by_model["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{by_model}");
    assert_eq!(groups[0]["key"], "anthropic/acme-model");
    assert_eq!(groups[0]["model_calls"], 3);
    assert_eq!(groups[0]["cost_micros"], 415);
    let by_session = report(&app, &token, &format!("{range}&group_by=session")).await;
    assert_eq!(by_session["groups"][0]["key"], session.as_str());
    assert_eq!(by_session["groups"][0]["model_calls"], 3);
    let by_day = report(&app, &token, &format!("{range}&group_by=day")).await;
    let days: u64 = by_day["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| {
            assert_eq!(group["key"].as_str().unwrap().len(), 10, "{group}");
            group["model_calls"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(days, 3);
    let limited = report(&app, &token, &format!("{range}&group_by=model&limit=1")).await;
    assert_eq!(
        limited["truncated"], true,
        "a full page says more may exist"
    );

    // A range before the calls is empty.
    let earlier = format!(
        "from={}&to={}&group_by=day",
        urlencode(&(before - chrono::Duration::days(2)).to_rfc3339()),
        urlencode(&before.to_rfc3339())
    );
    assert_eq!(report(&app, &token, &earlier).await["groups"], json!([]));

    // Another tenant sees none of it, and its scripted (unpriced) calls have no cost.
    let other = app.token("other");
    let other_session = app.create_session("other", &json!({})).await;
    let run = finished_run(&app, &other, &other_session, "hi").await;
    assert_eq!(run["usage"]["model_calls"], 1, "{run}");
    assert_eq!(run["usage"]["unpriced_model_calls"], 1);
    assert_eq!(run["usage"]["cost_micros"], 0);
    let theirs = report(&app, &other, &format!("{range}&group_by=model")).await;
    assert_eq!(theirs["groups"].as_array().unwrap().len(), 1);
    assert_eq!(theirs["groups"][0]["key"], "scripted/");
    let hidden = app
        .get(
            &format!(
                "/v1/sessions/{session}/runs/{}",
                first["id"].as_str().unwrap()
            ),
            &other,
        )
        .await;
    assert_eq!(hidden.status(), 404);
}

async fn usage_report_parameters_are_bounded(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("acme");
    let from = "2026-01-01T00:00:00Z";
    for query in [
        "group_by=day".to_owned(),
        format!("from={from}&to=2026-01-02T00:00:00Z"),
        format!("from={from}&to=2026-01-02T00:00:00Z&group_by=week"),
        "from=yesterday&to=2026-01-02T00:00:00Z&group_by=day".to_owned(),
        format!("from={from}&to={from}&group_by=day"),
        format!("from=2026-01-02T00:00:00Z&to={from}&group_by=day"),
        format!("from={from}&to=2027-01-03T00:00:00Z&group_by=day"),
        format!("from={from}&to=2026-01-02T00:00:00Z&group_by=day&limit=0"),
        format!("from={from}&to=2026-01-02T00:00:00Z&group_by=day&limit=1001"),
    ] {
        let (status, code) = error_code(app.get(&format!("/v1/usage?{query}"), &token).await).await;
        assert_eq!((status, code.as_str()), (422, "INVALID_REQUEST"), "{query}");
    }
    let ok = format!("from={from}&to=2026-12-31T00:00:00Z&group_by=day&limit=1000");
    assert_eq!(
        app.get(&format!("/v1/usage?{ok}"), &token).await.status(),
        200
    );
    let anonymous = app
        .client
        .get(app.url(&format!("/v1/usage?{ok}")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

fn urlencode(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}
