//! The PostgreSQL session store: the same append protocol as every backend
//! ([`SessionWriter`]), the same row rules as SQLite (`store::rows`), and a lease per
//! writer — owner, epoch, expiry — checked in the statement that does the work.
//!
//! - `open` takes the session row `FOR UPDATE`, applies the lease rule
//!   (`check_lease_takeover`), commits repair, and moves the epoch on: from then on every
//!   statement of the previous writer that names its epoch matches no row.
//! - An append is one statement: a CTE renews the lease `WHERE id = $1 AND epoch = $2`, and
//!   the insert takes its rows from that CTE, so a fenced writer inserts nothing. The row
//!   lock the renewal takes orders it against a concurrent takeover.
//! - An append whose connection was lost, or that finds its seqs taken, compares what is
//!   stored with its batch: all of it stored is success (the first attempt committed), none
//!   of it is retried once on a new connection, anything else is refused.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use postgres::types::Type;

use super::client::Queries;
use super::link::Dial;
use super::link::{classify, Link, Linked};
use super::schema;
use crate::event::{Record, SessionHeader};
use crate::seams::{OwnerIdentity, Process};
use crate::store::lost_answer::{self, Stored, UnsureAppend, UnsureTakeover};
use crate::store::{encode_rows, inspect_rows, LogMedium, SessionWriter};
use crate::store::{Inspection, Loaded, Opened, OutcomeEvidence, Repair, SessionId, SessionLog, Store, Takeover};
use crate::{Error, Result};

/// A writer's lease: its bounds and default, shared by every leased backend.
use crate::store::LEASE_MS_DEFAULT;

const SELECT_SESSION: &str = "SELECT header, revision, epoch, owner, coalesce(lease_expires_at > now(), false)
    FROM faultline_sessions WHERE id = $1";
const SELECT_EVENTS: &str = "SELECT seq, record FROM faultline_events WHERE session_id = $1 ORDER BY seq";
const INSERT_EVENTS: &str = "INSERT INTO faultline_events (session_id, seq, record)
    SELECT $1, t.seq, t.record FROM unnest($2::bigint[], $3::text[]) AS t(seq, record)";
const APPEND_FENCED: &str = "WITH fence AS (
        UPDATE faultline_sessions SET lease_expires_at = clock_timestamp() + make_interval(secs => $3)
        WHERE id = $1 AND epoch = $2 RETURNING id)
    INSERT INTO faultline_events (session_id, seq, record)
    SELECT fence.id, t.seq, t.record FROM fence, unnest($4::bigint[], $5::text[]) AS t(seq, record)";

/// How to reach the database and how long a writer's lease lasts.
#[derive(Clone)]
struct Shared {
    link: Arc<Link>,
    process: Arc<dyn Process>,
    /// The database as printed: user, host, port and name, never the password.
    target: String,
    lease: Duration,
    /// Opened for inspection: every writing method refuses before it sends anything.
    read_only: bool,
}

/// Sessions in one PostgreSQL database, shared by any number of workers on any hosts.
#[derive(Clone)]
pub struct PgStore {
    shared: Shared,
    evidence: Arc<dyn OutcomeEvidence>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("target", &self.shared.target).finish_non_exhaustive()
    }
}

/// Parses a database URL (`postgresql://user:password@host:port/db` or `key=value` pairs)
/// and names it without its password.
pub(crate) fn parse_url(url: &str) -> Result<(Dial, String)> {
    let (rest, tls) = super::tls::split(url)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|_| Error::NotFaultlineDatabase {
        path: "the database URL".into(),
        reason: "it is not a PostgreSQL connection string (postgresql://user@host:port/dbname, or key=value pairs)"
            .into(),
    })?;
    config.ssl_mode(super::tls::driver_mode(&tls));
    let target = describe(&config);
    Ok((Dial { config, tls }, target))
}

/// The password a database URL carries, if any: a secret the embedder registers with its
/// scrubber, so it never leaves the process in a transcript or a log line.
pub fn database_password(url: &str) -> Option<String> {
    let (rest, _) = super::tls::split(url).ok()?;
    let config = tokio_postgres::Config::from_str(&rest).ok()?;
    let password = config.get_password()?;
    Some(String::from_utf8_lossy(password).into_owned()).filter(|p| !p.is_empty())
}

/// `postgresql://user@host:port/dbname`, without the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}{host}:{port}/{db}")
}

impl PgStore {
    /// Connects to the database at `url` for writing, applying missing schema migrations,
    /// with writers' leases of `lease_ms` ([`LEASE_MS_MIN`](crate::store::LEASE_MS_MIN)..=[`LEASE_MS_MAX`](crate::store::LEASE_MS_MAX)).
    pub fn connect(url: &str, process: Arc<dyn Process>, lease_ms: u64) -> Result<Self> {
        let lease = crate::store::check_lease_ms(lease_ms)?;
        let (config, target) = parse_url(url)?;
        let link = Link::start(config, lease)?;
        let named = target.clone();
        link.run(move |linked| schema::migrate(linked.client()?, &named).map(|_| ()))?;
        Ok(Self::with_link(link, process, target, lease))
    }

    /// Connects to the database at `url` for inspection only: nothing is created or
    /// migrated, and a database without the faultline schema is refused. `open`, `create`
    /// and a `load` that would repair refuse on such a store before sending anything (no
    /// session setting does it: a transaction-mode pooler may refuse startup options).
    pub fn connect_read_only(url: &str, process: Arc<dyn Process>) -> Result<Self> {
        let (config, target) = parse_url(url)?;
        let lease = Duration::from_millis(LEASE_MS_DEFAULT);
        let link = Link::start(config, lease)?;
        let named = target.clone();
        link.run(move |linked| schema::check_readable(linked.client()?, &named))?;
        let mut store = Self::with_link(link, process, target, lease);
        store.shared.read_only = true;
        Ok(store)
    }

    fn refuse_if_read_only(&self, what: &str) -> Result<()> {
        if self.shared.read_only {
            return Err(Error::NotFaultlineDatabase {
                path: self.shared.target.clone(),
                reason: format!("it was opened for inspection only; {what} writes"),
            });
        }
        Ok(())
    }

    /// Applies the missing schema migrations to the database at `url`; returns the versions
    /// applied (empty when it was up to date).
    pub fn migrate(url: &str) -> Result<Vec<i32>> {
        let (config, target) = parse_url(url)?;
        let link = Link::start(config, Duration::from_millis(LEASE_MS_DEFAULT))?;
        link.run(move |linked| schema::migrate(linked.client()?, &target))
    }

    fn with_link(link: Arc<Link>, process: Arc<dyn Process>, target: String, lease: Duration) -> Self {
        let shared = Shared { link, process, target, lease, read_only: false };
        Self { shared, evidence: Arc::new(crate::store::NoEvidence) }
    }

    /// Crash repair consults `evidence` (the delivery queue) before calling a started call's
    /// outcome unknown.
    pub fn with_evidence(mut self, evidence: Arc<dyn OutcomeEvidence>) -> Self {
        self.evidence = evidence;
        self
    }

    /// The database, as printed (no password).
    pub fn target(&self) -> &str {
        &self.shared.target
    }

    /// Renews every lease this store's writers hold now, in the statements the renewal thread
    /// sends every third of a lease (by key, 1 024 a statement); returns how many are still
    /// held. For benches (`faultline bench --only postgres`) and checks; writers never need it.
    pub fn renew_leases_now(&self) -> Result<usize> {
        self.shared.link.renew_now()
    }

    fn medium(&self, id: &SessionId, epoch: i64) -> Box<PgMedium> {
        Box::new(PgMedium { shared: self.shared.clone(), id: id.to_string(), epoch })
    }
}

fn identity_json(identity: &OwnerIdentity) -> String {
    serde_json::to_string(identity).expect("identities always serialise")
}

/// A session row.
struct SessionRow {
    header: String,
    epoch: i64,
    owner: Option<OwnerIdentity>,
    lease_live: bool,
}

fn read_session(tx: &mut impl Queries, id: &str, lock: bool) -> Result<SessionRow> {
    let sql = if lock { format!("{SELECT_SESSION} FOR UPDATE") } else { SELECT_SESSION.to_owned() };
    let row = tx
        .query_typed_opt(&sql, &[(&id, Type::TEXT)])
        .map_err(classify)?
        .ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
    let owner = row.get::<_, Option<String>>(3).map(|text| serde_json::from_str(&text)).transpose().map_err(|e| {
        Error::Corrupt { id: id.to_owned(), offset: 0, reason: format!("owner column is not an identity: {e}") }
    })?;
    Ok(SessionRow { header: row.get(0), epoch: row.get(2), owner, lease_live: row.get(4) })
}

fn read_events(tx: &mut impl Queries, id: &str) -> Result<Vec<(i64, String)>> {
    let rows = tx.query_typed(SELECT_EVENTS, &[(&id, Type::TEXT)]).map_err(classify)?;
    Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The inspection of a session row: an owner whose lease ran out holds nothing.
fn inspect(
    id: &str,
    row: &SessionRow,
    events: Vec<(i64, String)>,
    evidence: &dyn OutcomeEvidence,
) -> Result<Inspection> {
    let owner = row.owner.clone().filter(|_| row.lease_live);
    inspect_rows(id, &row.header, owner, events.into_iter().map(Ok::<_, Error>), evidence)
}

fn lease_secs(lease: Duration) -> f64 {
    lease.as_secs_f64()
}

/// What a takeover needs (kept for a second attempt after a lost connection).
struct Taking {
    sid: String,
    me: String,
    secs: f64,
    process: Arc<dyn Process>,
    evidence: Arc<dyn OutcomeEvidence>,
    takeover: Takeover,
}

/// One takeover transaction: the row locked, the lease rule, repair, the epoch moved on.
fn take_over(linked: &mut Linked, t: &Taking) -> Result<(i64, Inspection)> {
    let mut tx = linked.client()?.transaction().map_err(classify)?;
    let row = read_session(&mut tx, &t.sid, true)?;
    crate::store::check_lease_takeover(t.process.as_ref(), &t.sid, row.owner.as_ref(), row.lease_live, t.takeover)?;
    let events = read_events(&mut tx, &t.sid)?;
    let inspection = inspect(&t.sid, &row, events, t.evidence.as_ref())?;
    inspection.refuse_unusable(&t.sid)?;
    let repaired = i64::from(!inspection.closers.is_empty());
    if repaired == 1 {
        // Repair is part of the takeover's transaction: the closers, the revision and the
        // new epoch land together.
        let (seqs, lines): (Vec<i64>, Vec<String>) = encode_rows(&inspection.closers)?.into_iter().unzip();
        tx.execute_typed(INSERT_EVENTS, &[(&t.sid, Type::TEXT), (&seqs, Type::INT8_ARRAY), (&lines, Type::TEXT_ARRAY)])
            .map_err(classify)?;
    }
    let epoch: i64 = tx
        .query_typed_one(
            "UPDATE faultline_sessions SET epoch = epoch + 1, owner = $2, revision = revision + $3,
                 lease_expires_at = clock_timestamp() + make_interval(secs => $4)
             WHERE id = $1 RETURNING epoch",
            &[(&t.sid, Type::TEXT), (&t.me, Type::TEXT), (&repaired, Type::INT8), (&t.secs, Type::FLOAT8)],
        )
        .map_err(classify)?
        .get(0);
    tx.commit().map_err(classify)?;
    Ok((epoch, inspection))
}

/// A takeover on a connection that may be lost (`lost_answer.rs` settles it).
struct PgTakeover<'a> {
    linked: &'a mut Linked,
    taking: &'a Taking,
    held: &'a crate::store::HeldLeases,
}

impl UnsureTakeover for PgTakeover<'_> {
    type Taken = (i64, Inspection);

    fn take_over(&mut self) -> Result<(i64, Inspection)> {
        take_over(self.linked, self.taking)
    }

    fn committed_unseen(&mut self) -> Result<Option<(i64, Inspection)>> {
        let t = self.taking;
        let client = self.linked.client()?;
        let row = read_session(client, &t.sid, false)?;
        let ours = row.lease_live && row.owner.as_ref().map(identity_json).as_deref() == Some(t.me.as_str());
        if !ours || self.held.held().iter().any(|(id, epoch)| *id == t.sid && *epoch == row.epoch as u64) {
            return Ok(None);
        }
        let events = read_events(client, &t.sid)?;
        Ok(Some((row.epoch, inspect(&t.sid, &row, events, t.evidence.as_ref())?)))
    }

    fn forget(&mut self) {
        self.linked.forget();
    }
}

impl Store for PgStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        self.refuse_if_read_only("creating a session")?;
        let header = SessionHeader::new(id.as_str(), created_at).encode();
        let me = identity_json(&self.shared.process.identity());
        let (sid, secs) = (id.to_string(), lease_secs(self.shared.lease));
        self.shared.link.run_idempotent(move |linked| {
            let client = linked.client()?;
            let inserted = client
                .execute_typed(
                    "INSERT INTO faultline_sessions (id, header, revision, epoch, owner, lease_expires_at)
                     VALUES ($1, $2, 0, 1, $3, clock_timestamp() + make_interval(secs => $4)) ON CONFLICT (id) DO NOTHING",
                    &[(&sid, Type::TEXT), (&header, Type::TEXT), (&me, Type::TEXT), (&secs, Type::FLOAT8)],
                )
                .map_err(classify)?;
            if inserted == 1 {
                return Ok(());
            }
            // Created by a first attempt whose answer was lost? Only if it is ours at epoch 1.
            let row = read_session(client, &sid, false)?;
            let ours = row.epoch == 1 && row.owner.as_ref().map(identity_json).as_deref() == Some(me.as_str());
            if ours && read_events(client, &sid)?.is_empty() {
                return Ok(());
            }
            Err(Error::SessionExists(sid.clone()))
        })?;
        self.shared.link.leases().hold(id.as_str(), 1);
        SessionWriter::boxed(id, 1, &[], self.medium(id, 1))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        self.refuse_if_read_only("opening a session to write it")?;
        let me = identity_json(&self.shared.process.identity());
        let (sid, secs) = (id.to_string(), lease_secs(self.shared.lease));
        let (process, evidence) = (self.shared.process.clone(), self.evidence.clone());
        let held = self.shared.link.leases().clone();
        let taking = Taking { sid, me, secs, process, evidence, takeover };
        // A lost answer is looked up, then the takeover tried once more (`lost_answer.rs`):
        // only this process's identity as the live owner, at an epoch it does not hold
        // already, says the first attempt committed unseen (its repair is in the records
        // then, not in `repair`).
        let (epoch, inspection) = self.shared.link.run(move |linked| {
            let sid = taking.sid.clone();
            lost_answer::take_over(&mut PgTakeover { linked, taking: &taking, held: &held }, &sid)
        })?;
        self.shared.link.leases().hold(id.as_str(), epoch as u64);
        let header = inspection.header.clone().expect("clean inspections have a header");
        let mut records = inspection.records;
        let repair = (!inspection.closers.is_empty()).then(|| {
            records.extend(inspection.closers.iter().cloned());
            Repair { closers: inspection.closers.clone(), ..Repair::default() }
        });
        if let Some(repair) = &repair {
            for execution in crate::store::never_claimed(id.as_str(), &repair.closers) {
                self.evidence.cancel_never_claimed(&execution);
            }
        }
        let log = SessionWriter::boxed(id, epoch as u64, &records, self.medium(id, epoch))?;
        Ok(Opened { log, loaded: Loaded { header, records, repair } })
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        let sid = id.to_string();
        let evidence = self.evidence.clone();
        self.shared.link.run_idempotent(move |linked| {
            // One snapshot of the row and its events, and a promise to write nothing.
            let mut tx = linked.client()?.snapshot().map_err(classify)?;
            let row = read_session(&mut tx, &sid, false)?;
            let events = read_events(&mut tx, &sid)?;
            tx.commit().map_err(classify)?;
            inspect(&sid, &row, events, evidence.as_ref())
        })
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        crate::store::load_through_open(self, self.shared.process.as_ref(), id, self.inspect(id)?)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        let ids: Vec<String> = self.shared.link.run_idempotent(|linked| {
            let rows = linked
                .client()?
                .query_typed("SELECT id FROM faultline_sessions ORDER BY id COLLATE \"C\"", &[])
                .map_err(classify)?;
            Ok(rows.into_iter().map(|r| r.get(0)).collect())
        })?;
        Ok(ids.into_iter().filter_map(|id| SessionId::new(id).ok()).collect())
    }
}

/// One writer's medium: its epoch, and the link that renews its lease.
struct PgMedium {
    shared: Shared,
    id: String,
    epoch: i64,
}

impl std::fmt::Debug for PgMedium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMedium").field("target", &self.shared.target).field("epoch", &self.epoch).finish()
    }
}

fn stored(linked: &mut Linked, id: &str, seqs: &[i64], lines: &[String]) -> Result<Stored> {
    let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
    let rows = linked
        .client()?
        .query_typed(
            "SELECT seq, record FROM faultline_events WHERE session_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq",
            &[(&id, Type::TEXT), (&first, Type::INT8), (&last, Type::INT8)],
        )
        .map_err(classify)?;
    let found = rows.iter().map(|row| {
        let seq: i64 = row.get(0);
        let own = usize::try_from(seq - first).ok().and_then(|i| lines.get(i));
        (seq as u64, own.is_some_and(|line| row.get::<_, &str>(1) == line.as_str()))
    });
    Ok(Stored::judge(first as u64, seqs.len(), found))
}

/// The error of an append or release that matched no session row at `epoch`.
fn fenced(linked: &mut Linked, id: &str, epoch: i64) -> Error {
    let current = linked.client().and_then(|c| {
        c.query_typed_opt("SELECT epoch FROM faultline_sessions WHERE id = $1", &[(&id, Type::TEXT)]).map_err(classify)
    });
    match current {
        Ok(Some(row)) => Error::Fenced { id: id.to_owned(), token: epoch as u64, current: row.get::<_, i64>(0) as u64 },
        Ok(None) => Error::SessionNotFound(id.to_owned()),
        Err(e) => e,
    }
}

fn append_once(linked: &mut Linked, id: &str, epoch: i64, secs: f64, seqs: &[i64], lines: &[String]) -> Result<()> {
    let inserted = linked
        .client()?
        .execute_typed(
            APPEND_FENCED,
            &[
                (&id, Type::TEXT),
                (&epoch, Type::INT8),
                (&secs, Type::FLOAT8),
                (&seqs, Type::INT8_ARRAY),
                (&lines, Type::TEXT_ARRAY),
            ],
        )
        .map_err(classify)?;
    if inserted == seqs.len() as u64 {
        return Ok(());
    }
    assert_eq!(inserted, 0, "an append statement inserts its whole batch or nothing");
    Err(fenced(linked, id, epoch))
}

/// An append on a connection that may be lost (`lost_answer.rs` settles it).
struct PgAppend<'a> {
    linked: &'a mut Linked,
    id: &'a str,
    epoch: i64,
    secs: f64,
    seqs: &'a [i64],
    lines: &'a [String],
}

impl UnsureAppend for PgAppend<'_> {
    fn append(&mut self, from: usize) -> Result<()> {
        append_once(self.linked, self.id, self.epoch, self.secs, &self.seqs[from..], &self.lines[from..])
    }

    fn stored(&mut self) -> Result<Stored> {
        stored(self.linked, self.id, self.seqs, self.lines)
    }

    fn fenced(&mut self) -> Error {
        fenced(self.linked, self.id, self.epoch)
    }

    fn forget(&mut self) {
        self.linked.forget();
    }
}

impl LogMedium for PgMedium {
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()> {
        debug_assert_eq!(token as i64, self.epoch);
        let (seqs, lines): (Vec<i64>, Vec<String>) = encode_rows(batch)?.into_iter().unzip();
        let (sid, epoch, secs) = (id.to_string(), self.epoch, lease_secs(self.shared.lease));
        let range = (batch[0].seq, batch[batch.len() - 1].seq);
        self.shared.link.run(move |linked| {
            let mut unsure = PgAppend { linked, id: &sid, epoch, secs, seqs: &seqs, lines: &lines };
            lost_answer::append(&mut unsure, &sid, epoch as u64, range)
        })
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        debug_assert_eq!(token as i64, self.epoch);
        let (sid, epoch) = (id.to_string(), self.epoch);
        self.shared.link.leases().drop_lease(&sid, epoch as u64);
        self.shared.link.run_idempotent(move |linked| {
            let released = linked
                .client()?
                .execute_typed(
                    "UPDATE faultline_sessions SET epoch = epoch + 1, owner = NULL, lease_expires_at = NULL
                     WHERE id = $1 AND epoch = $2",
                    &[(&sid, Type::TEXT), (&epoch, Type::INT8)],
                )
                .map_err(classify)?;
            if released == 1 {
                return Ok(());
            }
            // A first attempt that committed unseen left the row released at epoch + 1.
            let row = read_session(linked.client()?, &sid, false)?;
            if row.epoch == epoch + 1 && row.owner.is_none() {
                return Ok(());
            }
            Err(fenced(linked, &sid, epoch))
        })
    }
}

impl Drop for PgMedium {
    fn drop(&mut self) {
        // A writer dropped without release stops renewing: its lease runs out and the
        // session can be taken over.
        self.shared.link.leases().drop_lease(&self.id, self.epoch as u64);
    }
}
