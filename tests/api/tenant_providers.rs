//! Provider settings per tenant: a tenant's sessions talk to its own endpoint with its own key
//! (never shown by the API); other tenants keep the server default.

use crate::helpers::{Backend, TestApp};
use serde_json::json;
use std::time::Duration;

#[path = "../support/fake_llm.rs"]
pub(crate) mod fake_llm;

#[tokio::test]
async fn each_tenant_uses_its_configured_provider() {
    let fake = fake_llm::FakeLlm::start().await;
    fake.set_fallback(fake_llm::Reply::sse(fake_llm::anthropic::text_turn(
        "from the acme model",
    )));
    let url = fake.url();
    let app = TestApp::spawn_with(Backend::Sqlite, move |settings| {
        let mut acme = norma::llm::ProviderConfig::new(norma::llm::ProviderKind::Anthropic);
        acme.base_url = Some(url);
        acme.model = "acme-model".into();
        acme.api_key = Some(secrecy::SecretString::from("sk-acme-secret"));
        settings.tenant_providers.insert("acme".into(), acme);
        // The fake provider listens on loopback: the operator's private allow-list.
        settings.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await
    .unwrap();
    for tenant in ["acme", "other"] {
        let token = app.token(tenant);
        let id = app.create_session(tenant, &json!({})).await;
        app.prompt(&token, &id, "hi there").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let reply = loop {
            let messages = app.messages(&token, &id).await;
            if let Some(text) = messages["messages"]
                .get(1)
                .and_then(|m| m["content"][0]["text"].as_str())
            {
                break text.to_owned();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no answer for {tenant}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let session = app
            .get(&format!("/v1/sessions/{id}"), &token)
            .await
            .text()
            .await
            .unwrap();
        assert!(
            !session.contains("sk-acme-secret"),
            "the key is never returned"
        );
        match tenant {
            "acme" => assert_eq!(reply, "from the acme model"),
            _ => assert_eq!(reply, "hi there", "the server default (scripted echo)"),
        }
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "only acme reached the fake");
    assert_eq!(requests[0].headers["x-api-key"], "sk-acme-secret");
    assert_eq!(requests[0].body["model"], "acme-model");
}

/// Providers are infrastructure traffic through the egress client: an endpoint on a
/// non-public address outside `egress.allow_private_cidrs` is refused when the server starts.
#[tokio::test]
async fn a_provider_on_an_unlisted_private_address_is_a_start_up_error() {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(data_dir.path());
    let mut acme = norma::llm::ProviderConfig::new(norma::llm::ProviderKind::Anthropic);
    acme.base_url = Some("http://169.254.169.254:80".into());
    acme.model = "acme-model".into();
    acme.api_key = Some(secrecy::SecretString::from("sk-acme-secret"));
    settings.tenant_providers.insert("acme".into(), acme);
    settings.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    let error = match norma::app::App::build(settings).await {
        Ok(_) => panic!("a provider on the metadata address must be refused"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("tenant_providers.acme.base_url")
            && error.contains("egress.allow_private_cidrs"),
        "{error}"
    );
}
