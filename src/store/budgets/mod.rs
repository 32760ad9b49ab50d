//! Tenant budgets and the running spend totals written with the usage ledger.

pub(in crate::store) mod cache;
pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
