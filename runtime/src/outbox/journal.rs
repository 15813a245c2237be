//! The journal backend: an append-only JSONL file of transitions on the `Fs` seam, so the
//! simulator can crash it at any operation. Every transition is one line, written and fsynced
//! before it is acknowledged; opening replays the lines (a torn final line is dropped, any
//! other undecodable line is corruption). One process owns a journal; its owner identity is
//! the Process seam's (a host incarnation in the simulator).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::machine::{self, After, Found, Op};
use super::{
    Claim, Delivery, DeliveryStatus, Enqueued, Finish, Outbox, Resolution, SessionEpochs, SessionFence, SettleCause,
};
use crate::seams::{EntropyExt, FsFile, OpenOptions, OwnerIdentity, Seams};
use crate::store::{append_durably, create_dir_all_durable, materialise, truncate_durably};
use crate::{Error, Result};

#[derive(Debug, Default)]
struct State {
    rows: BTreeMap<String, Delivery>,
    /// Enqueue order, for "oldest first".
    order: BTreeMap<u64, String>,
    next_order: u64,
    tombstones: BTreeMap<String, DeliveryStatus>,
}

impl State {
    fn apply(&mut self, op: &Op) {
        let id = op.id();
        match machine::apply(self.rows.get(id), op) {
            After::Row(row) => {
                if !self.rows.contains_key(id) {
                    self.order.insert(self.next_order, id.to_owned());
                    self.next_order += 1;
                }
                self.rows.insert(id.to_owned(), *row);
            }
            After::Tombstone(status) => {
                self.rows.remove(id);
                self.tombstones.insert(id.to_owned(), status);
                self.order.retain(|_, v| v != id);
            }
        }
    }

    fn found(&self, id: &str) -> Found {
        match (self.tombstones.get(id), self.rows.get(id)) {
            (Some(status), _) => Found::Tombstone(*status),
            (None, Some(row)) => Found::Row(row.status),
            (None, None) => Found::Nothing,
        }
    }
}

struct Inner {
    state: State,
    file: Box<dyn FsFile>,
    len: u64,
    in_flight: BTreeSet<String>,
    /// A failed append whose truncate-back failed too left the tail unknown: no more
    /// transitions until the journal is reopened (and replayed), as a session writer does.
    poisoned: bool,
}

/// A delivery queue journaled to one file.
#[derive(Clone)]
pub struct JournalOutbox {
    seams: Seams,
    path: PathBuf,
    me: OwnerIdentity,
    inner: Arc<Mutex<Inner>>,
    /// Where sessions' epochs are read (`None`: no session fences are kept).
    epochs: Option<Arc<dyn SessionEpochs>>,
}

impl std::fmt::Debug for JournalOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalOutbox").field("path", &self.path).finish_non_exhaustive()
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), e)
}

impl JournalOutbox {
    /// Opens (creating durably if missing) the journal at `path` and replays it.
    pub fn open(seams: Seams, path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("/"));
        if seams.fs.metadata(&path).map_err(|e| io_err("inspecting", &path, e))?.is_none() {
            create_dir_all_durable(&seams, dir)?;
            match materialise(&seams, &path, b"") {
                Ok(()) => {}
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let mut file = seams.fs.open(&path, OpenOptions::append()).map_err(|e| io_err("opening", &path, e))?;
        let bytes = file.read_all().map_err(|e| io_err("reading", &path, e))?;
        let mut state = State::default();
        let mut committed = 0usize;
        while let Some(end) = bytes[committed..].iter().position(|&b| b == b'\n').map(|i| committed + i) {
            let op: Op = match serde_json::from_slice(&bytes[committed..end]) {
                Ok(op) => op,
                // One line is one write unit: a power loss inside the last one leaves zero
                // bytes in it, and it is torn like an unterminated line (FAILURE-JSONL-PREFIX).
                Err(_) if is_hole_in_last_line(&bytes[committed..]) => break,
                Err(e) => {
                    return Err(Error::JournalCorrupt {
                        path: path.display().to_string(),
                        offset: committed as u64,
                        reason: format!("journal line: {e}"),
                    })
                }
            };
            if let Err(reason) = fits(&state, &op) {
                return Err(Error::JournalCorrupt {
                    path: path.display().to_string(),
                    offset: committed as u64,
                    reason,
                });
            }
            state.apply(&op);
            committed = end + 1;
        }
        if committed < bytes.len() {
            // A torn final line: the transition it held was never acknowledged.
            truncate_durably(file.as_mut(), committed as u64)
                .map_err(|e| io_err("truncating torn tail of", &path, e))?;
        }
        let mut me = seams.process.identity();
        me.instance = format!("{}/outbox-{}", me.instance, seams.entropy.hex_id(8));
        let inner = Inner { state, file, len: committed as u64, in_flight: BTreeSet::new(), poisoned: false };
        Ok(Self { seams, path, me, inner: Arc::new(Mutex::new(inner)), epochs: None })
    }

    /// Keeps session fences, reading sessions' epochs from `epochs` under this journal's lock
    /// (one thread, as in the simulator: nothing moves an epoch between the read and the
    /// write).
    pub fn with_epochs(mut self, epochs: Arc<dyn SessionEpochs>) -> Self {
        self.epochs = Some(epochs);
        self
    }

    /// The same journal used by another process (the simulator's fleet: one queue, as a
    /// database's, drained by worker hosts of their own identities and clocks).
    pub fn as_process(&self, seams: Seams) -> Self {
        let mut me = seams.process.identity();
        me.instance = format!("{}/outbox-{}", me.instance, seams.entropy.hex_id(8));
        Self { seams, path: self.path.clone(), me, inner: self.inner.clone(), epochs: self.epochs.clone() }
    }

    /// The current epoch of `row`'s session (`None` for a row of no session).
    fn current_epoch(&self, row: &Delivery) -> Option<u64> {
        let fence = row.session.as_ref()?;
        self.epochs.as_ref()?.epoch(&fence.session)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.seams.clock.now_ms()
    }

    /// Makes `op` durable, then applies it.
    fn commit(&self, inner: &mut Inner, op: Op) -> Result<()> {
        if inner.poisoned {
            return Err(Error::Poisoned(format!("delivery journal {}", self.path.display())));
        }
        let mut line = serde_json::to_vec(&op).expect("journal ops serialise");
        line.push(b'\n');
        let written = append_durably(
            inner.file.as_mut(),
            inner.len,
            &crate::store::Encoded { bytes: &line, unit_ends: &[line.len()] },
        );
        if let Err(e) = written {
            inner.poisoned = matches!(&e, Error::AppendFailed { rollback: Some(_), .. });
            return Err(e);
        }
        inner.len += line.len() as u64;
        inner.state.apply(&op);
        Ok(())
    }
}

impl Outbox for JournalOutbox {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let mut inner = self.lock();
        let (enqueued, op) =
            machine::enqueue(inner.state.found(execution_id), execution_id, payload, None, self.now())?;
        if let Some(op) = op {
            self.commit(&mut inner, op)?;
        }
        Ok(enqueued)
    }

    fn enqueue_fenced(&self, fence: &SessionFence, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let Some(epochs) = &self.epochs else { return self.enqueue(execution_id, payload) };
        let mut inner = self.lock();
        let fenced = Some((fence, epochs.epoch(&fence.session)));
        let (enqueued, op) =
            machine::enqueue(inner.state.found(execution_id), execution_id, payload, fenced, self.now())?;
        if let Some(op) = op {
            self.commit(&mut inner, op)?;
        }
        Ok(enqueued)
    }

    fn claim_next(&self) -> Result<Option<Claim>> {
        let mut inner = self.lock();
        let next = inner
            .state
            .order
            .values()
            .filter_map(|id| inner.state.rows.get(id))
            .find(|row| machine::claimable(row, self.current_epoch(row)));
        let Some((claim, op)) = next.map(|row| machine::claim(row, &self.me, self.now())) else { return Ok(None) };
        self.commit(&mut inner, op)?;
        inner.in_flight.insert(claim.execution_id.clone());
        Ok(Some(claim))
    }

    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool> {
        let mut inner = self.lock();
        inner.in_flight.remove(execution_id);
        let row = inner.state.rows.get(execution_id);
        let current = row.and_then(|row| self.current_epoch(row));
        let Some(op) = machine::finish(row, &self.me, outcome, current, &self.seams.secrets, self.now()) else {
            return Ok(false);
        };
        self.commit(&mut inner, op)?;
        // The receipt is durable in the queue; the caller (and the session) has not heard yet.
        if self.seams.probe.hit(crate::seams::CrashPoint::DuringOutboxFinish) {
            return Err(Error::io(
                "finishing a delivery",
                std::io::Error::other("host crashed (simulated) during outbox finish"),
            ));
        }
        Ok(true)
    }

    fn get(&self, execution_id: &str) -> Result<Option<Delivery>> {
        Ok(self.lock().state.rows.get(execution_id).cloned())
    }

    fn list(&self, status: Option<DeliveryStatus>) -> Result<Vec<Delivery>> {
        let inner = self.lock();
        Ok(inner
            .state
            .order
            .values()
            .filter_map(|id| inner.state.rows.get(id))
            .filter(|r| status.is_none_or(|s| r.status == s))
            .cloned()
            .collect())
    }

    fn recover_abandoned(&self) -> Result<Vec<String>> {
        let mut inner = self.lock();
        let now = self.now();
        let ops: Vec<Op> = inner
            .state
            .rows
            .values()
            .filter_map(|row| {
                machine::recover_abandoned(row, &self.me, &inner.in_flight, self.seams.process.as_ref(), now)
            })
            .collect();
        let mut abandoned = Vec::with_capacity(ops.len());
        for op in ops {
            abandoned.push(op.id().to_owned());
            self.commit(&mut inner, op)?;
        }
        Ok(abandoned)
    }

    fn abandon(&self, execution_id: &str) {
        self.lock().in_flight.remove(execution_id);
    }

    fn settle(&self, execution_id: &str, cause: SettleCause, reason: &str) -> Result<Option<DeliveryStatus>> {
        let mut inner = self.lock();
        let row = inner.state.rows.get(execution_id);
        let (status, op) = machine::settle(row, cause, reason, &self.seams.secrets, self.now());
        if let Some(op) = op {
            self.commit(&mut inner, op)?;
        }
        Ok(status)
    }

    fn prune(&self, before_ms: u64) -> Result<usize> {
        let mut inner = self.lock();
        let now = self.now();
        let ops: Vec<Op> = inner.state.rows.values().filter_map(|row| machine::prune(row, before_ms, now)).collect();
        let pruned = ops.len();
        for op in ops {
            self.commit(&mut inner, op)?;
        }
        Ok(pruned)
    }

    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>> {
        let mut inner = self.lock();
        let state = &inner.state;
        let taken = |id: &str| Ok(state.found(id) != Found::Nothing);
        let row = state.rows.get(execution_id);
        let (new_id, ops) = machine::resolve(row, execution_id, resolution, taken, &self.seams.secrets, self.now())?;
        for op in ops {
            self.commit(&mut inner, op)?;
        }
        Ok(new_id)
    }
}

/// Whether a replayed op fits the rows it finds (a line that decodes but does not is not a
/// transition this code ever wrote: corruption, reported instead of applied).
/// A live row is never enqueued twice; a tombstoned id may be (a resend chosen by code that
/// checked live rows only), and the tombstone keeps blocking later enqueues. A claim, finish
/// or prune must be one of the queue's edges from the row's status
/// ([`machine::transition_fits`]): a line that marks a never-claimed row delivered is not
/// something this code wrote, and applying it would report an effect that never happened.
fn fits(state: &State, op: &Op) -> std::result::Result<(), String> {
    if machine::transition_fits(state.rows.get(op.id()), op) {
        Ok(())
    } else {
        Err(format!("journal op {} does not fit delivery {}", op.name(), op.id()))
    }
}

/// Whether `rest` (from a line that does not decode to the end of the journal) is one line
/// holding zero bytes: the trace of a power loss inside the last write.
fn is_hole_in_last_line(rest: &[u8]) -> bool {
    let Some(end) = rest.iter().position(|&b| b == b'\n') else { return true };
    rest[..end].contains(&0) && end + 1 == rest.len() && !crate::testing::bugs::planted("holes-are-corrupt")
}
