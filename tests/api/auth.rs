//! Token attacks and key handling: each refused with 401 and a specific code.

use crate::helpers::{AUDIENCE, Backend, ISSUER, TEST_SECRET, TestApp, error_code};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use norma::config::PublicKeySettings;
use serde_json::{Value, json};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/keys")
        .join(name)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn claims() -> Value {
    json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "tenant": "acme",
        "scope": "sessions:read sessions:write", "iat": now(), "exp": now() + 600
    })
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(TEST_SECRET.as_bytes()),
    )
    .unwrap()
}

fn rs256(kid: &str, key_file: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    let pem = std::fs::read(fixture(key_file)).unwrap();
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

fn es256(kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    let pem = std::fs::read(fixture("ec1.pem")).unwrap();
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_pem(&pem).unwrap()).unwrap()
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn without(mut base: Value, key: &str) -> Value {
    base.as_object_mut().unwrap().remove(key);
    base
}

async fn status_of(app: &TestApp, token: &str) -> (u16, String) {
    let response = app.get("/v1/sessions", token).await;
    if response.status() == 200 {
        return (200, "OK".into());
    }
    error_code(response).await
}

/// A server trusting the HS256 test secret AND the RS256 key `rsa1` AND the ES256 key `ec1`.
async fn mixed_key_app() -> TestApp {
    TestApp::spawn_with(Backend::Sqlite, |settings| {
        settings.auth.public_keys = vec![
            PublicKeySettings {
                kid: "rsa1".into(),
                algorithm: "RS256".into(),
                pem_file: fixture("rsa1.pub.pem"),
            },
            PublicKeySettings {
                kid: "ec1".into(),
                algorithm: "ES256".into(),
                pem_file: fixture("ec1.pub.pem"),
            },
        ];
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn valid_tokens_of_every_pinned_algorithm_are_accepted() {
    let app = mixed_key_app().await;
    assert_eq!(status_of(&app, &hs256(&claims())).await.0, 200);
    assert_eq!(
        status_of(&app, &rs256("rsa1", "rsa1.pem", &claims()))
            .await
            .0,
        200
    );
    assert_eq!(status_of(&app, &es256("ec1", &claims())).await.0, 200);
}

#[tokio::test]
async fn token_attacks_are_rejected_with_codes() {
    let app = mixed_key_app().await;
    let unauth = (401, "UNAUTHENTICATED".to_owned());

    // alg: none, with and without a trailing signature.
    let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims().to_string());
    assert_eq!(
        status_of(&app, &format!("{none_header}.{payload}.")).await,
        unauth
    );
    assert_eq!(
        status_of(&app, &format!("{none_header}.{payload}")).await,
        unauth
    );

    // HS/RS confusion: HS256 "signed" with the RSA public key as the shared secret.
    let public_pem = std::fs::read(fixture("rsa1.pub.pem")).unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa1".into());
    let confused =
        jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(&public_pem)).unwrap();
    assert_eq!(status_of(&app, &confused).await, unauth);
    // RS256 header but the ES256 key's kid: algorithm mismatch for that key.
    let mismatched = rs256("ec1", "rsa1.pem", &claims());
    assert_eq!(status_of(&app, &mismatched).await, unauth);

    // Tampered signature and tampered payload.
    let good = hs256(&claims());
    let (head, sig) = good.rsplit_once('.').unwrap();
    let flipped = match sig.strip_prefix('A') {
        Some(rest) => format!("B{rest}"),
        None => format!("A{}", &sig[1..]),
    };
    assert_eq!(status_of(&app, &format!("{head}.{flipped}")).await, unauth);
    let parts: Vec<&str> = good.split('.').collect();
    let evil_payload =
        URL_SAFE_NO_PAD.encode(with(claims(), "tenant", json!("victim")).to_string());
    assert_eq!(
        status_of(&app, &format!("{}.{evil_payload}.{}", parts[0], parts[2])).await,
        unauth
    );

    // Time claims (leeway is 30 s).
    let expired = with(claims(), "exp", json!(now() - 120));
    assert_eq!(
        status_of(&app, &hs256(&expired)).await,
        (401, "TOKEN_EXPIRED".into())
    );
    let future = with(claims(), "nbf", json!(now() + 3600));
    assert_eq!(
        status_of(&app, &hs256(&future)).await,
        (401, "TOKEN_NOT_YET_VALID".into())
    );
    assert_eq!(
        status_of(&app, &hs256(&without(claims(), "exp"))).await,
        unauth
    );

    // Audience and issuer: wrong or absent.
    assert_eq!(
        status_of(&app, &hs256(&with(claims(), "aud", json!("other")))).await,
        (401, "TOKEN_INVALID_AUDIENCE".into())
    );
    assert_eq!(
        status_of(&app, &hs256(&without(claims(), "aud"))).await,
        (401, "TOKEN_INVALID_AUDIENCE".into())
    );
    assert_eq!(
        status_of(&app, &hs256(&with(claims(), "iss", json!("evil")))).await,
        (401, "TOKEN_INVALID_ISSUER".into())
    );
    assert_eq!(
        status_of(&app, &hs256(&without(claims(), "iss"))).await,
        (401, "TOKEN_INVALID_ISSUER".into())
    );

    // Tenant claim missing, empty, or not a safe id.
    for bad in [
        without(claims(), "tenant"),
        with(claims(), "tenant", json!("")),
        with(claims(), "tenant", json!(7)),
        with(claims(), "tenant", json!("../etc")),
    ] {
        assert_eq!(
            status_of(&app, &hs256(&bad)).await,
            (401, "TOKEN_MISSING_TENANT".into()),
            "{bad}"
        );
    }

    // Unknown kid (a key the server never saw).
    assert_eq!(
        status_of(&app, &rs256("rsa2", "rsa2.pem", &claims())).await,
        (401, "TOKEN_UNKNOWN_KEY".into())
    );

    // Garbage and malformed headers.
    for garbage in ["garbage", "a.b.c", "....", ""] {
        assert_eq!(status_of(&app, garbage).await, unauth, "{garbage:?}");
    }
    let no_header = app
        .client
        .get(app.url("/v1/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(no_header).await, unauth);
    let basic = app
        .client
        .get(app.url("/v1/sessions"))
        .header("authorization", "Basic Zm9vOmJhcg==")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(basic).await, unauth);
}

#[tokio::test]
async fn rs_only_server_refuses_hs256_entirely() {
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        settings.auth.hs256_secret = None;
        settings.auth.public_keys = vec![PublicKeySettings {
            kid: "rsa1".into(),
            algorithm: "RS256".into(),
            pem_file: fixture("rsa1.pub.pem"),
        }];
    })
    .await
    .unwrap();
    let public_pem = std::fs::read(fixture("rsa1.pub.pem")).unwrap();
    let confused = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(),
        &EncodingKey::from_secret(&public_pem),
    )
    .unwrap();
    assert_eq!(
        status_of(&app, &confused).await,
        (401, "UNAUTHENTICATED".into())
    );
    assert_eq!(
        status_of(&app, &rs256("rsa1", "rsa1.pem", &claims()))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn jwks_file_rotation_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::copy(fixture("jwks-rsa1.json"), &jwks).unwrap();
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        settings.auth.hs256_secret = None;
        settings.auth.jwks_file = Some(jwks.clone());
        settings.auth.jwks_min_reload_seconds = 0;
    })
    .await
    .unwrap();
    assert_eq!(
        status_of(&app, &rs256("rsa1", "rsa1.pem", &claims()))
            .await
            .0,
        200
    );
    assert_eq!(
        status_of(&app, &rs256("rsa2", "rsa2.pem", &claims())).await,
        (401, "TOKEN_UNKNOWN_KEY".into())
    );
    // Rotate: the file now holds only rsa2.
    std::fs::copy(fixture("jwks-rsa2.json"), &jwks).unwrap();
    assert_eq!(
        status_of(&app, &rs256("rsa2", "rsa2.pem", &claims()))
            .await
            .0,
        200
    );
    // A token signed by rsa2's private key but claiming kid rsa1 is refused.
    assert_eq!(
        status_of(&app, &rs256("rsa1", "rsa2.pem", &claims()))
            .await
            .0,
        401
    );
}

#[tokio::test]
async fn development_mode_generates_a_key_and_mints_working_tokens() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = crate::helpers::test_settings(data_dir.path());
    settings.auth = norma::config::AuthSettings::default();
    assert!(settings.auth.is_development());
    let verifier =
        norma::auth::JwtVerifier::from_settings(&settings.auth, data_dir.path()).unwrap();
    let key_file = data_dir.path().join(norma::auth::jwt::DEV_KEY_FILE);
    let key = std::fs::read_to_string(&key_file).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A second start reuses the same key.
    let again = norma::auth::JwtVerifier::from_settings(&settings.auth, data_dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), key);
    let token = verifier
        .mint(&norma::auth::TokenRequest {
            tenant: "dev".into(),
            subject: "me".into(),
            scopes: vec!["sessions:write".into()],
            ttl: std::time::Duration::from_secs(60),
        })
        .unwrap();
    let principal = again.verify(&token).unwrap();
    assert_eq!(principal.tenant.as_str(), "dev");
    assert_eq!(principal.subject, "me");
}
