//! PostgreSQL: sessions shared by a fleet of workers, one writer per session at a time,
//! fenced by epoch (FAILURE-LEASE-EPOCH), and one delivery queue drained by all of them.

mod link;
mod outbox;
mod schema;
mod store;

pub use outbox::PgOutbox;
pub use schema::SCHEMA_VERSION;
pub use store::{database_password, PgStore, LEASE_MS_DEFAULT, LEASE_MS_MAX, LEASE_MS_MIN};
