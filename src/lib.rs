//! Norma Server: a multi-tenant network agent server.

pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod egress;
pub mod error;
pub mod harness;
pub mod hooks;
pub mod ids;
pub mod limits;
pub mod llm;
pub mod mcp;
pub mod message;
pub mod permission;
pub mod run_event;
pub mod runtime;
pub mod sandbox;
pub mod search;
pub mod session_config;
pub mod signing;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod workspace;
pub mod workspace_snapshot;
