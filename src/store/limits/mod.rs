//! Tenant limits on what a replica keeps open: holds and measured workspace bytes.

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
