//! [`ProviderConfig`]: which provider to talk to and how (base URL, model, key, retry, rate
//! limit, timeout, script). The API key is a [`SecretString`]: redacted in `Debug`, never
//! serialized, never logged.

use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default re-sends per logical request (N19).
pub const DEFAULT_RETRIES: i32 = 3;
/// Default output token limit when the config does not name one.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Default time to wait for response headers of one attempt.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Anthropic's public endpoint.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// OpenAI's public endpoint (Chat Completions lives at `{base}/chat/completions`).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// The wire format of a provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama, …).
    #[serde(rename = "openai")]
    OpenAi,
    /// The deterministic offline provider playing a JSON script.
    #[default]
    Scripted,
}

impl ProviderKind {
    /// The configured name (as in `provider.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::Scripted => "scripted",
        }
    }
}

/// How to reach one model provider.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Wire format.
    pub kind: ProviderKind,
    /// Endpoint root; the kind's public endpoint when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Model name sent on the wire (required for HTTP providers).
    #[serde(default)]
    pub model: String,
    /// API key; never serialized, redacted in `Debug`.
    #[serde(default, skip_serializing)]
    pub api_key: Option<SecretString>,
    /// Default output token limit.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Re-sends per logical request; negative disables retry.
    #[serde(default = "default_retries")]
    pub retries: i32,
    /// Re-send once when a stream ends with no content at all (N20: off by default).
    #[serde(default)]
    pub empty_response_retry: bool,
    /// Per-provider rate limit, in logical requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u32>,
    /// Time to wait for the response headers of one attempt, in seconds in config files.
    #[serde(default = "default_request_timeout", with = "duration_secs")]
    pub request_timeout: Duration,
    /// Script of the scripted provider (see [`crate::llm::scripted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<Value>,
}

impl ProviderConfig {
    /// A config of `kind` with every other field at its default.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            base_url: None,
            model: String::new(),
            api_key: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            retries: DEFAULT_RETRIES,
            empty_response_retry: false,
            requests_per_second: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            script: None,
        }
    }

    /// The configured base URL, or the kind's public endpoint, without a trailing `/`.
    pub fn effective_base_url(&self) -> String {
        let base = match (&self.base_url, self.kind) {
            (Some(url), _) => url.as_str(),
            (None, ProviderKind::Anthropic) => ANTHROPIC_BASE_URL,
            (None, ProviderKind::OpenAi) => OPENAI_BASE_URL,
            (None, ProviderKind::Scripted) => "",
        };
        base.trim_end_matches('/').to_owned()
    }
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self::new(ProviderKind::Scripted)
    }
}

fn default_max_tokens() -> u32 {
    DEFAULT_MAX_TOKENS
}

fn default_retries() -> i32 {
    DEFAULT_RETRIES
}

fn default_request_timeout() -> Duration {
    DEFAULT_REQUEST_TIMEOUT
}

/// (De)serializes a [`Duration`] as a number of seconds (fractions allowed).
mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(secs).map_err(D::Error::custom)
    }
}
