//! Outbound webhooks: subscriptions and the outbox of deliveries.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
