use super::*;
use pretty_assertions::assert_eq;

// The reference vector from the Standard Webhooks specification.
const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_TIMESTAMP: i64 = 1_614_265_330;
const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn headers(id: &str, timestamp: &str, signature: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(HEADER_ID, id.parse().unwrap());
    map.insert(HEADER_TIMESTAMP, timestamp.parse().unwrap());
    map.insert(HEADER_SIGNATURE, signature.parse().unwrap());
    map
}

#[test]
fn matches_the_standard_webhooks_reference_vector() {
    let secret = WebhookSecret::parse(SPEC_SECRET).unwrap();
    assert_eq!(
        sign(&secret, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY),
        SPEC_SIGNATURE
    );
    let map = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    assert_eq!(
        verify(
            &secret,
            &map,
            SPEC_BODY,
            SPEC_TIMESTAMP + 10,
            DEFAULT_TOLERANCE
        ),
        Ok(())
    );
}

#[test]
fn raw_secrets_use_the_text_bytes_and_prefixed_secrets_are_decoded() {
    let raw = WebhookSecret::parse("plain-secret").unwrap();
    assert_eq!(
        raw,
        WebhookSecret::from_bytes(b"plain-secret".to_vec()).unwrap()
    );
    let prefixed = WebhookSecret::parse("whsec_cGxhaW4tc2VjcmV0").unwrap();
    assert_eq!(prefixed, raw);
    assert_eq!(WebhookSecret::parse(""), Err(SecretError::Empty));
    assert_eq!(WebhookSecret::parse("whsec_"), Err(SecretError::Empty));
    assert_eq!(
        WebhookSecret::parse("whsec_!!!"),
        Err(SecretError::InvalidBase64)
    );
    assert_eq!(format!("{raw:?}"), "WebhookSecret(<redacted>)");
}

#[test]
fn signed_messages_round_trip_and_any_listed_signature_may_match() {
    let secret = WebhookSecret::parse("k").unwrap();
    let signed = sign_message(&secret, b"body", 1_000);
    assert!(signed.id.starts_with("msg_"));
    let mut map = HeaderMap::new();
    signed.apply(&mut map);
    assert_eq!(
        verify(&secret, &map, b"body", 1_000, DEFAULT_TOLERANCE),
        Ok(())
    );

    let rotated = format!("v1,AAAA {}", signed.signature);
    let map = headers(&signed.id, "1000", &rotated);
    assert_eq!(
        verify(&secret, &map, b"body", 1_000, DEFAULT_TOLERANCE),
        Ok(())
    );
}

#[test]
fn forged_signatures_are_rejected() {
    let secret = WebhookSecret::parse(SPEC_SECRET).unwrap();
    let other = WebhookSecret::parse("whsec_b3RoZXI=").unwrap();
    let now = SPEC_TIMESTAMP;
    // Signed with another key.
    let forged = sign(&other, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY);
    let map = headers(SPEC_ID, "1614265330", &forged);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, now, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    );
    // Body, id or timestamp changed after signing.
    let map = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    assert_eq!(
        verify(&secret, &map, br#"{"test": 1}"#, now, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    );
    let map = headers("msg_other", "1614265330", SPEC_SIGNATURE);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, now, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    );
    let map = headers(SPEC_ID, "1614265331", SPEC_SIGNATURE);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, now, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    );
    // Wrong version tag.
    let map = headers(SPEC_ID, "1614265330", &SPEC_SIGNATURE.replace("v1,", "v2,"));
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, now, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn stale_and_future_timestamps_are_rejected() {
    let secret = WebhookSecret::parse(SPEC_SECRET).unwrap();
    let map = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    let tolerance = Duration::from_secs(300);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, SPEC_TIMESTAMP + 301, tolerance),
        Err(VerifyError::Stale {
            tolerance_secs: 300
        })
    );
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, SPEC_TIMESTAMP - 301, tolerance),
        Err(VerifyError::Stale {
            tolerance_secs: 300
        })
    );
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, SPEC_TIMESTAMP + 300, tolerance),
        Ok(())
    );
}

#[test]
fn missing_or_malformed_headers_are_rejected() {
    let secret = WebhookSecret::parse(SPEC_SECRET).unwrap();
    let mut map = headers(SPEC_ID, "1614265330", SPEC_SIGNATURE);
    map.remove(HEADER_SIGNATURE);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, SPEC_TIMESTAMP, DEFAULT_TOLERANCE),
        Err(VerifyError::MissingHeader(HEADER_SIGNATURE))
    );
    let map = headers(SPEC_ID, "yesterday", SPEC_SIGNATURE);
    assert_eq!(
        verify(&secret, &map, SPEC_BODY, SPEC_TIMESTAMP, DEFAULT_TOLERANCE),
        Err(VerifyError::BadTimestamp)
    );
}
