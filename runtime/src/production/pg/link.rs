//! One connection to PostgreSQL, owned by a thread of its own.
//!
//! The store's traits are synchronous (the file and SQLite backends block in place), and the
//! blocking `postgres` client runs its own small tokio runtime, which may not be entered from
//! a thread that already runs one. So the connection lives on a dedicated thread; callers
//! send it jobs and wait for the answer, which blocks them exactly as a SQLite write does.
//! The leases its writers hold are renewed by a second thread on a connection of its own,
//! which does nothing else: a job that waits (on a lock, on a slow server, up to the
//! statement bound) never holds a renewal back past a short lease. A worker that is stopped
//! (SIGSTOP, a paused VM) stops renewing with both, and its lease runs out.
//!
//! Nothing is held on the connection between jobs: no transaction, no session setting, no
//! named prepared statement (every statement is sent with its parameter types, unnamed), so
//! it works through a transaction-mode pooler.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use postgres::types::Type;

use super::client::{PgClient, PgError, Queries};
use crate::error::DatabaseError;
use crate::store::HeldLeases;
use crate::{Error, Result};

/// How long one TCP connect may take, in milliseconds (the whole connect, TLS and startup
/// included, is bounded by [`super::client::CONNECT_TIMEOUT_MS`]).
pub(crate) const TCP_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Idle time before the first keep-alive probe, in ms: a peer gone without a word (a failed
/// over host, a NAT that forgot the flow) is found by its silence, not hours later.
const KEEPALIVE_IDLE_MS: u64 = 10_000;
/// Between keep-alive probes, in ms.
const KEEPALIVE_INTERVAL_MS: u64 = 5_000;
/// Unanswered probes before the connection is given up.
const KEEPALIVE_RETRIES: u32 = 3;
/// Longest sent data may stay unacknowledged before the connection is given up, in ms.
const TCP_USER_TIMEOUT_MS: u64 = 30_000;
/// Longest one statement may run on the server (a lock never released included), in ms,
/// unless the URL's `options` set a `statement_timeout` of their own.
const STATEMENT_TIMEOUT_MS: u64 = 60_000;

type Job = Box<dyn FnOnce(&mut Linked) + Send>;

/// Where to connect: the driver's settings and the TLS the URL asked for.
pub(crate) struct Dial {
    pub config: tokio_postgres::Config,
    pub tls: super::tls::PgTls,
}

/// The connection as a job sees it: connected on first use and again after a loss.
pub(crate) struct Linked {
    config: tokio_postgres::Config,
    /// The TLS connector (`None`: `sslmode=disable`).
    tls: Option<super::tls::RustlsConnect>,
    /// The longest a reply may take (FAILURE-DB-SILENT).
    reply: Duration,
    client: Option<PgClient>,
    /// A connect met a database that accepted and never answered: until then, a job fails
    /// at once instead of waiting out the connect bound again (a worker facing a silent
    /// database gives up in bounded time, however many writes it has queued).
    quiet_until: Option<std::time::Instant>,
}

impl Linked {
    /// The connection, (re)connecting when there is none or it was closed.
    pub(crate) fn client(&mut self) -> Result<&mut PgClient> {
        if self.client.as_ref().is_some_and(PgClient::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            if let Some(until) = self.quiet_until.filter(|until| std::time::Instant::now() < *until) {
                let left = until.saturating_duration_since(std::time::Instant::now()).as_millis();
                return Err(Error::Database(DatabaseError {
                    message: format!(
                        "the database did not answer: no reply to the last connection within {} ms; not tried again \
                         for another {left} ms",
                        super::client::CONNECT_TIMEOUT_MS
                    ),
                    code: None,
                    connection_lost: true,
                }));
            }
            let connected = match &self.tls {
                Some(tls) => PgClient::connect(&self.config, tls.clone(), self.reply),
                None => PgClient::connect(&self.config, tokio_postgres::NoTls, self.reply),
            };
            if matches!(connected, Err(PgError::Silent { .. })) {
                let quiet = Duration::from_millis(super::client::CONNECT_TIMEOUT_MS);
                self.quiet_until = Some(std::time::Instant::now() + quiet);
            }
            self.client = Some(connected.map_err(|e| classify_connect(e, &self.config))?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Drops the connection after a loss: the next job connects again.
    pub(crate) fn forget(&mut self) {
        self.client = None;
    }
}

/// A handle on the connection thread. The thread ends when the last handle is dropped.
pub(crate) struct Link {
    jobs: mpsc::Sender<Job>,
    leases: HeldLeases,
    /// How long a renewal extends a lease.
    lease: Duration,
    /// Dropped with the link: the renewal thread ends.
    _renewal: mpsc::Sender<()>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

/// Renews every held lease in one statement, each row found by its key and fenced on its
/// epoch; the ids it returns are the leases still held.
const RENEW_SQL: &str = "UPDATE faultline_sessions s
    SET lease_expires_at = clock_timestamp() + make_interval(secs => $3)
    FROM unnest($1::text[], $2::bigint[]) AS held(id, epoch)
    WHERE s.id = held.id AND s.epoch = held.epoch
    RETURNING s.id";

/// Leases renewed by one statement at most (a worker holding more renews them in rounds).
const RENEW_BATCH_MAX: usize = 1024;

/// Renews every held lease; a lease whose epoch moved on (taken over) is dropped from the
/// set, and the writer's next append is refused by the epoch it carries.
fn renew(linked: &mut Linked, leases: &HeldLeases, lease: Duration) {
    let held = leases.held();
    let secs = lease.as_secs_f64();
    for batch in held.chunks(RENEW_BATCH_MAX) {
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        let epochs: Vec<i64> = batch.iter().map(|(_, epoch)| *epoch as i64).collect();
        let renewed = linked.client().and_then(|c| {
            c.query_typed(RENEW_SQL, &[(&ids, Type::TEXT_ARRAY), (&epochs, Type::INT8_ARRAY), (&secs, Type::FLOAT8)])
                .map_err(classify)
        });
        match renewed {
            Ok(rows) => {
                let kept: std::collections::BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
                for (id, epoch) in batch.iter().filter(|(id, _)| !kept.contains(id)) {
                    leases.drop_lease(id, *epoch);
                }
            }
            // Unreachable now: tried again at the next round, while the lease lasts.
            Err(_) => {
                linked.forget();
                return;
            }
        }
    }
}

/// The renewal thread: every `every`, renews the held leases on a connection of its own
/// (opened only once there is a lease to renew), until its link is dropped.
fn renew_apart(mut linked: Linked, leases: HeldLeases, lease: Duration, every: Duration, stop: mpsc::Receiver<()>) {
    loop {
        match stop.recv_timeout(every) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if !leases.held().is_empty() {
            renew(&mut linked, &leases, lease);
        }
    }
}

impl Link {
    /// Starts the connection thread for `config`, renewing held leases of length `lease`
    /// every third of it. Connects once before returning, so a wrong address or a refused
    /// login is reported here.
    pub(crate) fn start(dial: Dial, lease: Duration) -> Result<Arc<Link>> {
        let Dial { mut config, tls } = dial;
        // Read the roots now: a bad sslrootcert is said before any connection is tried.
        let tls = match tls.mode {
            super::tls::SslMode::Disable => None,
            _ => Some(super::tls::connector(&tls)?),
        };
        config.connect_timeout(Duration::from_millis(TCP_CONNECT_TIMEOUT_MS));
        // A half-open connection ends as a lost one (DATABASE_UNREACHABLE), never a hang.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_millis(KEEPALIVE_IDLE_MS));
        config.keepalives_interval(Duration::from_millis(KEEPALIVE_INTERVAL_MS));
        config.keepalives_retries(KEEPALIVE_RETRIES);
        config.tcp_user_timeout(Duration::from_millis(TCP_USER_TIMEOUT_MS));
        let options = config.get_options().unwrap_or_default().to_owned();
        let statement_ms = super::client::statement_timeout_ms(&options).unwrap_or(STATEMENT_TIMEOUT_MS);
        if !options.contains("statement_timeout") {
            let bounded = format!("{options} -c statement_timeout={STATEMENT_TIMEOUT_MS}");
            config.options(bounded.trim_start());
        }
        let reply = super::client::reply_bound(statement_ms);
        let (jobs, inbox) = mpsc::channel::<Job>();
        let leases = HeldLeases::default();
        let renewing = Linked { config: config.clone(), tls: tls.clone(), reply, client: None, quiet_until: None };
        let (renewal, stop) = mpsc::channel::<()>();
        let (renewed, every) = (leases.clone(), crate::store::renewal_interval(lease));
        std::thread::Builder::new()
            .name("faultline-postgres-leases".into())
            .spawn(move || renew_apart(renewing, renewed, lease, every, stop))
            .map_err(|e| Error::io("starting the PostgreSQL lease thread", e))?;
        std::thread::Builder::new()
            .name("faultline-postgres".into())
            .spawn(move || {
                let mut linked = Linked { config, tls, reply, client: None, quiet_until: None };
                while let Ok(job) = inbox.recv() {
                    job(&mut linked);
                }
            })
            .map_err(|e| Error::io("starting the PostgreSQL connection thread", e))?;
        let link = Arc::new(Link { jobs, leases, lease, _renewal: renewal });
        link.run(|linked| linked.client().map(|_| ()))?;
        Ok(link)
    }

    /// Runs `job` on the connection and waits for its result.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Linked) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (answer, result) = mpsc::sync_channel(1);
        // The job runs as its caller would: with the caller's planted bugs, if any.
        let planted = crate::testing::bugs::Carried::here();
        self.jobs
            .send(Box::new(move |linked| {
                planted.plant_here();
                let _ = answer.send(job(linked));
            }))
            .map_err(|_| thread_gone())?;
        result.recv().map_err(|_| thread_gone())?
    }

    /// Runs an idempotent `job`, once more on a new connection if the first attempt lost its
    /// connection (a read, or a write whose second attempt checks what the first did).
    pub(crate) fn run_idempotent<T: Send + 'static>(
        &self,
        job: impl Fn(&mut Linked) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.run(move |linked| crate::store::again_if_lost(linked, &job, Linked::forget))
    }

    /// Renews every held lease now, on the job connection, as the renewal thread does every
    /// third of a lease; returns how many are still held.
    pub(crate) fn renew_now(&self) -> Result<usize> {
        let (leases, lease) = (self.leases.clone(), self.lease);
        self.run(move |linked| {
            renew(linked, &leases, lease);
            Ok(leases.held().len())
        })
    }

    /// The leases this link keeps renewing (a writer enters its own at open, leaves at release).
    pub(crate) fn leases(&self) -> &HeldLeases {
        &self.leases
    }
}

fn thread_gone() -> Error {
    Error::Database(DatabaseError {
        message: "the PostgreSQL connection thread is gone".into(),
        code: None,
        connection_lost: true,
    })
}

/// A failed connect as the runtime's error: a refused certificate said plainly (never
/// retried as a lost connection: it will be refused again), anything else as [`classify`].
fn classify_connect(e: PgError, config: &tokio_postgres::Config) -> Error {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
        _ => "localhost".to_owned(),
    };
    let refused = match &e {
        PgError::Driver(driver) => super::tls::certificate_refusal(driver, &host),
        PgError::Silent { .. } => None,
    };
    match refused {
        Some(message) => Error::Database(DatabaseError { message, code: None, connection_lost: false }),
        None => classify(e),
    }
}

/// A failed exchange as the runtime's error: a deadline that passed is a lost connection
/// (FAILURE-DB-SILENT); a driver's error as [`classify_driver`] says.
pub(crate) fn classify(e: impl Into<PgError>) -> Error {
    match e.into() {
        PgError::Driver(e) => classify_driver(e),
        PgError::Silent { what, waited_ms } => Error::Database(DatabaseError {
            message: format!("the database did not answer: no reply to {what} within {waited_ms} ms"),
            code: None,
            connection_lost: true,
        }),
    }
}

/// A driver error as the runtime's: the server's message and SQLSTATE, or the driver's own
/// text, and whether the connection was lost. Neither carries the database's URL.
fn classify_driver(e: tokio_postgres::Error) -> Error {
    let code = e.code().map(|c| c.code().to_owned());
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    // Class 08 is "connection exception"; 57P01-57P03 are the server shutting down or
    // starting up.
    let shutdown = code.as_deref().is_some_and(|c| c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03"));
    let connection_lost = e.is_closed() || io || shutdown;
    let message = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    };
    Error::Database(DatabaseError { message, code, connection_lost })
}
