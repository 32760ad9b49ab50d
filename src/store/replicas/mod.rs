//! Replicas sharing the store: the registry of live replicas and the signals they send each
//! other.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
