//! Norma Server: a multi-tenant network agent server.

pub mod ids;
pub mod message;
pub mod permission;
pub mod sandbox;
pub mod tools;
pub mod workspace;
