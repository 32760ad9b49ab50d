//! Black-box tests of the HTTP API: the real application on a random port, against SQLite and
//! Postgres (a fresh database per test). One test binary, so it links once.

mod ag_ui;
mod approvals;
mod auth;
mod browser;
mod browser_chromium;
mod budgets;
mod config;
mod console;
mod demo;
mod errors;
mod health;
mod helpers;
mod hooks;
mod idempotency;
mod limits;
mod mcp;
mod mcp_changes;
mod mcp_registry;
mod mcp_requests;
mod mcp_resume;
mod noa;
mod openapi;
mod outbound_webhooks;
mod pg_outage;
#[path = "../support/proxy.rs"]
mod proxy;
mod replicas;
mod resume;
mod runs;
mod sessions;
mod shutdown;
mod skills;
mod sse;
mod store;
mod store_faults;
mod store_fork;
mod store_groups;
mod store_limits;
mod store_permissions;
mod store_pg_conns;
mod store_pg_plans;
mod store_pg_signals;
mod store_runs;
mod subagents;
mod subagents_hooks;
mod subagents_nested;
mod subagents_usage;
mod tenant_providers;
mod usage;
mod web_fetch;
mod web_fetch_pdf;
mod web_search;
#[path = "../support/webhook_receiver.rs"]
mod webhook_receiver;
mod webhooks;
