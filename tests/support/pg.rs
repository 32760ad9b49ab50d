//! Per-test Postgres databases, shared by the test binaries (`#[path]`-included).
//!
//! Postgres tests use `postgres://postgres@127.0.0.1:5432/postgres` (override with
//! `NORMA_TEST_PG_URL`). When it is unreachable they skip loudly, except in CI (`CI=true`),
//! where they fail.
#![allow(dead_code)]

/// The admin URL of the local Postgres used to create per-test databases.
pub fn pg_admin_url() -> String {
    std::env::var("NORMA_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty Postgres database for one test, or `None` (with a loud message) when
/// Postgres is unreachable outside CI. In CI (`CI=true`) an unreachable Postgres fails the test.
pub async fn fresh_pg_database() -> Option<String> {
    use sqlx::Connection;
    let admin = pg_admin_url();
    let mut conn = match sqlx::PgConnection::connect(&admin).await {
        Ok(conn) => conn,
        Err(error) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("Postgres is required in CI but unreachable at {admin}: {error}");
            }
            eprintln!(
                "\n!!!!!!!! SKIPPING POSTGRES TEST: Postgres unreachable at {admin}: {error} !!!!!!!!\n"
            );
            return None;
        }
    };
    let name = format!("norma_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(base, _)| base);
    Some(format!("{base}/{name}"))
}
