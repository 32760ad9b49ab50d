//! Browser access: CORS for the origins the operator lists (`[browser]`), and the settings of
//! stream tickets ([`crate::api::stream_tickets`]).
//!
//! No origin is allowed by default. In development mode (no verification key configured)
//! every loopback origin (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`) is
//! allowed too. Preflights are answered by the layer, before routing; a refused origin gets an
//! answer without `Access-Control-Allow-Origin`, which the browser treats as a refusal.
//! Bearer tokens are not ambient credentials, so no cookie or credential mode is enabled.

use axum::http::{HeaderName, HeaderValue, Method, header, request::Parts};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The longest stream-ticket lifetime an operator may configure.
pub const MAX_TICKET_TTL_SECONDS: u64 = 3600;

/// `[browser]`: what browsers on other origins may do.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrowserSettings {
    /// Origins allowed to call the API from a browser, exactly as browsers send them
    /// (`https://app.example.com`, `http://localhost:3000`): scheme, host and optional port,
    /// no path. None by default.
    pub allowed_origins: Vec<String>,
    /// How long a stream ticket (`POST /v1/sessions/{id}/stream-tickets`) stays valid,
    /// 10..=3600 seconds.
    pub stream_ticket_ttl_seconds: u64,
    /// The HMAC key of stream tickets (at least 32 bytes). Replicas sharing one key accept
    /// each other's tickets; without one, each process draws a random key at start-up and
    /// accepts only its own tickets.
    #[serde(skip_serializing)]
    pub stream_ticket_secret: Option<SecretString>,
}

impl Default for BrowserSettings {
    fn default() -> Self {
        Self {
            allowed_origins: Vec::new(),
            stream_ticket_ttl_seconds: 300,
            stream_ticket_secret: None,
        }
    }
}

impl BrowserSettings {
    /// Checks the origins' form and the ticket settings' ranges.
    pub fn validate(&self) -> Result<(), String> {
        for origin in &self.allowed_origins {
            parse_origin(origin).map_err(|why| {
                format!("browser.allowed_origins: `{origin}` is not an origin ({why})")
            })?;
        }
        if !(10..=MAX_TICKET_TTL_SECONDS).contains(&self.stream_ticket_ttl_seconds) {
            return Err(format!(
                "browser.stream_ticket_ttl_seconds must be between 10 and {MAX_TICKET_TTL_SECONDS}"
            ));
        }
        if let Some(secret) = &self.stream_ticket_secret {
            use secrecy::ExposeSecret;
            if secret.expose_secret().len() < 32 {
                return Err("browser.stream_ticket_secret must be at least 32 bytes".into());
            }
        }
        Ok(())
    }
}

/// The canonical form of an origin (`scheme://host[:port]`, lower case, default port left
/// out), or why `text` is not one.
fn parse_origin(text: &str) -> Result<String, &'static str> {
    let url = url::Url::parse(text).map_err(|_| "not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme must be http or https");
    }
    if url.host_str().is_none() {
        return Err("no host");
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("an origin has no path, query or fragment");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an origin has no user info");
    }
    Ok(url.origin().ascii_serialization())
}

/// Whether `origin` is a loopback origin (`http(s)://localhost|127.x|[::1][:port]`).
fn is_loopback_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    if !matches!(url.scheme(), "http" | "https") {
        return false;
    }
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Request headers a browser may send across origins.
const ALLOWED_HEADERS: [HeaderName; 5] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    HeaderName::from_static("idempotency-key"),
    HeaderName::from_static("last-event-id"),
    HeaderName::from_static("x-request-id"),
];

/// Response headers a page on another origin may read.
const EXPOSED_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-request-id"),
    HeaderName::from_static(crate::api::idempotency::REPLAYED_HEADER),
    header::RETRY_AFTER,
];

/// The CORS layer of the router: the configured origins, plus loopback origins when
/// `development` is true.
pub fn layer(settings: &BrowserSettings, development: bool) -> CorsLayer {
    let allowed: Vec<String> = settings
        .allowed_origins
        .iter()
        .filter_map(|origin| parse_origin(origin).ok())
        .collect();
    let allow = AllowOrigin::predicate(move |origin: &HeaderValue, _: &Parts| {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        // What browsers send is already canonical; compare without case for the host.
        allowed.iter().any(|o| o.eq_ignore_ascii_case(origin))
            || (development && is_loopback_origin(origin))
    });
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers(ALLOWED_HEADERS)
        .expose_headers(EXPOSED_HEADERS)
        .max_age(Duration::from_secs(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_and_canonical() {
        assert_eq!(
            parse_origin("https://App.Example.com").unwrap(),
            "https://app.example.com"
        );
        assert_eq!(
            parse_origin("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(
            parse_origin("https://a.example:443").unwrap(),
            "https://a.example"
        );
        for bad in [
            "*",
            "app.example.com",
            "ftp://a.example",
            "https://a.example/path",
            "https://user@a.example",
            "https://a.example/?q",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_origins() {
        for origin in [
            "http://localhost:5173",
            "http://127.0.0.1:18300",
            "http://[::1]:80",
            "https://LOCALHOST",
        ] {
            assert!(is_loopback_origin(origin), "{origin}");
        }
        for origin in [
            "http://localhost.evil.example",
            "http://10.0.0.1",
            "null",
            "file://",
        ] {
            assert!(!is_loopback_origin(origin), "{origin}");
        }
    }

    #[test]
    fn settings_ranges() {
        let mut settings = BrowserSettings::default();
        settings.validate().unwrap();
        settings.stream_ticket_ttl_seconds = 5;
        assert!(settings.validate().is_err());
        settings.stream_ticket_ttl_seconds = 60;
        settings.stream_ticket_secret = Some(SecretString::from("short"));
        assert!(settings.validate().is_err());
        settings.stream_ticket_secret = None;
        settings.allowed_origins = vec!["https://a.example/x".into()];
        assert!(settings.validate().is_err());
    }
}
