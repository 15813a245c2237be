//! The connection a job runs on: tokio-postgres on a small runtime of its own, every exchange
//! under a client-side deadline (FAILURE-DB-SILENT).
//!
//! A database that accepts and then never answers — a half-dead primary, a proxy that lost its
//! upstream, a TLS handshake that stalls — is not found by the kernel: keep-alives and
//! `tcp_user_timeout` are satisfied by the peer's TCP stack, and `statement_timeout` is
//! enforced by a server that no longer reads. So the client bounds its own waits: the whole
//! connect (TCP, TLS, startup and authentication) within [`CONNECT_TIMEOUT_MS`], and each
//! reply within the statement bound plus [`REPLY_MARGIN_MS`] (a statement the server runs
//! that long is cancelled by the server first, with its own error). A wait that passes its
//! bound gives the connection up: it ends as a lost connection (`DATABASE_UNREACHABLE`), and
//! whatever the statement may have done is looked up on a new connection
//! (`store/lost_answer.rs`) — a late commit still carries its epoch and is fenced.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{IsolationLevel, Row, Socket};

/// Longest a connect may take (TCP, TLS handshake, startup and authentication), in ms.
pub(crate) const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How much longer than the statement bound a reply may take, in ms: the server's own
/// `statement_timeout` answers first when the server is there to answer.
pub(crate) const REPLY_MARGIN_MS: u64 = 5_000;

/// Why an exchange produced no answer: the driver's error, or a deadline that passed.
#[derive(Debug)]
pub(crate) enum PgError {
    /// The driver's (or the server's) error.
    Driver(tokio_postgres::Error),
    /// No answer within the client's own bound: the connection is given up.
    Silent {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited_ms: u64,
    },
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Driver(e)
    }
}

/// The parameters of a typed statement.
pub(crate) type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

/// One connection, owned by the thread that runs its jobs.
pub(crate) struct PgClient {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    connection: tokio::task::JoinHandle<()>,
    /// The longest a reply may take.
    reply: Duration,
    /// A deadline passed: the connection is given up, whatever the driver thinks.
    given_up: Cell<bool>,
}

impl std::fmt::Debug for PgClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgClient").field("reply", &self.reply).finish_non_exhaustive()
    }
}

impl PgClient {
    /// Connects with `config` over `tls`, the whole connect within [`CONNECT_TIMEOUT_MS`];
    /// every later reply within `reply`.
    pub(crate) fn connect<T>(config: &tokio_postgres::Config, tls: T, reply: Duration) -> Result<PgClient, PgError>
    where
        T: MakeTlsConnect<Socket> + Send + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| PgError::Silent { what: "starting the connection's runtime", waited_ms: 0 })?;
        let bound = Duration::from_millis(CONNECT_TIMEOUT_MS);
        let connected = runtime.block_on(async { tokio::time::timeout(bound, config.connect(tls)).await });
        let (client, connection) = connected.map_err(|_| PgError::Silent {
            what: "the connection (TCP, TLS and the startup exchange)",
            waited_ms: CONNECT_TIMEOUT_MS,
        })??;
        let connection = runtime.spawn(async move {
            let _ = connection.await;
        });
        Ok(PgClient { runtime, client, connection, reply, given_up: Cell::new(false) })
    }

    /// Whether the connection is gone (closed by the server, broken, or given up).
    pub(crate) fn is_closed(&self) -> bool {
        self.given_up.get() || self.client.is_closed()
    }

    /// A transaction (read committed, read-write).
    pub(crate) fn transaction(&mut self) -> Result<PgTx<'_>, PgError> {
        let Self { runtime, client, reply, given_up, .. } = self;
        let tx = within(runtime, *reply, given_up, "BEGIN", client.transaction())??;
        Ok(PgTx { runtime, tx, reply: *reply, given_up })
    }

    /// A read-only transaction on one snapshot (repeatable read): what inspection reads.
    pub(crate) fn snapshot(&mut self) -> Result<PgTx<'_>, PgError> {
        let Self { runtime, client, reply, given_up, .. } = self;
        let start = client.build_transaction().read_only(true).isolation_level(IsolationLevel::RepeatableRead).start();
        let tx = within(runtime, *reply, given_up, "BEGIN", start)??;
        Ok(PgTx { runtime, tx, reply: *reply, given_up })
    }
}

impl Drop for PgClient {
    fn drop(&mut self) {
        // The socket closes with the task: a silent server holds nothing of ours.
        self.connection.abort();
    }
}

/// A transaction on a [`PgClient`]; dropped without [`PgTx::commit`], it rolls back.
pub(crate) struct PgTx<'a> {
    runtime: &'a tokio::runtime::Runtime,
    tx: tokio_postgres::Transaction<'a>,
    reply: Duration,
    given_up: &'a Cell<bool>,
}

impl PgTx<'_> {
    /// Commits, within the reply bound (a commit whose reply is lost is looked up by the caller).
    pub(crate) fn commit(self) -> Result<(), PgError> {
        within(self.runtime, self.reply, self.given_up, "COMMIT", self.tx.commit())?.map_err(PgError::Driver)
    }
}

/// `future` on `runtime` within `reply`; past it the connection is given up.
fn within<F: Future>(
    runtime: &tokio::runtime::Runtime,
    reply: Duration,
    given_up: &Cell<bool>,
    what: &'static str,
    future: F,
) -> Result<F::Output, PgError> {
    if given_up.get() {
        return Err(PgError::Silent { what, waited_ms: 0 });
    }
    runtime.block_on(async { tokio::time::timeout(reply, future).await }).map_err(|_| {
        given_up.set(true);
        PgError::Silent { what, waited_ms: u64::try_from(reply.as_millis()).unwrap_or(u64::MAX) }
    })
}

/// The statements a job runs, on a connection or inside a transaction alike.
pub(crate) trait Queries {
    /// Rows of a typed statement.
    fn query_typed(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError>;
    /// At most one row.
    fn query_typed_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, PgError>;
    /// Exactly one row.
    fn query_typed_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError>;
    /// Rows changed.
    fn execute_typed(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError>;
    /// Statements without parameters (migrations).
    fn batch_execute(&mut self, sql: &str) -> Result<(), PgError>;
}

macro_rules! queries {
    ($ty:ty, $runtime:ident, $inner:ident) => {
        impl Queries for $ty {
            fn query_typed(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError> {
                within(
                    &self.$runtime,
                    self.reply,
                    &self.given_up,
                    "a query's rows",
                    self.$inner.query_typed(sql, params),
                )?
                .map_err(PgError::Driver)
            }

            fn query_typed_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, PgError> {
                let rows = self.$inner.query_typed_opt(sql, params);
                within(&self.$runtime, self.reply, &self.given_up, "a query's row", rows)?.map_err(PgError::Driver)
            }

            fn query_typed_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError> {
                let row = self.$inner.query_typed_one(sql, params);
                within(&self.$runtime, self.reply, &self.given_up, "a query's row", row)?.map_err(PgError::Driver)
            }

            fn execute_typed(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
                let done = self.$inner.execute_typed(sql, params);
                within(&self.$runtime, self.reply, &self.given_up, "a statement's count", done)?
                    .map_err(PgError::Driver)
            }

            fn batch_execute(&mut self, sql: &str) -> Result<(), PgError> {
                let done = self.$inner.batch_execute(sql);
                within(&self.$runtime, self.reply, &self.given_up, "a batch of statements", done)?
                    .map_err(PgError::Driver)
            }
        }
    };
}

queries!(PgClient, runtime, client);
queries!(PgTx<'_>, runtime, tx);

/// The reply bound for a connection whose statements the server bounds at `statement_ms`.
pub(crate) fn reply_bound(statement_ms: u64) -> Duration {
    Duration::from_millis(statement_ms.saturating_add(REPLY_MARGIN_MS))
}

/// The `statement_timeout` a connection string's `options` set (`-c statement_timeout=N`,
/// in ms, or with a unit: `ms`, `s`, `min`), if any.
pub(crate) fn statement_timeout_ms(options: &str) -> Option<u64> {
    let value = options.split("statement_timeout=").nth(1)?.split_whitespace().next()?;
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    let number: u64 = digits.parse().ok()?;
    match &value[digits.len()..] {
        "" | "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "min" => number.checked_mul(60_000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_bound_is_read_from_the_options_in_its_units() {
        assert_eq!(statement_timeout_ms("-c statement_timeout=1500"), Some(1500));
        assert_eq!(statement_timeout_ms("-c search_path=x -c statement_timeout=2s"), Some(2000));
        assert_eq!(statement_timeout_ms("-c statement_timeout=1min"), Some(60_000));
        assert_eq!(statement_timeout_ms("-c statement_timeout=5h"), None);
        assert_eq!(statement_timeout_ms("-c lock_timeout=5"), None);
        assert_eq!(reply_bound(1000), Duration::from_millis(1000 + REPLY_MARGIN_MS));
    }
}
