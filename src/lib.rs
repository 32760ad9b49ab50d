//! Norma Server: a multi-tenant network agent server.

pub mod ids;
pub mod llm;
pub mod message;
pub mod permission;
pub mod tools;
