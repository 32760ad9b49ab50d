//! The store's own error type, classified once at the source: transient (the database cannot
//! serve this now; retried) or permanent. It knows nothing of HTTP; the API maps it.

use std::time::Duration;

/// Errors of the store layer, classified once, at the source (see [`StoreError::is_transient`]).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Transient: the database cannot serve this right now, and the same request can succeed
    /// later (connection refused or reset, pool timeout or closed, I/O, SQLSTATE class 08,
    /// 57P01/57P02/57P03, 40001, 40P01, 53300, SQLite BUSY/LOCKED). Accepted work never ends
    /// on it: it is retried or given back to the queue.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("not found")]
    NotFound,
    /// A uniqueness or state conflict.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Permanent: retrying the same request cannot succeed.
    #[error("store error: {0}")]
    Internal(String),
    /// A run's write was refused: another claim of the run holds its lease now.
    #[error("the run's lease was lost to another claim")]
    LeaseLost,
    /// A tenant limit checked inside the write was reached; nothing was written.
    #[error(transparent)]
    TenantLimit(#[from] crate::limits::LimitExceeded),
    /// The `Idempotency-Key` was recorded by a concurrent request that committed first;
    /// nothing was written (read the key to answer with that request's outcome).
    #[error("the idempotency key was used by a concurrent request")]
    IdempotencyKeyTaken,
}

impl StoreError {
    /// Whether the same request can succeed once the store answers again.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Whether a Postgres SQLSTATE names a transient condition: connection exceptions (class
/// 08), admin/crash shutdown and "cannot connect now" (57P01, 57P02, 57P03), serialization
/// failure (40001), deadlock (40P01) and too many connections (53300).
pub fn transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "53300"
        )
}

/// Whether a SQLite result code (primary or extended) is BUSY (5) or LOCKED (6).
pub fn transient_sqlite_code(code: &str) -> bool {
    code.parse::<i64>()
        .is_ok_and(|code| matches!(code & 0xff, 5 | 6))
}

/// How long work that was already accepted retries a transient store error before it gives
/// up (a run is then given back, see the runtime).
pub const TRANSIENT_RETRY_WINDOW: Duration = Duration::from_secs(15);

/// Runs `op` again while it fails transiently, with backoff (50 ms doubling up to 2 s), for at
/// most `window`; a success, a permanent error or the last transient error is returned.
pub async fn retry_transient<T, F, Fut>(window: Duration, mut op: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let deadline = tokio::time::Instant::now() + window;
    let mut pause = Duration::from_millis(50);
    loop {
        match op().await {
            Err(error)
                if error.is_transient() && tokio::time::Instant::now() + pause < deadline =>
            {
                tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "transient store error; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            outcome => return outcome,
        }
    }
}

/// A `rusqlite` error (the SQLite group writer's synchronous path) as the store's, classified
/// like sqlx's SQLite errors: BUSY / LOCKED and a full disk are transient (`Unavailable`), a
/// unique or primary-key violation a `Conflict`, anything else `Internal`.
impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match &error {
            rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked | ErrorCode::DiskFull => {
                    Self::Unavailable(error.to_string())
                }
                ErrorCode::ConstraintViolation
                    if matches!(
                        failure.extended_code,
                        rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                            | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                    ) =>
                {
                    Self::Conflict(error.to_string())
                }
                _ => Self::Internal(error.to_string()),
            },
            rusqlite::Error::QueryReturnedNoRows => Self::NotFound,
            _ => Self::Internal(error.to_string()),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::RowNotFound => Self::NotFound,
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => Self::Unavailable(error.to_string()),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Self::Conflict(db.message().to_owned())
            }
            // A full disk (SQLite `SQLITE_FULL`, Postgres `disk_full`): nothing was written, and
            // writes work again once space returns, so it is an outage, not an internal error.
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|code| code == "13" || code == "53100") =>
            {
                Self::Unavailable(db.message().to_owned())
            }
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                let transient = if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    transient_sqlite_code(&code)
                } else {
                    transient_sqlstate(&code)
                };
                if transient {
                    Self::Unavailable(db.message().to_owned())
                } else {
                    Self::Internal(error.to_string())
                }
            }
            _ => Self::Internal(error.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        Self::Internal(format!("migration failed: {error}"))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod classification_tests {
    use super::*;

    #[test]
    fn postgres_transient_sqlstates_are_transient_and_others_are_not() {
        for code in [
            "08000", "08006", "08P01", "57P01", "57P02", "57P03", "40001", "40P01", "53300",
        ] {
            assert!(transient_sqlstate(code), "{code}");
        }
        for code in [
            "23505", "23503", "42P01", "22P02", "57014", "53100", "XX000", "",
        ] {
            assert!(!transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn sqlite_busy_and_locked_are_transient_with_extended_codes() {
        for code in ["5", "6", "261", "517", "773", "262"] {
            assert!(transient_sqlite_code(code), "{code}");
        }
        for code in ["1", "19", "2067", "11", "x", ""] {
            assert!(!transient_sqlite_code(code), "{code}");
        }
    }

    #[test]
    fn io_and_pool_errors_are_transient_row_not_found_is_not() {
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_transient());
        assert!(StoreError::from(sqlx::Error::PoolClosed).is_transient());
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(StoreError::from(sqlx::Error::Io(reset)).is_transient());
        assert!(!StoreError::from(sqlx::Error::RowNotFound).is_transient());
        assert!(!StoreError::Internal("x".into()).is_transient());
    }
}
