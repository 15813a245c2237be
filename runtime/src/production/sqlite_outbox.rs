//! The SQLite delivery queue: WAL, `synchronous=FULL`, every transition one `BEGIN IMMEDIATE`
//! transaction, file mode 0600. Several processes may share it; a claim records the owner's
//! process id, start time and a random instance id.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use crate::outbox::{Claim, Delivery, DeliveryStatus, Enqueued, Finish, Outbox, Resolution};
use crate::seams::{Clock, EntropyExt, Liveness, OwnerIdentity, Process};
use crate::{Error, Result};

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
    secrets: crate::Scrubber,
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
    })
}

impl SqliteOutbox {
    /// Opens (creating, mode 0600) the queue at `path`.
    pub fn open(
        path: impl AsRef<Path>,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::Entropy,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = super::sqlite_store::open_durable(&path)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self::on(conn, path, process, clock, entropy))
    }

    /// A queue on an open connection; this process's identity gets a fresh instance suffix.
    fn on(
        conn: Connection,
        path: PathBuf,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::Entropy,
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
            secrets: crate::Scrubber::new(),
        }
    }

    /// Scrubs the secrets in `secrets` (by value) from every error and answer it stores, before
    /// the pattern redaction (FAILURE-SECRETS).
    pub fn with_scrubber(mut self, secrets: crate::Scrubber) -> Self {
        self.secrets = secrets;
        self
    }

    /// Opens an existing queue for reading only (`list`, evidence for a report): never creates
    /// the file or its tables, and refuses a SQLite file that is not a faultline queue.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::Entropy,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = super::sqlite_store::open_read_only(&path, &["deliveries", "tombstones"])?;
        Ok(Self::on(conn, path, process, clock, entropy))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn me_json(&self) -> String {
        serde_json::to_string(&self.me).expect("identities serialise")
    }

    fn now(&self) -> i64 {
        self.clock.now_ms() as i64
    }

    fn set_status(
        tx: &rusqlite::Transaction<'_>,
        id: &str,
        status: DeliveryStatus,
        result: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> Result<()> {
        let clear_payload = status.drops_payload();
        tx.execute(
            "UPDATE deliveries SET status = ?2, result = ?3, error = ?4, updated_at = ?5,
                 payload = CASE WHEN ?6 THEN NULL ELSE payload END
             WHERE execution_id = ?1",
            params![id, status_text(status), result, error, now, clear_payload],
        )?;
        Ok(())
    }
}

impl Outbox for SqliteOutbox {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued> {
        crate::outbox::check_enqueue(execution_id, payload)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let tomb: Option<String> = tx
            .query_row("SELECT status FROM tombstones WHERE execution_id = ?1", [execution_id], |r| r.get(0))
            .optional()?;
        if let Some(status) = tomb {
            return Ok(Enqueued::Tombstoned(DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown)));
        }
        let existing: Option<String> = tx
            .query_row("SELECT status FROM deliveries WHERE execution_id = ?1", [execution_id], |r| r.get(0))
            .optional()?;
        if let Some(status) = existing {
            return Ok(Enqueued::Existing(DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown)));
        }
        tx.execute(
            "INSERT INTO deliveries (execution_id, status, payload, updated_at) VALUES (?1, 'pending', ?2, ?3)",
            params![execution_id, payload, self.now()],
        )?;
        tx.commit()?;
        Ok(Enqueued::New)
    }

    fn claim_next(&self) -> Result<Option<Claim>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let next: Option<(String, Option<String>)> = tx
            .query_row(
                "SELECT execution_id, payload FROM deliveries WHERE status = 'pending' ORDER BY seq LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((id, payload)) = next else { return Ok(None) };
        tx.execute(
            "UPDATE deliveries SET status = 'delivering', owner = ?2, claimed = 1, updated_at = ?3 WHERE execution_id = ?1 AND status = 'pending'",
            params![id, self.me_json(), self.now()],
        )?;
        tx.commit()?;
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
        Ok(Some(Claim { execution_id: id, payload: payload.unwrap_or_default() }))
    }

    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(execution_id);
        let (status, result, error) = match outcome {
            Finish::Delivered(answer) => {
                (DeliveryStatus::Delivered, Some(crate::outbox::clip(&self.secrets.scrub(&answer))), None)
            }
            Finish::Failed(reason) => {
                (DeliveryStatus::Failed, None, Some(crate::outbox::clip(&self.secrets.scrub(&reason))))
            }
            Finish::Unknown(reason) => {
                (DeliveryStatus::Unknown, None, Some(crate::outbox::clip(&self.secrets.scrub(&reason))))
            }
        };
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The fence: only the owner of a row still being delivered may finish it.
        let changed = tx.execute(
            "UPDATE deliveries SET status = ?2, result = ?3, error = ?4, updated_at = ?5,
                 payload = CASE WHEN ?6 THEN NULL ELSE payload END
             WHERE execution_id = ?1 AND status = 'delivering' AND owner = ?7",
            params![
                execution_id,
                status_text(status),
                result,
                error,
                self.now(),
                status.drops_payload(),
                self.me_json()
            ],
        )?;
        tx.commit()?;
        Ok(changed == 1)
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
        let in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rows: Vec<(String, Option<String>)> = {
            let mut statement = tx.prepare("SELECT execution_id, owner FROM deliveries WHERE status = 'delivering'")?;
            let rows =
                statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<Vec<_>>>()?;
            rows
        };
        let mut abandoned = Vec::new();
        for (id, owner) in rows {
            let owner: Option<OwnerIdentity> = owner.and_then(|o| serde_json::from_str(&o).ok());
            let gone = match &owner {
                None => true,
                Some(owner) if owner.instance == self.me.instance => !in_flight.contains(&id),
                Some(owner) => self.process.liveness(owner) == Liveness::Dead,
            };
            if gone {
                Self::set_status(
                    &tx,
                    &id,
                    DeliveryStatus::Unknown,
                    None,
                    Some("exited during delivery; outcome unknown; not retried"),
                    self.now(),
                )?;
                abandoned.push(id);
            }
        }
        tx.commit()?;
        Ok(abandoned)
    }

    fn abandon(&self, execution_id: &str) {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(execution_id);
    }

    fn settle(&self, execution_id: &str, reason: &str) -> Result<Option<DeliveryStatus>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let status: Option<String> = tx
            .query_row("SELECT status FROM deliveries WHERE execution_id = ?1", [execution_id], |r| r.get(0))
            .optional()?;
        let Some(status) = status.and_then(|s| DeliveryStatus::parse(&s)) else { return Ok(None) };
        let next = match status {
            DeliveryStatus::Delivering => DeliveryStatus::Unknown,
            DeliveryStatus::Pending if reason.starts_with("cancel") => DeliveryStatus::Failed,
            other => return Ok(Some(other)),
        };
        let reason = crate::outbox::clip(&self.secrets.scrub(reason));
        Self::set_status(&tx, execution_id, next, None, Some(&reason), self.now())?;
        tx.commit()?;
        Ok(Some(next))
    }

    fn prune(&self, before_ms: u64) -> Result<usize> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = self.now();
        let before_ms = before_ms.min(i64::MAX as u64) as i64;
        tx.execute(
            "INSERT OR REPLACE INTO tombstones (execution_id, status, pruned_at)
             SELECT execution_id, status, ?2 FROM deliveries
             WHERE status IN ('delivered', 'failed', 'unknown') AND updated_at < ?1",
            params![before_ms, now],
        )?;
        let pruned = tx.execute(
            "DELETE FROM deliveries WHERE status IN ('delivered', 'failed', 'unknown') AND updated_at < ?1",
            [before_ms],
        )?;
        tx.commit()?;
        Ok(pruned)
    }

    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = tx
            .query_row("SELECT * FROM deliveries WHERE execution_id = ?1", [execution_id], read_row)
            .optional()?
            .ok_or_else(|| Error::SessionNotFound(format!("delivery {execution_id}")))?;
        if row.status != DeliveryStatus::Unknown {
            return Err(Error::BadBatch(format!(
                "delivery {execution_id} is {}; only unknown deliveries are resolved by hand",
                row.status
            )));
        }
        let now = self.now();
        let new_id = match resolution {
            Resolution::Delivered => {
                Self::set_status(
                    &tx,
                    execution_id,
                    DeliveryStatus::Delivered,
                    Some("confirmed by an operator"),
                    None,
                    now,
                )?;
                None
            }
            Resolution::Failed(reason) => {
                let reason = crate::outbox::clip(&self.secrets.scrub(&format!("operator: {reason}")));
                Self::set_status(&tx, execution_id, DeliveryStatus::Failed, None, Some(&reason), now)?;
                None
            }
            Resolution::Resend => {
                let payload = row
                    .payload
                    .clone()
                    .ok_or_else(|| Error::BadBatch(format!("delivery {execution_id} has no payload left to resend")))?;
                let mut n = 1;
                let new_id = loop {
                    let candidate = format!("{execution_id}#resend-{n}");
                    let taken: Option<i64> = tx
                        .query_row("SELECT 1 FROM deliveries WHERE execution_id = ?1", [&candidate], |r| r.get(0))
                        .optional()?;
                    if taken.is_none() {
                        break candidate;
                    }
                    n += 1;
                };
                Self::set_status(
                    &tx,
                    execution_id,
                    DeliveryStatus::Failed,
                    None,
                    Some(&format!("operator: resent as {new_id}")),
                    now,
                )?;
                tx.execute(
                    "INSERT INTO deliveries (execution_id, status, payload, resend_of, updated_at) VALUES (?1, 'pending', ?2, ?3, ?4)",
                    params![new_id, payload, execution_id, now],
                )?;
                Some(new_id)
            }
        };
        tx.commit()?;
        Ok(new_id)
    }
}
