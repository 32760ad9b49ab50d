//! The attack corpus (issue "hostile tenants"): every case drives the real `norma serve` binary
//! as a hostile tenant would, asserts the specific code or limit it must meet, and then checks
//! that the server is still healthy and still serves another tenant
//! ([`support::assert_still_serves`]).
//!
//! One module per area; each case is one `#[tokio::test]`.

mod bodies;
mod command_network;
mod config;
mod egress;
#[path = "../support/fake_llm.rs"]
mod fake_llm;
mod limits;
mod pages;
mod parsers;
#[path = "../support/pg.rs"]
mod pg;
mod rule_targets;
mod sandbox;
#[path = "../support/server.rs"]
mod server;
mod support;
mod tools;
