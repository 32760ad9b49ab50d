//! Norma Server: a multi-tenant network agent server.

pub mod hooks;
pub mod ids;
pub mod message;
pub mod permission;
pub mod signing;
pub mod tools;
