//! The production seam module: the only runtime code that touches the OS.
//!
//! Architecture invariant: this module (and nothing else in `runtime`) may read the wall
//! clock, open sockets, touch real files, draw OS randomness or block a thread. The crate-wide
//! clippy `disallowed-methods` / `disallowed-types` lint enforces that; this module opts out
//! explicitly, below, and nowhere else in `runtime` may.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod clock;
mod command_deliverer;
mod command_tool;
mod compute;
mod credentials;
mod entropy;
mod fs;
mod net;
#[cfg(feature = "postgres")]
mod pg;
mod platform_roots;
mod process;
mod proxy_env;
#[cfg(feature = "sqlite")]
mod sqlite_outbox;
#[cfg(feature = "sqlite")]
mod sqlite_store;

use std::sync::Arc;

pub use clock::SystemClock;
pub use command_deliverer::{CommandDeliverer, EXIT_REFUSED};
pub use command_tool::{CommandTool, COMMAND_KILL_GRACE_MS};
pub use compute::{Threads, THREADS_MAX};
pub use credentials::EnvCredentials;
pub use entropy::OsEntropy;
pub use fs::RealFs;
pub use net::TokioNet;
#[cfg(feature = "postgres")]
pub use pg::{database_password, PgOutbox, PgStore, SCHEMA_VERSION};
pub use platform_roots::platform_roots;
pub use process::OsProcess;
pub use proxy_env::proxy_env;
#[cfg(feature = "sqlite")]
pub use sqlite_outbox::SqliteOutbox;
#[cfg(feature = "sqlite")]
pub use sqlite_store::SqliteStore;

use crate::seams::Seams;

/// The seams of a real process: tokio time and `SystemTime`, `tokio::net`, real files with
/// real `fsync`, and an OS-seeded RNG.
pub fn seams() -> Seams {
    let entropy = Arc::new(OsEntropy::new());
    Seams {
        clock: Arc::new(SystemClock::new()),
        net: Arc::new(TokioNet),
        fs: Arc::new(RealFs),
        process: Arc::new(OsProcess::new(entropy.as_ref())),
        entropy,
        probe: Arc::new(crate::seams::NoProbe),
        compute: Arc::new(Threads::new()),
        secrets: Default::default(),
    }
}
