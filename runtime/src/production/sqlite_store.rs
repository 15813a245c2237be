//! The SQLite backend (rusqlite, bundled): WAL, `synchronous=FULL`, one `BEGIN IMMEDIATE`
//! transaction per batch, ownership and fencing token in the `sessions` row.
//!
//! SQLite does its own file I/O through its VFS, so this backend lives with the production
//! seams: it is proven on real files and by real SIGKILL, not in the simulator.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::event::{Record, SessionHeader};
use crate::seams::{OwnerIdentity, Process};
use crate::store as repair;
use crate::store::{Inspection, Loaded, Opened, Repair, SessionId, SessionLog, Store, Takeover};
use crate::store::{LogMedium, SessionWriter};
use crate::{Error, Result};

/// How long a writer waits for another connection's transaction before giving up.
const BUSY_TIMEOUT_MS: u64 = 5_000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id       TEXT PRIMARY KEY,
    header   TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 0,
    token    INTEGER NOT NULL DEFAULT 0,
    owner    TEXT
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq        INTEGER NOT NULL,
    record     TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
";

/// Opens a SQLite file the way every faultline database is opened: created private (mode
/// 0600, so SQLite's -wal and -shm files inherit it), WAL, `synchronous=FULL` (a committed
/// transaction survives power loss), and a busy timeout for other processes' transactions.
pub(crate) fn open_durable(path: &Path) -> Result<Connection> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// A read-only connection, and the private copy it reads when the database could not be read
/// in place without writing beside it (kept as long as the connection).
pub(crate) struct ReadOnly {
    pub(crate) conn: Connection,
    pub(crate) copy: Option<Arc<tempfile::TempDir>>,
}

/// Opens an existing faultline database for reading only: the file is never created, no
/// schema is written, nothing is created beside it, and a database without every table in
/// `tables` (someone else's SQLite file, or not SQLite at all) is refused. What inspecting
/// commands use: an inspection never writes.
pub(crate) fn open_read_only(path: &Path, tables: &[&str]) -> Result<ReadOnly> {
    let not_ours = |reason: String| Error::NotFaultlineDatabase { path: path.display().to_string(), reason };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(not_ours("not a regular file".into())),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    }
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // A read-only connection to a WAL database creates `-wal` and `-shm` beside it when they
    // are missing, and cannot remove them: open it in place only when both exist.
    let beside = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let (wal, shm) = (beside("-wal").exists(), beside("-shm").exists());
    let (opened, copy) = match (wal, shm) {
        // A writer may be live: read through its WAL and share its wal-index.
        (true, true) => (Connection::open_with_flags(path, flags), None),
        // A -wal without its -shm (files copied by hand, or a crash that lost the index): no
        // writer is live (a live one always has both), and the WAL may hold commits the file
        // lacks. Reading them needs a wal-index, which SQLite would create beside the
        // database — so read a private copy of the two instead (costs one copy of the file).
        (true, false) => {
            let private = private_copy(path, &beside("-wal"))?;
            (Connection::open_with_flags(private.path().join(PRIVATE_COPY_NAME), flags), Some(Arc::new(private)))
        }
        // No WAL: the file alone is the whole database (a stray -shm indexes nothing). Opened
        // immutable, SQLite creates nothing beside it.
        (false, _) => {
            (Connection::open_with_flags(immutable_uri(path), flags | rusqlite::OpenFlags::SQLITE_OPEN_URI), None)
        }
    };
    let conn = opened.map_err(|e| not_ours(e.to_string()))?;
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    for table in tables {
        let found: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |r| r.get(0))
            .map_err(|e| not_ours(e.to_string()))?;
        if found == 0 {
            return Err(not_ours(format!("it has no {table:?} table")));
        }
    }
    Ok(ReadOnly { conn, copy })
}

/// The database's name inside a private copy.
const PRIVATE_COPY_NAME: &str = "copy.sqlite";

/// A private directory holding copies of the database and its WAL, removed when dropped.
fn private_copy(path: &Path, wal: &Path) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("faultline-inspect-")
        .tempdir()
        .map_err(|e| Error::io("creating a private copy to inspect", e))?;
    let db = dir.path().join(PRIVATE_COPY_NAME);
    let mut copy_wal = db.as_os_str().to_owned();
    copy_wal.push("-wal");
    for (from, to) in [(path, db.as_path()), (wal, Path::new(&copy_wal))] {
        std::fs::copy(from, to).map_err(|e| Error::io(format!("copying {} to inspect it", from.display()), e))?;
    }
    Ok(dir)
}

/// `file:PATH?immutable=1`, with the characters a URI path cannot hold escaped.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'?' | b'#' | b'%' | b' ' | 0x80.. => uri.push_str(&format!("%{byte:02X}")),
            _ => uri.push(char::from(*byte)),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Sessions in one SQLite database file.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    process: Arc<dyn Process>,
    path: PathBuf,
    evidence: Arc<dyn repair::OutcomeEvidence>,
    /// The private copy a read-only store reads, if it needed one.
    _copy: Option<Arc<tempfile::TempDir>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

struct Row {
    header: String,
    revision: u64,
    token: u64,
    owner: Option<OwnerIdentity>,
}

impl SqliteStore {
    /// Opens (creating, mode 0600) the database at `path`.
    pub fn open(path: impl AsRef<Path>, process: Arc<dyn Process>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let conn = open_durable(&path)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            process,
            path,
            evidence: Arc::new(repair::NoEvidence),
            _copy: None,
        })
    }

    /// Opens an existing session database for inspection only: never creates it, never
    /// writes to it, and refuses a SQLite file that is not a faultline session store.
    /// `load`, `open` and `create` on such a store fail with SQLite's read-only error.
    pub fn open_read_only(path: impl AsRef<Path>, process: Arc<dyn Process>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let ReadOnly { conn, copy } = open_read_only(&path, &["sessions", "events"])?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            process,
            path,
            evidence: Arc::new(repair::NoEvidence),
            _copy: copy,
        })
    }

    /// Crash repair consults `evidence` (the delivery queue) before calling a started call's
    /// outcome unknown.
    pub fn with_evidence(mut self, evidence: Arc<dyn repair::OutcomeEvidence>) -> Self {
        self.evidence = evidence;
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many times the session's stored log was rewritten by repair.
    pub fn revision(&self, id: &SessionId) -> Result<u64> {
        let conn = self.lock();
        Ok(read_row(&conn, id)?.revision)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire(&self, id: &SessionId, row: &Row, takeover: Takeover) -> Result<u64> {
        if let Some(holder) = &row.owner {
            crate::store::check_takeover(
                self.process.as_ref(),
                id.as_str(),
                Some(holder),
                holder.to_string(),
                takeover,
            )?;
        }
        Ok(row.token + 1)
    }
}

fn read_row(conn: &Connection, id: &SessionId) -> Result<Row> {
    let row = conn
        .query_row("SELECT header, revision, token, owner FROM sessions WHERE id = ?1", [id.as_str()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, Option<String>>(3)?))
        })
        .optional()?
        .ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
    let owner = row.3.map(|text| serde_json::from_str(&text)).transpose().map_err(|e| Error::Corrupt {
        id: id.to_string(),
        offset: 0,
        reason: format!("owner column is not an identity: {e}"),
    })?;
    Ok(Row { header: row.0, revision: row.1 as u64, token: row.2 as u64, owner })
}

/// Reads and checks a session's records, returning the inspection (the rules every database
/// backend shares, in `store::rows`).
fn inspect_rows(
    conn: &Connection,
    id: &SessionId,
    row: &Row,
    evidence: &dyn repair::OutcomeEvidence,
) -> Result<Inspection> {
    let mut statement = conn.prepare_cached("SELECT seq, record FROM events WHERE session_id = ?1 ORDER BY seq")?;
    let rows = statement.query_map([id.as_str()], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    crate::store::inspect_rows(id.as_str(), &row.header, row.owner.clone(), rows, evidence)
}

fn insert_records(tx: &rusqlite::Transaction<'_>, id: &SessionId, records: &[Record]) -> Result<()> {
    // Encoded and checked first: an oversized record writes nothing of the batch.
    let rows = crate::store::encode_rows(records)?;
    let mut insert = tx.prepare_cached("INSERT INTO events (session_id, seq, record) VALUES (?1, ?2, ?3)")?;
    for (seq, line) in rows {
        insert.execute(params![id.as_str(), seq, line])?;
    }
    Ok(())
}

fn identity_json(identity: &OwnerIdentity) -> String {
    serde_json::to_string(identity).expect("identities always serialise")
}

impl Store for SqliteStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let header = SessionHeader::new(id.as_str(), created_at).encode();
        let me = identity_json(&self.process.identity());
        let inserted = tx.execute(
            "INSERT INTO sessions (id, header, revision, token, owner) VALUES (?1, ?2, 0, 1, ?3) ON CONFLICT(id) DO NOTHING",
            params![id.as_str(), header, me],
        )?;
        if inserted == 0 {
            return Err(Error::SessionExists(id.to_string()));
        }
        tx.commit()?;
        SessionWriter::boxed(id, 1, &[], Box::new(SqliteMedium { store: self.clone() }))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row = read_row(&tx, id)?;
        let token = self.acquire(id, &row, takeover)?;
        let inspection = inspect_rows(&tx, id, &row, self.evidence.as_ref())?;
        inspection.refuse_unusable(id.as_str())?;
        let header = inspection.header.clone().expect("clean inspections have a header");
        let mut records = inspection.records.clone();
        let repair = if inspection.closers.is_empty() {
            None
        } else {
            // Repair is one transaction: the closers and the revision bump land together.
            insert_records(&tx, id, &inspection.closers)?;
            tx.execute("UPDATE sessions SET revision = revision + 1 WHERE id = ?1", [id.as_str()])?;
            records.extend(inspection.closers.iter().cloned());
            Some(Repair { closers: inspection.closers.clone(), ..Repair::default() })
        };
        tx.execute(
            "UPDATE sessions SET token = ?2, owner = ?3 WHERE id = ?1",
            params![id.as_str(), token as i64, identity_json(&self.process.identity())],
        )?;
        tx.commit()?;
        drop(conn);
        if let Some(repair) = &repair {
            for execution in repair::never_claimed(id.as_str(), &repair.closers) {
                self.evidence.cancel_never_claimed(&execution);
            }
        }
        let log = SessionWriter::boxed(id, token, &records, Box::new(SqliteMedium { store: self.clone() }))?;
        Ok(Opened { log, loaded: Loaded { header, records, repair } })
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        let mut conn = self.lock();
        // A read transaction gives one consistent snapshot of the row and its events.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let row = read_row(&tx, id)?;
        inspect_rows(&tx, id, &row, self.evidence.as_ref())
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        crate::store::load_through_open(self, self.process.as_ref(), id, self.inspect(id)?)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        let conn = self.lock();
        let mut statement = conn.prepare("SELECT id FROM sessions ORDER BY id")?;
        let ids = statement.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(ids.into_iter().filter_map(|id| SessionId::new(id).ok()).collect())
    }
}

/// The medium of one SQLite session: fence and insert are one IMMEDIATE transaction, so a
/// takeover cannot slip between them.
#[derive(Debug)]
struct SqliteMedium {
    store: SqliteStore,
}

fn check_fence(tx: &rusqlite::Transaction<'_>, id: &SessionId, token: u64) -> Result<()> {
    let current: i64 = tx.query_row("SELECT token FROM sessions WHERE id = ?1", [id.as_str()], |r| r.get(0))?;
    if current as u64 != token {
        return Err(Error::Fenced { id: id.to_string(), token, current: current as u64 });
    }
    Ok(())
}

impl LogMedium for SqliteMedium {
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()> {
        let mut conn = self.store.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_fence(&tx, id, token)?;
        insert_records(&tx, id, batch)?;
        tx.commit()?;
        Ok(())
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        let mut conn = self.store.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_fence(&tx, id, token)?;
        tx.execute("UPDATE sessions SET token = token + 1, owner = NULL WHERE id = ?1", [id.as_str()])?;
        tx.commit()?;
        Ok(())
    }
}
