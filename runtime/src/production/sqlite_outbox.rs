//! The SQLite delivery queue: WAL, `synchronous=FULL`, every transition one `BEGIN IMMEDIATE`
//! transaction, file mode 0600. Several processes may share it; a claim records the owner's
//! process id, start time and a random instance id.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use crate::outbox::machine::{self, After, Found, Op};
use crate::outbox::{Claim, Delivery, DeliveryStatus, Enqueued, Finish, Outbox, Resolution, SettleCause};
use crate::seams::{Clock, EntropyExt, OwnerIdentity, Process};
use crate::Result;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS deliveries (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL UNIQUE,
    status       TEXT NOT NULL,
    payload      TEXT,
    owner        TEXT,
    result       TEXT,
    error        TEXT,
    claimed      INTEGER NOT NULL DEFAULT 0,
    resend_of    TEXT,
    updated_at   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (
    execution_id TEXT PRIMARY KEY,
    status       TEXT NOT NULL,
    pruned_at    INTEGER NOT NULL
);
";

/// A delivery queue in a SQLite file.
#[derive(Clone)]
pub struct SqliteOutbox {
    conn: Arc<Mutex<Connection>>,
    process: Arc<dyn Process>,
    clock: Arc<dyn Clock>,
    me: OwnerIdentity,
    in_flight: Arc<Mutex<BTreeSet<String>>>,
    path: PathBuf,
    secrets: crate::secrets::Scrubber,
    /// The private copy a read-only queue reads, if it needed one.
    _copy: Option<Arc<tempfile::TempDir>>,
}

impl std::fmt::Debug for SqliteOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteOutbox").field("path", &self.path).finish_non_exhaustive()
    }
}

fn status_text(status: DeliveryStatus) -> String {
    status.to_string()
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<Delivery> {
    let status: String = row.get("status")?;
    let owner: Option<String> = row.get("owner")?;
    Ok(Delivery {
        execution_id: row.get("execution_id")?,
        status: DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown),
        payload: row.get("payload")?,
        owner: owner.and_then(|o| serde_json::from_str(&o).ok()),
        result: row.get("result")?,
        error: row.get("error")?,
        claimed: row.get::<_, i64>("claimed")? != 0,
        resend_of: row.get("resend_of")?,
        updated_at: row.get::<_, i64>("updated_at")? as u64,
        // SQLite's sessions carry no epochs: its queue keeps no session fences (`fence.rs`).
        session: None,
    })
}

impl SqliteOutbox {
    /// Opens (creating, mode 0600) the queue at `path`.
    pub fn open(
        path: impl AsRef<Path>,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = super::sqlite_store::open_durable(&path)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self::on(conn, None, path, process, clock, entropy))
    }

    /// A queue on an open connection; this process's identity gets a fresh instance suffix.
    fn on(
        conn: Connection,
        copy: Option<Arc<tempfile::TempDir>>,
        path: PathBuf,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Self {
        let mut me = process.identity();
        me.instance = format!("{}/outbox-{}", me.instance, entropy.hex_id(8));
        Self {
            conn: Arc::new(Mutex::new(conn)),
            process,
            clock,
            me,
            in_flight: Arc::default(),
            path,
            secrets: crate::secrets::Scrubber::new(),
            _copy: copy,
        }
    }

    /// Scrubs the secrets in `secrets` (by value) from every error and answer it stores, before
    /// the pattern redaction (FAILURE-SECRETS).
    pub fn with_scrubber(mut self, secrets: crate::secrets::Scrubber) -> Self {
        self.secrets = secrets;
        self
    }

    /// Opens an existing queue for reading only (`list`, evidence for a report): never creates
    /// the file or its tables, and refuses a SQLite file that is not a faultline queue.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let read_only = super::sqlite_store::open_read_only(&path, &["deliveries", "tombstones"])?;
        Ok(Self::on(read_only.conn, read_only.copy, path, process, clock, entropy))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn in_flight(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Runs `body` inside one `BEGIN IMMEDIATE` transaction (the write lock is taken first, so
    /// what `body` reads cannot change before its ops are written), then commits.
    fn transaction<T>(&self, body: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = body(&tx)?;
        tx.commit()?;
        Ok(value)
    }
}

fn row(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<Option<Delivery>> {
    Ok(tx.query_row("SELECT * FROM deliveries WHERE execution_id = ?1", [id], read_row).optional()?)
}

fn rows_with(tx: &rusqlite::Transaction<'_>, statuses: &[DeliveryStatus], limit: i64) -> Result<Vec<Delivery>> {
    let wanted: Vec<String> = statuses.iter().map(|s| status_text(*s)).collect();
    let mut statement =
        tx.prepare("SELECT * FROM deliveries WHERE status IN (SELECT value FROM json_each(?1)) ORDER BY seq LIMIT ?2")?;
    let list = serde_json::to_string(&wanted).expect("status names serialise");
    let rows = statement.query_map(params![list, limit], read_row)?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

fn found(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<Found> {
    let tomb: Option<String> =
        tx.query_row("SELECT status FROM tombstones WHERE execution_id = ?1", [id], |r| r.get(0)).optional()?;
    if let Some(status) = tomb {
        return Ok(Found::Tombstone(DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown)));
    }
    Ok(row(tx, id)?.map_or(Found::Nothing, |r| Found::Row(r.status)))
}

/// Carries out one op the machine decided: the row it leaves is written whole, so SQLite
/// holds exactly what the journal's replay would.
fn execute(tx: &rusqlite::Transaction<'_>, op: &Op) -> Result<()> {
    let before = row(tx, op.id())?;
    match machine::apply(before.as_ref(), op) {
        After::Row(r) => {
            let owner = r.owner.as_ref().map(|o| serde_json::to_string(o).expect("identities serialise"));
            tx.execute(
                "INSERT INTO deliveries (execution_id, status, payload, owner, result, error, claimed, resend_of, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(execution_id) DO UPDATE SET status = ?2, payload = ?3, owner = ?4, result = ?5,
                     error = ?6, claimed = ?7, resend_of = ?8, updated_at = ?9",
                params![
                    r.execution_id,
                    status_text(r.status),
                    r.payload,
                    owner,
                    r.result,
                    r.error,
                    r.claimed,
                    r.resend_of,
                    r.updated_at.min(i64::MAX as u64) as i64
                ],
            )?;
        }
        After::Tombstone(status) => {
            let Op::Prune { at, .. } = op else { unreachable!("only a prune leaves a tombstone") };
            tx.execute(
                "INSERT OR REPLACE INTO tombstones (execution_id, status, pruned_at) VALUES (?1, ?2, ?3)",
                params![op.id(), status_text(status), (*at).min(i64::MAX as u64) as i64],
            )?;
            tx.execute("DELETE FROM deliveries WHERE execution_id = ?1", [op.id()])?;
        }
    }
    Ok(())
}

impl Outbox for SqliteOutbox {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let now = self.now();
        self.transaction(|tx| {
            let (enqueued, op) = machine::enqueue(found(tx, execution_id)?, execution_id, payload, None, now)?;
            if let Some(op) = op {
                execute(tx, &op)?;
            }
            Ok(enqueued)
        })
    }

    fn claim_next(&self) -> Result<Option<Claim>> {
        let now = self.now();
        // The claim joins the in-flight set before its transaction commits, so a recovery of
        // this process that sees the row `delivering` also sees it in flight (issue 54).
        let mut joined = None;
        let claim = self.transaction(|tx| {
            let Some(next) = rows_with(tx, machine::claimable_statuses(), 1)?.into_iter().next() else {
                return Ok(None);
            };
            let (claim, op) = machine::claim(&next, &self.me, now);
            execute(tx, &op)?;
            self.in_flight().insert(claim.execution_id.clone());
            joined = Some(claim.execution_id.clone());
            Ok(Some(claim))
        });
        if let (Err(_), Some(id)) = (&claim, &joined) {
            self.in_flight().remove(id);
        }
        claim
    }

    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool> {
        let now = self.now();
        // The fence is read and the row written in one IMMEDIATE transaction: a recovery by
        // another process cannot slip between them.
        let finished = self.transaction(|tx| {
            let Some(op) =
                machine::finish(row(tx, execution_id)?.as_ref(), &self.me, outcome, None, &self.secrets, now)
            else {
                return Ok(false);
            };
            execute(tx, &op)?;
            Ok(true)
        });
        // Out of flight only once the row is no longer `delivering` (or the finish failed): a
        // recovery between the two would take a live claim for abandoned.
        self.in_flight().remove(execution_id);
        finished
    }

    fn get(&self, execution_id: &str) -> Result<Option<Delivery>> {
        let conn = self.lock();
        Ok(conn.query_row("SELECT * FROM deliveries WHERE execution_id = ?1", [execution_id], read_row).optional()?)
    }

    fn list(&self, status: Option<DeliveryStatus>) -> Result<Vec<Delivery>> {
        let conn = self.lock();
        let mut statement = conn.prepare("SELECT * FROM deliveries WHERE ?1 IS NULL OR status = ?1 ORDER BY seq")?;
        let rows = statement.query_map([status.map(status_text)], read_row)?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn recover_abandoned(&self) -> Result<Vec<String>> {
        let now = self.now();
        self.transaction(|tx| {
            let mut abandoned = Vec::new();
            let rows = rows_with(tx, &[DeliveryStatus::Delivering], i64::MAX)?;
            // Read after the rows, inside the transaction: a claim that committed is in it.
            let in_flight = self.in_flight().clone();
            for row in rows {
                if let Some(op) = machine::recover_abandoned(&row, &self.me, &in_flight, self.process.as_ref(), now) {
                    execute(tx, &op)?;
                    abandoned.push(row.execution_id);
                }
            }
            Ok(abandoned)
        })
    }

    fn abandon(&self, execution_id: &str) {
        self.in_flight().remove(execution_id);
    }

    fn settle(&self, execution_id: &str, cause: SettleCause, reason: &str) -> Result<Option<DeliveryStatus>> {
        let now = self.now();
        self.transaction(|tx| {
            let (status, op) = machine::settle(row(tx, execution_id)?.as_ref(), cause, reason, &self.secrets, now);
            if let Some(op) = op {
                execute(tx, &op)?;
            }
            Ok(status)
        })
    }

    fn prune(&self, before_ms: u64) -> Result<usize> {
        let now = self.now();
        let terminal = [DeliveryStatus::Delivered, DeliveryStatus::Failed, DeliveryStatus::Unknown];
        self.transaction(|tx| {
            let mut pruned = 0;
            for row in rows_with(tx, &terminal, i64::MAX)? {
                if let Some(op) = machine::prune(&row, before_ms, now) {
                    execute(tx, &op)?;
                    pruned += 1;
                }
            }
            Ok(pruned)
        })
    }

    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>> {
        let now = self.now();
        self.transaction(|tx| {
            let before = row(tx, execution_id)?;
            let taken = |id: &str| Ok(found(tx, id)? != Found::Nothing);
            let (new_id, ops) = machine::resolve(before.as_ref(), execution_id, resolution, taken, &self.secrets, now)?;
            for op in &ops {
                execute(tx, op)?;
            }
            Ok(new_id)
        })
    }
}
