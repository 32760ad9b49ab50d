//! The agent harness: everything that turns one prompt into model requests and tool calls.
//!
//! - [`scheduler`] runs one model response's tool calls (N13–N15).
//! - [`turn`] names every continue and terminal reason and decides, purely, what happens after
//!   a model response (N16–N17).
//! - [`context`] builds the provider-visible request view (N21, N22).
//! - [`ledger`] records model and tool actions per run and computes usage from them (N18).

pub mod context;
pub mod engine;
pub mod ledger;
pub mod scheduler;
pub mod turn;
