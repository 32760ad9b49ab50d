//! The usage ledger: its rows, written with each append, and their sums and reports.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
