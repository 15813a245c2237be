//! The PostgreSQL schema, as numbered migrations applied explicitly.
//!
//! Writers (`PgStore::open`, `faultline db migrate`) apply what is missing, in one
//! transaction under a transaction-scoped advisory lock, so two workers starting together
//! apply each migration once. Readers only check the version: an inspecting command never
//! creates a table.

use postgres::types::Type;

use super::client::Queries;
use super::link::classify;
use crate::{Error, Result};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 3;

/// The advisory lock key migrations hold ("faultlin" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x6661_756c_746c_696e;

/// Migration `n` is `MIGRATIONS[n - 1]`. Never edit one that shipped: add the next.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: sessions with their lease (owner, epoch, expiry) and one row per record.
    "CREATE TABLE faultline_sessions (
        id               text PRIMARY KEY,
        header           text NOT NULL,
        revision         bigint NOT NULL DEFAULT 0,
        epoch            bigint NOT NULL,
        owner            text,
        lease_expires_at timestamptz
    );
    CREATE TABLE faultline_events (
        session_id text NOT NULL REFERENCES faultline_sessions(id),
        seq        bigint NOT NULL,
        record     text NOT NULL,
        PRIMARY KEY (session_id, seq)
    );",
    // 2: the delivery queue, rows as the shared machine leaves them, and tombstones.
    "CREATE TABLE faultline_deliveries (
        seq          bigserial PRIMARY KEY,
        execution_id text NOT NULL UNIQUE,
        status       text NOT NULL,
        payload      text,
        owner        text,
        result       text,
        error        text,
        claimed      boolean NOT NULL DEFAULT false,
        resend_of    text,
        updated_at   bigint NOT NULL
    );
    CREATE INDEX faultline_deliveries_status ON faultline_deliveries (status, seq);
    CREATE TABLE faultline_tombstones (
        execution_id text PRIMARY KEY,
        status       text NOT NULL,
        pruned_at    bigint NOT NULL
    );",
    // 3: a delivery keeps the session and epoch of the writer that enqueued it (the one
    // fencing rule: once the session moves on, the row is neither claimed nor finished).
    "ALTER TABLE faultline_deliveries ADD COLUMN session_id text, ADD COLUMN session_epoch bigint;",
];

const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS faultline_schema (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Applies the missing migrations; returns the versions applied (empty when up to date).
pub(crate) fn migrate(client: &mut super::client::PgClient, target: &str) -> Result<Vec<i32>> {
    let mut tx = client.transaction().map_err(classify)?;
    tx.execute_typed("SELECT pg_advisory_xact_lock($1)", &[(&MIGRATION_LOCK_KEY, Type::INT8)]).map_err(classify)?;
    tx.batch_execute(VERSION_TABLE).map_err(classify)?;
    let current: i32 =
        tx.query_typed_one("SELECT coalesce(max(version), 0) FROM faultline_schema", &[]).map_err(classify)?.get(0);
    refuse_newer(current, target)?;
    let mut applied = Vec::new();
    for version in current + 1..=SCHEMA_VERSION {
        tx.batch_execute(MIGRATIONS[(version - 1) as usize]).map_err(classify)?;
        tx.execute_typed("INSERT INTO faultline_schema (version) VALUES ($1)", &[(&version, Type::INT4)])
            .map_err(classify)?;
        applied.push(version);
    }
    tx.commit().map_err(classify)?;
    Ok(applied)
}

/// The schema version of the database, without writing: 0 when it has no faultline schema.
pub(crate) fn version(client: &mut impl Queries) -> Result<i32> {
    let exists: bool =
        client.query_typed_one("SELECT to_regclass('faultline_schema') IS NOT NULL", &[]).map_err(classify)?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client.query_typed_one("SELECT coalesce(max(version), 0) FROM faultline_schema", &[]).map_err(classify)?.get(0))
}

/// Refuses a database this build cannot read: no schema, an older one (a writer migrates
/// it), or a newer one.
pub(crate) fn check_readable(client: &mut impl Queries, target: &str) -> Result<()> {
    let current = version(client)?;
    refuse_newer(current, target)?;
    if current == 0 {
        return Err(Error::NotFaultlineDatabase {
            path: target.to_owned(),
            reason: "it has no faultline schema; `faultline db migrate` creates it".into(),
        });
    }
    if current < SCHEMA_VERSION {
        return Err(Error::NotFaultlineDatabase {
            path: target.to_owned(),
            reason: format!(
                "its faultline schema is version {current}, this build reads {SCHEMA_VERSION}; `faultline db migrate` upgrades it"
            ),
        });
    }
    Ok(())
}

fn refuse_newer(current: i32, target: &str) -> Result<()> {
    if current > SCHEMA_VERSION {
        return Err(Error::NotFaultlineDatabase {
            path: target.to_owned(),
            reason: format!(
                "its faultline schema is version {current}, newer than this build's {SCHEMA_VERSION}; upgrade faultline"
            ),
        });
    }
    Ok(())
}
