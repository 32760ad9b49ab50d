//! [`ProviderError`]: every way a model request can fail, classified at the source, with a
//! stable UPPER_SNAKE code and a retry classification used by the retry layer (N19).

/// A failed model request or stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with a non-success HTTP status (body kept for diagnosis).
    #[error("provider returned HTTP {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Response body, as text.
        body: String,
    },
    /// The request did not get a response (connect failure, reset, header timeout).
    #[error("network error talking to the provider: {0}")]
    Network(String),
    /// The prompt does not fit the model's context window.
    #[error("prompt exceeds the model context window: {0}")]
    ContextOverflow(String),
    /// The stream broke after consumption began (never retried, N20).
    #[error("provider stream dropped: {0}")]
    StreamDropped(String),
    /// The provider sent something we could not understand.
    #[error("could not decode provider output: {0}")]
    Decode(String),
    /// The request was cancelled by the caller.
    #[error("provider request cancelled")]
    Cancelled,
    /// The stream ended without any content.
    #[error("provider returned an empty response")]
    EmptyResponse,
    /// The provider is misconfigured (unknown model, missing key, bad script, …).
    #[error("provider configuration error: {0}")]
    Config(String),
    /// One response went past a per-turn output budget (see `crate::llm::budget`): text,
    /// thinking, tool-input bytes, tool calls or stream items, or a scripted turn's expansion.
    #[error("model output too large: {0}")]
    OutputTooLarge(String),
}

impl ProviderError {
    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Status { .. } => "PROVIDER_STATUS",
            Self::Network(_) => "PROVIDER_NETWORK",
            Self::ContextOverflow(_) => "CONTEXT_OVERFLOW",
            Self::StreamDropped(_) => "STREAM_DROPPED",
            Self::Decode(_) => "PROVIDER_DECODE",
            Self::Cancelled => "CANCELLED",
            Self::EmptyResponse => "EMPTY_RESPONSE",
            Self::Config(_) => "PROVIDER_CONFIG",
            Self::OutputTooLarge(_) => "MODEL_OUTPUT_TOO_LARGE",
        }
    }

    /// Whether re-sending the same request may succeed: network errors and the statuses 408,
    /// 429, 500, 502, 503, 504 (N19). A dropped stream is not retryable (N20), nor is a cancel.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => crate::llm::retry::is_retryable_status(*status),
            Self::Network(_) => true,
            Self::ContextOverflow(_)
            | Self::StreamDropped(_)
            | Self::Decode(_)
            | Self::Cancelled
            | Self::EmptyResponse
            | Self::Config(_)
            | Self::OutputTooLarge(_) => false,
        }
    }
}
