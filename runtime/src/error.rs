//! The runtime's error type.

use crate::event::{HeaderError, LogViolation, RecordError};
use crate::store::InvalidSessionId;

/// Everything that can go wrong in the runtime, one variant per kind of cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation through a seam failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (never includes a credential).
        context: String,
        /// The OS or simulated error.
        source: std::io::Error,
    },
    /// A record could not be decoded.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A session header could not be decoded or is unsupported.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// A log invariant is broken.
    #[error("log invariant violated: {0}")]
    Invariant(#[from] LogViolation),
    /// A session id failed validation.
    #[error(transparent)]
    InvalidSessionId(#[from] InvalidSessionId),
    /// `create` of a session that already exists.
    #[error("session {0} already exists")]
    SessionExists(String),
    /// No such session (or session file).
    #[error("session {0} not found")]
    SessionNotFound(String),
    /// Another live writer holds the session.
    #[error("session {id} is held by a live writer: {holder}")]
    SessionLocked {
        /// The session.
        id: String,
        /// Who holds it.
        holder: String,
    },
    /// The recorded owner is gone, and the caller did not ask to take over.
    #[error("session {id} is still recorded as owned by {holder}, which is no longer running; open it with takeover to continue")]
    StaleOwner {
        /// The session.
        id: String,
        /// The dead owner.
        holder: String,
    },
    /// This writer was taken over; its writes are rejected so it cannot roll back newer progress.
    #[error("session {id}: writer with fencing token {token} was superseded by token {current}; write rejected")]
    Fenced {
        /// The session.
        id: String,
        /// This writer's token.
        token: u64,
        /// The current token.
        current: u64,
    },
    /// The stored log cannot be explained by a crash; nothing was changed.
    #[error("session {id} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The session.
        id: String,
        /// Byte offset of the problem.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The delivery queue's journal holds a line no crash or power loss explains; nothing was
    /// changed.
    #[error("delivery journal {path} is corrupt at byte {offset}: {reason}; nothing was changed")]
    JournalCorrupt {
        /// The journal file.
        path: String,
        /// Byte offset of the damaged line.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The stored log has a format version this build does not read.
    #[error("session {id} is unsupported: {reason}")]
    Unsupported {
        /// The session.
        id: String,
        /// Why.
        reason: String,
    },
    /// A live writer has a turn open; loading would "repair" a turn that is still running.
    #[error("session {id} has a turn open by its live writer {holder}; refusing to repair a running turn")]
    SessionLive {
        /// The session.
        id: String,
        /// The live writer.
        holder: String,
    },
    /// A record whose encoded line exceeds the reader's limit; nothing of its batch was written.
    #[error("record seq {seq} is {bytes} bytes encoded, above the {max}-byte record limit; nothing was written")]
    RecordTooLarge {
        /// The record's seq.
        seq: u64,
        /// Its encoded line length.
        bytes: u64,
        /// The record limit it was held to (`store::RECORD_LINE_BYTES_MAX`).
        max: u64,
    },
    /// A batch that does not continue the log (wrong seq or empty).
    #[error("batch refused: {0}")]
    BadBatch(String),
    /// A durable append failed and was rolled back (or the rollback failed too).
    #[error("append failed: {write}{}", rollback.as_ref().map(|r| format!("; rollback to the previous length also failed: {r}")).unwrap_or_default())]
    AppendFailed {
        /// The write or fsync error.
        write: std::io::Error,
        /// The truncate-back error, if the rollback failed too.
        rollback: Option<std::io::Error>,
    },
    /// A previous append's rollback failed, so the file's tail is unknown; reopen the session
    /// (which scans and repairs) before writing again.
    #[error("{0}: writer disabled after a failed rollback; reopen it to repair it")]
    Poisoned(String),
    /// Persisting accepted events failed (write-behind); the events are still queued.
    #[error("persisting the session failed: {0}")]
    Persist(std::sync::Arc<Error>),
    /// The session's write-behind was closed.
    #[error("session writer is closed")]
    Closed,

    /// A decision on an approval was refused: the call is not waiting (already decided, run,
    /// cancelled or expired), the decider may not decide it, or the input is malformed.
    /// Nothing was written.
    #[error("approval refused: {0}")]
    ApprovalRefused(String),
    /// The session has a turn paused for approval: decide its calls and continue it (or cancel
    /// it) before new input.
    #[error("session {id} waits for approval of {calls}: decide and continue it first")]
    AwaitingApproval {
        /// The session.
        id: String,
        /// The calls waiting, comma-separated.
        calls: String,
    },
    /// An MCP server could not be reached, initialised or listed.
    #[error("MCP server {server}: {message}")]
    Mcp {
        /// The server's name.
        server: String,
        /// What went wrong (scrubbed of held secrets by whoever prints it).
        message: String,
    },
    /// A file opened for inspection is not a faultline database; nothing was written to it.
    #[error("{path} is not a faultline database ({reason}); nothing was written to it")]
    NotFaultlineDatabase {
        /// The file.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// The delivery queue refused a request.
    #[error(transparent)]
    Outbox(#[from] crate::outbox::OutboxError),
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(SqliteError),
    /// The database (PostgreSQL, or the simulator's shared store) reported an error, or the
    /// connection to it failed.
    #[error("database: {0}")]
    Database(DatabaseError),
}

/// What PostgreSQL (or the connection to it) said: its message, its SQLSTATE when the server
/// answered, and whether the connection was lost, which a caller may retry on a new one. The
/// database's address and credentials are never part of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DatabaseError {
    /// What went wrong.
    pub message: String,
    /// The server's SQLSTATE, when the server answered.
    pub code: Option<String>,
    /// The connection failed or was cut: the statement's outcome may be unknown.
    pub connection_lost: bool,
}

/// What SQLite said, as text and its extended result code: the runtime's errors never carry a
/// dependency's types, so an embedder's code does not break when the driver changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SqliteError {
    /// SQLite's message.
    pub message: String,
    /// SQLite's extended result code, when the error came from SQLite itself.
    pub code: Option<i32>,
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        let code = match &e {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
            _ => None,
        };
        Error::Sqlite(SqliteError { message: e.to_string(), code })
    }
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// The storage error underneath, by its conventional name (`ENOSPC`, `EIO`,
    /// `SQLITE_FULL`, ...), when this error comes from a disk or a database: what an operator
    /// acts on (free space, check the device), in a word a script can match.
    pub fn storage_cause(&self) -> Option<String> {
        match self {
            Error::Io { source, .. } => Some(io_cause(source)),
            Error::AppendFailed { write, .. } => Some(io_cause(write)),
            Error::Persist(inner) => inner.storage_cause(),
            Error::Sqlite(SqliteError { code: Some(code), .. }) => Some(sqlite_cause(*code)),
            Error::Database(DatabaseError { connection_lost: true, .. }) => Some("DATABASE_UNREACHABLE".into()),
            Error::Database(DatabaseError { code: Some(code), .. }) => Some(format!("SQLSTATE {code}")),
            _ => None,
        }
    }

    /// This error as the failure of a turn whose records could not be made durable
    /// (FAILURE-OUTCOME-DURABLE): code `PERSIST`, the storage error first, then `what` was
    /// being made durable and the whole error.
    pub fn persist_failure(&self, what: &str) -> crate::event::Failure {
        let cause = self.storage_cause().map(|c| format!("{c}: ")).unwrap_or_default();
        crate::event::Failure::new(crate::event::ErrorCode::Persist, format!("{cause}{what}: {self}"))
    }
}

/// The conventional name of an I/O error: its kind when the kind names a storage condition,
/// else its OS error number's name, else `EIO` (an error the filesystem did not classify).
fn io_cause(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::StorageFull => return "ENOSPC".into(),
        ErrorKind::QuotaExceeded => return "EDQUOT".into(),
        ErrorKind::ReadOnlyFilesystem => return "EROFS".into(),
        ErrorKind::FileTooLarge => return "EFBIG".into(),
        ErrorKind::PermissionDenied => return "EACCES".into(),
        _ => {}
    }
    match error.raw_os_error() {
        Some(5) | None => "EIO".into(),
        Some(n) => format!("errno {n}"),
    }
}

/// The name of SQLite's primary result code within an extended one.
fn sqlite_cause(extended: i32) -> String {
    let name = match extended & 0xff {
        5 => "SQLITE_BUSY",
        8 => "SQLITE_READONLY",
        10 => "SQLITE_IOERR",
        11 => "SQLITE_CORRUPT",
        13 => "SQLITE_FULL",
        14 => "SQLITE_CANTOPEN",
        _ => return format!("SQLITE error {extended}"),
    };
    name.into()
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
