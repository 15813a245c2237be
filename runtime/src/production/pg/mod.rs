//! PostgreSQL: sessions shared by a fleet of workers, one writer per session at a time,
//! fenced by epoch (FAILURE-LEASE-EPOCH), and one delivery queue drained by all of them.
//!
//! Why `postgres` (the blocking client over tokio-postgres), on a thread: it is the well-kept
//! Rust client, speaks the extended protocol with unnamed statements (`query_typed`: no
//! prepared statement survives a job, so a transaction-mode pooler works), and its async core
//! connects over any stream. The store traits are synchronous (the file and SQLite backends
//! block in place), and the blocking client runs its own runtime, which may not be entered
//! from a runtime thread: so one thread per store owns the connection (`link.rs`). Moving the
//! connection onto the `Net` seam (and into the simulator) needs an async `LogMedium`.

mod client;
mod link;
mod outbox;
mod schema;
mod store;
mod tls;

pub use outbox::PgOutbox;
pub use schema::SCHEMA_VERSION;
pub use store::{database_password, PgStore};
