//! Norma Server: a multi-tenant network agent server.

pub mod harness;
pub mod ids;
pub mod message;
pub mod permission;
pub mod tools;
