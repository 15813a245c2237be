//! Ownership records for file stores: one writer per session, with a fencing token
//! (FAILURE-CRASH-CONTRACT-*, docs/internals/requirements.md).
//!
//! The record is a sequence of files `owner.<token>.json` in the session directory; the one
//! with the highest token is current. Acquiring token `n + 1` creates `owner.<n+1>.json` with
//! `create_new`, which is atomic on POSIX and in turmoil: of two racing writers exactly one
//! succeeds. Releasing writes a record with no owner (and the next token), so tokens never
//! repeat and a released session can be opened without takeover. A writer checks before each
//! append that no higher token exists: once taken over, its writes are rejected.
//!
//! **Invariant:** the records that exist form one contiguous run of tokens. They are created
//! only at the top (one above the highest) and removed only from the bottom, lowest first,
//! stopping at the first that cannot be removed. So a newer owner than token `t` exists exactly
//! when `owner.<t+1>.json` exists or `owner.<t>.json` is gone, and the per-append fence check
//! looks up those two names instead of listing the directory.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::seams::{Liveness, OpenOptions, OwnerIdentity, Process, Seams};
use crate::store::Takeover;
use crate::{Error, Result};

/// Largest owner record accepted, in bytes (an identity is ~150 bytes).
const OWNER_RECORD_BYTES_MAX: u64 = 4096;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnerRecord {
    token: u64,
    owner: Option<OwnerIdentity>,
}

/// The current owner record of a session directory.
#[derive(Debug, Clone)]
pub(crate) struct CurrentOwner {
    pub(crate) token: u64,
    /// `None` when released. An unreadable record (a crash before its fsync) reads as an
    /// owner that never acknowledged ownership: `Some(None)` below means "unknown, dead".
    pub(crate) owner: Option<Option<OwnerIdentity>>,
}

fn record_path(dir: &Path, token: u64) -> PathBuf {
    dir.join(format!("owner.{token}.json"))
}

fn token_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("owner.")?.strip_suffix(".json")?.parse().ok()
}

fn io_err(what: &str, path: &Path, e: io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), e)
}

/// Reads the current owner record (`None` if the session has never been owned).
pub(crate) fn current(seams: &Seams, dir: &Path) -> Result<Option<CurrentOwner>> {
    let names = seams.fs.read_dir(dir).map_err(|e| io_err("listing", dir, e))?;
    let Some(token) = names.iter().filter_map(|p| token_of(p)).max() else { return Ok(None) };
    let path = record_path(dir, token);
    let bytes = seams.fs.read(&path).map_err(|e| io_err("reading owner record", &path, e))?;
    let parsed = (bytes.len() as u64 <= OWNER_RECORD_BYTES_MAX)
        .then(|| serde_json::from_slice::<OwnerRecord>(&bytes).ok())
        .flatten()
        .filter(|r| r.token == token);
    let owner = match parsed {
        Some(record) => record.owner.map(Some),
        None => Some(None),
    };
    Ok(Some(CurrentOwner { token, owner }))
}

/// A printable description of a recorded owner.
pub(crate) fn describe(owner: &Option<OwnerIdentity>) -> String {
    match owner {
        Some(identity) => identity.to_string(),
        None => "an owner whose record was never completed (crashed while acquiring)".into(),
    }
}

/// The one-writer rule for a recorded holder (FAILURE-CRASH-CONTRACT-*): a live holder is refused; a
/// dead one is taken over only when the caller asked for it. Shared by every backend.
pub(crate) fn check_takeover(
    process: &dyn Process,
    id: &str,
    holder: Option<&OwnerIdentity>,
    describe_holder: String,
    takeover: Takeover,
) -> Result<()> {
    if holder.is_some_and(|o| process.liveness(o) == Liveness::Alive) {
        return Err(Error::SessionLocked { id: id.to_owned(), holder: describe_holder });
    }
    if takeover == Takeover::Never {
        return Err(Error::StaleOwner { id: id.to_owned(), holder: describe_holder });
    }
    Ok(())
}

/// Takes ownership of the session in `dir`, returning the new fencing token.
pub(crate) fn acquire(seams: &Seams, dir: &Path, id: &str, takeover: Takeover) -> Result<u64> {
    let current = current(seams, dir)?;
    let token = match &current {
        None => 1,
        Some(CurrentOwner { token, owner: None }) => token + 1,
        Some(CurrentOwner { token, owner: Some(owner) }) => {
            check_takeover(seams.process.as_ref(), id, owner.as_ref(), describe(owner), takeover)?;
            token + 1
        }
    };
    write_record(seams, dir, id, &OwnerRecord { token, owner: Some(seams.process.identity()) })?;
    remove_older_records(seams, dir, token);
    Ok(token)
}

/// Removes the records older than `token`, lowest first, stopping at the first that cannot
/// be removed (see the module's invariant: what is left stays one contiguous run). Best
/// effort: a leftover record is harmless, the highest token wins.
fn remove_older_records(seams: &Seams, dir: &Path, token: u64) {
    let Ok(names) = seams.fs.read_dir(dir) else { return };
    let mut older: Vec<u64> = names.iter().filter_map(|p| token_of(p)).filter(|&t| t < token).collect();
    older.sort_unstable();
    for stale in older {
        match seams.fs.remove_file(&record_path(dir, stale)) {
            // Gone already: another acquirer removing the same run, lowest first as well.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return,
            Ok(()) => {}
        }
    }
}

/// Releases ownership held with `token`.
pub(crate) fn release(seams: &Seams, dir: &Path, id: &str, token: u64) -> Result<()> {
    check_fence(seams, dir, id, token)?;
    write_record(seams, dir, id, &OwnerRecord { token: token + 1, owner: None })
}

/// Errors with [`Error::Fenced`] if a newer owner record than `token` exists.
///
/// Two lookups, not a listing (the module's invariant): this runs before every append.
pub(crate) fn check_fence(seams: &Seams, dir: &Path, id: &str, token: u64) -> Result<()> {
    let exists = |t: u64| {
        let path = record_path(dir, t);
        seams.fs.metadata(&path).map(|m| m.is_some()).map_err(|e| io_err("looking up owner record", &path, e))
    };
    if !exists(token + 1)? && exists(token)? {
        return Ok(());
    }
    // Fenced: the slow path lists the records to name the current owner's token.
    let names = seams.fs.read_dir(dir).map_err(|e| io_err("listing", dir, e))?;
    let newest = names.iter().filter_map(|p| token_of(p)).max().unwrap_or(0);
    if newest > token {
        return Err(Error::Fenced { id: id.to_owned(), token, current: newest });
    }
    // Our own record is gone and nobody newer exists: nobody removes a current record, so
    // something outside this protocol did. Ownership can no longer be shown; write nothing.
    let path = record_path(dir, token);
    Err(io_err(
        "checking ownership",
        &path,
        io::Error::new(io::ErrorKind::NotFound, "this writer's owner record is gone"),
    ))
}

fn write_record(seams: &Seams, dir: &Path, id: &str, record: &OwnerRecord) -> Result<()> {
    let path = record_path(dir, record.token);
    let bytes = serde_json::to_vec(record).expect("owner records always serialise");
    debug_assert!(bytes.len() as u64 <= OWNER_RECORD_BYTES_MAX);
    let mut file = match seams.fs.open(&path, OpenOptions::create_new_private()) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Lost a race with another writer acquiring the same token.
            let holder =
                current(seams, dir)?.and_then(|c| c.owner).map_or("another writer".to_owned(), |o| describe(&o));
            return Err(Error::SessionLocked { id: id.to_owned(), holder });
        }
        Err(e) => return Err(io_err("creating owner record", &path, e)),
    };
    file.write_all(&bytes).map_err(|e| io_err("writing owner record", &path, e))?;
    file.sync().map_err(|e| io_err("syncing owner record", &path, e))?;
    seams.fs.sync_dir(dir).map_err(|e| io_err("syncing directory", dir, e))
}
