//! The agent harness: everything that turns one prompt into model requests and tool calls.
//!
//! - [`scheduler`] runs one model response's tool calls (N13–N15).

pub mod scheduler;
