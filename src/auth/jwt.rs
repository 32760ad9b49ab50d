//! JWT verification with a pinned algorithm list (HS256 shared secret; RS256 / ES256 public
//! keys from PEM files or a JWKS file, rotated by `kid`), and HS256 minting for `norma token`.
//!
//! `jsonwebtoken` checks neither `nbf` nor an absent `aud`/`iss` unless told to: we tell it.

use super::Principal;
use crate::config::AuthSettings;
use crate::error::{ApiError, ErrorCode};
use crate::ids::TenantId;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why a token was refused. Each maps to a stable code; all answer 401.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
    #[error("token audience is not accepted")]
    InvalidAudience,
    #[error("token issuer is not accepted")]
    InvalidIssuer,
    #[error("token has no usable tenant claim")]
    MissingTenant,
    #[error("token signed with an unknown key")]
    UnknownKey,
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        let code = match &error {
            AuthError::Invalid(_) => ErrorCode::Unauthenticated,
            AuthError::Expired => ErrorCode::TokenExpired,
            AuthError::NotYetValid => ErrorCode::TokenNotYetValid,
            AuthError::InvalidAudience => ErrorCode::TokenInvalidAudience,
            AuthError::InvalidIssuer => ErrorCode::TokenInvalidIssuer,
            AuthError::MissingTenant => ErrorCode::TokenMissingTenant,
            AuthError::UnknownKey => ErrorCode::TokenUnknownKey,
        };
        ApiError::new(code, error.to_string())
    }
}

/// Errors setting up verification (bad key files, …).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid key {what}: {reason}")]
    Invalid { what: String, reason: String },
}

struct PublicKey {
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Verifies bearer tokens.
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    tenant_claim: String,
    leeway: u64,
    hs256: Option<(DecodingKey, EncodingKey)>,
    pem_keys: HashMap<String, PublicKey>,
    jwks_file: Option<PathBuf>,
    jwks_keys: RwLock<HashMap<String, PublicKey>>,
    jwks_loaded_at: RwLock<Option<Instant>>,
    jwks_reload_interval: Duration,
    /// This verifier's own id among the process's (see [`super::verified`]).
    id: u64,
    /// Advanced by every JWKS reload: tokens checked against older keys are checked again.
    key_generation: AtomicU64,
}

/// Ids of verifiers (several live in one test process, each with its own keys).
static VERIFIER_IDS: AtomicU64 = AtomicU64::new(0);

/// The shortest HS256 secret accepted, in bytes (the hash's output size, RFC 7518 §3.2).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Refuses an HS256 secret shorter than [`MIN_HS256_SECRET_BYTES`] (an empty one included).
/// The message gives the length, never the secret.
fn long_enough(secret: SecretString, what: &str) -> Result<SecretString, KeyError> {
    let len = secret.expose_secret().len();
    if len < MIN_HS256_SECRET_BYTES {
        return Err(KeyError::Invalid {
            what: what.to_owned(),
            reason: format!(
                "an HS256 secret must be at least {MIN_HS256_SECRET_BYTES} bytes, this one has \
                 {len}{}; generate one with `openssl rand -base64 48`",
                if len == 0 { " (empty)" } else { "" }
            ),
        });
    }
    Ok(secret)
}

/// The file in the data dir holding the development signing key.
pub const DEV_KEY_FILE: &str = "dev-signing-key";

impl JwtVerifier {
    /// Builds a verifier from settings. In development mode (no key configured) the HS256 key
    /// is read from, or generated into, `<data_dir>/dev-signing-key`.
    pub fn from_settings(settings: &AuthSettings, data_dir: &Path) -> Result<Self, KeyError> {
        let secret = match (&settings.hs256_secret, &settings.hs256_secret_file) {
            (Some(secret), _) => Some(long_enough(secret.clone(), "auth.hs256_secret")?),
            (None, Some(path)) => Some(long_enough(
                SecretString::from(read(path)?.trim().to_owned()),
                &format!("auth.hs256_secret_file ({})", path.display()),
            )?),
            (None, None) if settings.is_development() => Some(long_enough(
                dev_secret(data_dir)?,
                &format!("{}", data_dir.join(DEV_KEY_FILE).display()),
            )?),
            (None, None) => None,
        };
        let mut pem_keys = HashMap::new();
        for key in &settings.public_keys {
            let pem = read(&key.pem_file)?;
            let (algorithm, decoding) = match key.algorithm.as_str() {
                "RS256" => (Algorithm::RS256, DecodingKey::from_rsa_pem(pem.as_bytes())),
                "ES256" => (Algorithm::ES256, DecodingKey::from_ec_pem(pem.as_bytes())),
                other => {
                    return Err(KeyError::Invalid {
                        what: key.kid.clone(),
                        reason: format!("algorithm {other} is not one of RS256, ES256"),
                    });
                }
            };
            let decoding = decoding.map_err(|error| KeyError::Invalid {
                what: key.kid.clone(),
                reason: error.to_string(),
            })?;
            pem_keys.insert(
                key.kid.clone(),
                PublicKey {
                    algorithm,
                    key: decoding,
                },
            );
        }
        let verifier = Self {
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            tenant_claim: settings.tenant_claim.clone(),
            leeway: settings.leeway_seconds,
            hs256: secret.map(|secret| {
                let bytes = secret.expose_secret().as_bytes();
                (
                    DecodingKey::from_secret(bytes),
                    EncodingKey::from_secret(bytes),
                )
            }),
            pem_keys,
            jwks_file: settings.jwks_file.clone(),
            jwks_keys: RwLock::new(HashMap::new()),
            jwks_loaded_at: RwLock::new(None),
            jwks_reload_interval: Duration::from_secs(settings.jwks_min_reload_seconds),
            id: VERIFIER_IDS.fetch_add(1, Ordering::Relaxed),
            key_generation: AtomicU64::new(0),
        };
        if verifier.jwks_file.is_some() {
            verifier.reload_jwks()?;
        }
        Ok(verifier)
    }

    /// Verifies a token and returns who it speaks for. A token this thread verified before
    /// is accepted again while its `exp`/`nbf` hold and the keys are the same (see
    /// [`super::verified`]).
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let now = chrono::Utc::now().timestamp();
        let leeway = i64::try_from(self.leeway).unwrap_or(i64::MAX);
        let generation = self.key_generation.load(Ordering::Acquire);
        if let Some(principal) = super::verified::lookup(token, self.id, generation, now, leeway) {
            return Ok(principal);
        }
        let claims = self.verified_claims(token)?;
        let principal = self.principal(&claims)?;
        // Remembered only with integer times (what the full check compares); any other
        // shape is checked in full every time.
        let expires = claims.get("exp").and_then(Value::as_i64);
        let not_before = match claims.get("nbf") {
            None => Some(None),
            Some(nbf) => nbf.as_i64().map(Some),
        };
        if let (Some(expires), Some(not_before)) = (expires, not_before) {
            let verified = super::verified::Verified {
                principal: principal.clone(),
                expires,
                not_before,
            };
            super::verified::remember(token, self.id, generation, verified);
        }
        Ok(principal)
    }

    /// The claims of a token whose signature, algorithm, `exp`, `nbf`, `iss` and `aud` hold.
    fn verified_claims(&self, token: &str) -> Result<Map<String, Value>, AuthError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|error| AuthError::Invalid(format!("malformed token: {error}")))?;
        let claims = match header.alg {
            Algorithm::HS256 => {
                let (key, _) = self
                    .hs256
                    .as_ref()
                    .ok_or_else(|| AuthError::Invalid("algorithm HS256 is not accepted".into()))?;
                self.decode(token, Algorithm::HS256, key)?
            }
            Algorithm::RS256 | Algorithm::ES256 => {
                self.decode_with_public_key(token, header.alg, header.kid.as_deref())?
            }
            other => {
                return Err(AuthError::Invalid(format!(
                    "algorithm {other:?} is not accepted"
                )));
            }
        };
        Ok(claims)
    }

    fn decode_with_public_key(
        &self,
        token: &str,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<Map<String, Value>, AuthError> {
        let kid = kid.ok_or_else(|| AuthError::Invalid("token has no `kid` header".into()))?;
        if let Some(found) = self.pem_keys.get(kid) {
            return self.decode_public(token, alg, found);
        }
        if self.jwks_file.is_none() {
            return Err(AuthError::UnknownKey);
        }
        if let Some(claims) = self.try_jwks(token, alg, kid) {
            return claims;
        }
        // Rotation: an unknown kid re-reads the JWKS file, at most every few seconds.
        let due = self
            .jwks_loaded_at
            .read()
            .map(|at| at.is_none_or(|at| at.elapsed() >= self.jwks_reload_interval))
            .unwrap_or(true);
        if due && let Err(error) = self.reload_jwks() {
            tracing::warn!(%error, "cannot reload JWKS file");
        }
        self.try_jwks(token, alg, kid)
            .unwrap_or(Err(AuthError::UnknownKey))
    }

    fn try_jwks(
        &self,
        token: &str,
        alg: Algorithm,
        kid: &str,
    ) -> Option<Result<Map<String, Value>, AuthError>> {
        let keys = self.jwks_keys.read().ok()?;
        keys.get(kid).map(|key| self.decode_public(token, alg, key))
    }

    fn decode_public(
        &self,
        token: &str,
        alg: Algorithm,
        key: &PublicKey,
    ) -> Result<Map<String, Value>, AuthError> {
        if key.algorithm != alg {
            return Err(AuthError::Invalid(format!(
                "key is for {:?}, token says {alg:?}",
                key.algorithm
            )));
        }
        self.decode(token, alg, &key.key)
    }

    fn reload_jwks(&self) -> Result<(), KeyError> {
        let Some(path) = &self.jwks_file else {
            return Ok(());
        };
        let text = read(path)?;
        let set: JwkSet = serde_json::from_str(&text).map_err(|error| KeyError::Invalid {
            what: path.display().to_string(),
            reason: error.to_string(),
        })?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Some(alg)) = (&jwk.common.key_id, jwk.common.key_algorithm) else {
                continue;
            };
            let algorithm = match alg {
                jsonwebtoken::jwk::KeyAlgorithm::RS256 => Algorithm::RS256,
                jsonwebtoken::jwk::KeyAlgorithm::ES256 => Algorithm::ES256,
                _ => continue,
            };
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.insert(kid.clone(), PublicKey { algorithm, key });
            }
        }
        if let Ok(mut slot) = self.jwks_keys.write() {
            *slot = keys;
        }
        if let Ok(mut at) = self.jwks_loaded_at.write() {
            *at = Some(Instant::now());
        }
        self.key_generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn decode(
        &self,
        token: &str,
        alg: Algorithm,
        key: &DecodingKey,
    ) -> Result<Map<String, Value>, AuthError> {
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.leeway = self.leeway;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation).map_err(
            |error| match error.kind() {
                ErrorKind::ExpiredSignature => AuthError::Expired,
                ErrorKind::ImmatureSignature => AuthError::NotYetValid,
                ErrorKind::InvalidAudience => AuthError::InvalidAudience,
                ErrorKind::InvalidIssuer => AuthError::InvalidIssuer,
                ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => {
                    AuthError::InvalidAudience
                }
                ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => {
                    AuthError::InvalidIssuer
                }
                _ => AuthError::Invalid(error.to_string()),
            },
        )?;
        Ok(data.claims)
    }

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, AuthError> {
        let tenant = claims
            .get(&self.tenant_claim)
            .and_then(Value::as_str)
            .filter(|tenant| TenantId::is_well_formed(tenant))
            .ok_or(AuthError::MissingTenant)?;
        let scopes = match (claims.get("scope"), claims.get("scopes")) {
            (Some(Value::String(scope)), _) => {
                scope.split_whitespace().map(str::to_owned).collect()
            }
            (_, Some(Value::Array(list))) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Principal {
            tenant: TenantId::new(tenant),
            subject: claims
                .get("sub")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            scopes,
        })
    }

    /// Signs an HS256 token (for `norma token`, development and tests).
    pub fn mint(&self, request: &TokenRequest) -> Result<String, KeyError> {
        let (_, key) = self.hs256.as_ref().ok_or_else(|| KeyError::Invalid {
            what: "hs256".into(),
            reason: "minting needs an HS256 secret (or development mode)".into(),
        })?;
        let now = chrono::Utc::now().timestamp();
        let claims = json!({
            "iss": self.issuer,
            "aud": self.audience,
            "sub": request.subject,
            self.tenant_claim.as_str(): request.tenant,
            "scope": request.scopes.join(" "),
            "iat": now,
            "nbf": now,
            "exp": now + request.ttl.as_secs() as i64,
        });
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, key).map_err(|error| {
            KeyError::Invalid {
                what: "token".into(),
                reason: error.to_string(),
            }
        })
    }
}

/// What `JwtVerifier::mint` signs.
#[derive(Clone, Debug)]
pub struct TokenRequest {
    pub tenant: String,
    pub subject: String,
    pub scopes: Vec<String>,
    pub ttl: Duration,
}

fn read(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads the development key, generating it (mode 0600) on first start.
fn dev_secret(data_dir: &Path) -> Result<SecretString, KeyError> {
    let path = data_dir.join(DEV_KEY_FILE);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        return Ok(SecretString::from(existing.trim().to_owned()));
    }
    let io = |source| KeyError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let secret = STANDARD.encode(rand::random::<[u8; 32]>());
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    file.write_all(secret.as_bytes()).map_err(io)?;
    Ok(SecretString::from(secret))
}

#[cfg(test)]
mod secret_length_tests {
    use super::*;

    fn with_secret(secret: Option<&str>, file: Option<PathBuf>) -> Result<JwtVerifier, KeyError> {
        let settings = AuthSettings {
            hs256_secret: secret.map(|s| SecretString::from(s.to_owned())),
            hs256_secret_file: file,
            ..AuthSettings::default()
        };
        JwtVerifier::from_settings(&settings, Path::new("/nonexistent"))
    }

    #[test]
    fn hs256_secrets_shorter_than_32_bytes_are_refused_without_echoing_them() {
        let error = with_secret(Some("hunter2"), None).err().expect("refused");
        let message = error.to_string();
        assert!(
            message.contains("auth.hs256_secret") && message.contains("32"),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
        assert!(with_secret(Some(&"s".repeat(31)), None).is_err());
        assert!(with_secret(Some(&"s".repeat(32)), None).is_ok());
    }

    #[test]
    fn secret_files_are_trimmed_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "").unwrap();
        let message = with_secret(None, Some(file.clone()))
            .err()
            .expect("empty file refused")
            .to_string();
        assert!(message.contains("empty"), "{message}");
        // 31 bytes and a newline (as `echo` writes): the newline is not part of the key.
        std::fs::write(&file, format!("{}\n", "s".repeat(31))).unwrap();
        assert!(with_secret(None, Some(file.clone())).is_err());
        std::fs::write(&file, format!("{}\n", "s".repeat(32))).unwrap();
        assert!(with_secret(None, Some(file)).is_ok());
    }
}

#[cfg(test)]
mod remembered_token_tests {
    use super::super::verified::{self, MAX_TOKEN_BYTES, MAX_TOKENS};
    use super::*;

    fn verifier(secret: &str) -> JwtVerifier {
        let settings = AuthSettings {
            hs256_secret: Some(SecretString::from(secret.to_owned())),
            ..AuthSettings::default()
        };
        JwtVerifier::from_settings(&settings, Path::new("/nonexistent")).expect("verifier")
    }

    fn token(verifier: &JwtVerifier, tenant: &str, ttl: u64) -> String {
        verifier
            .mint(&TokenRequest {
                tenant: tenant.into(),
                subject: "someone".into(),
                scopes: vec!["sessions:read".into()],
                ttl: Duration::from_secs(ttl),
            })
            .expect("mint")
    }

    #[test]
    fn a_verified_token_is_remembered_only_for_its_verifier_keys_and_lifetime() {
        let ours = verifier(&"a".repeat(32));
        let theirs = verifier(&"b".repeat(32));
        let token = token(&ours, "acme", 60);
        let principal = ours.verify(&token).expect("verified");
        assert_eq!(principal.tenant.as_str(), "acme");
        assert_eq!(verified::remembered(), 1);
        assert_eq!(ours.verify(&token).expect("again"), principal);
        // Another verifier (other keys) never accepts what this one remembered.
        assert!(theirs.verify(&token).is_err());
        let now = chrono::Utc::now().timestamp();
        let generation = ours.key_generation.load(Ordering::Acquire);
        let leeway = ours.leeway as i64;
        assert!(verified::lookup(&token, ours.id, generation, now, leeway).is_some());
        assert!(
            verified::lookup(&token, ours.id, generation, now, i64::MAX).is_some(),
            "a huge leeway saturates instead of overflowing"
        );
        // Past its `exp` (with the leeway), or after the keys changed, it is checked again.
        assert!(verified::lookup(&token, ours.id, generation, now + 61 + leeway, leeway).is_none());
        assert!(verified::lookup(&token, ours.id, generation + 1, now, leeway).is_none());
        assert!(verified::lookup(&token, theirs.id, generation, now, leeway).is_none());
        // A token that was never verified is not there, whatever it claims.
        let forged = format!("{}x", &token[..token.len() - 1]);
        assert!(verified::lookup(&forged, ours.id, generation, now, leeway).is_none());
        assert!(ours.verify(&forged).is_err());
    }

    #[test]
    fn an_expired_token_gets_token_expired_even_after_it_was_remembered() {
        let ours = verifier(&"a".repeat(32));
        let expired = {
            let (_, key) = ours.hs256.as_ref().expect("hs256");
            let now = chrono::Utc::now().timestamp();
            let claims = json!({"iss": ours.issuer, "aud": ours.audience, "sub": "s",
                ours.tenant_claim.as_str(): "acme", "exp": now - 3600});
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, key).expect("encode")
        };
        assert_eq!(ours.verify(&expired), Err(AuthError::Expired));
        assert_eq!(
            verified::remembered(),
            0,
            "a refused token is never remembered"
        );
    }

    #[test]
    fn a_jwks_reload_advances_the_key_generation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let jwks = dir.path().join("jwks.json");
        std::fs::write(&jwks, r#"{"keys": []}"#).expect("jwks");
        let settings = AuthSettings {
            hs256_secret: Some(SecretString::from("a".repeat(32))),
            jwks_file: Some(jwks),
            ..AuthSettings::default()
        };
        let verifier = JwtVerifier::from_settings(&settings, dir.path()).expect("verifier");
        let before = verifier.key_generation.load(Ordering::Acquire);
        verifier.reload_jwks().expect("reload");
        assert!(verifier.key_generation.load(Ordering::Acquire) > before);
    }

    #[test]
    fn the_cache_stays_bounded_and_skips_long_tokens() {
        let ours = verifier(&"a".repeat(32));
        for n in 0..MAX_TOKENS + 10 {
            ours.verify(&token(&ours, &format!("tenant{n}"), 60))
                .expect("verified");
            assert!(verified::remembered() <= MAX_TOKENS);
        }
        let before = verified::remembered();
        let long = ours
            .mint(&TokenRequest {
                tenant: "acme".into(),
                subject: "s".repeat(MAX_TOKEN_BYTES),
                scopes: Vec::new(),
                ttl: Duration::from_secs(60),
            })
            .expect("mint");
        assert!(long.len() > MAX_TOKEN_BYTES);
        ours.verify(&long).expect("a long token still verifies");
        assert_eq!(verified::remembered(), before);
    }
}
