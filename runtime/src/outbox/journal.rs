//! The journal backend: an append-only JSONL file of transitions on the `Fs` seam, so the
//! simulator can crash it at any operation. Every transition is one line, written and fsynced
//! before it is acknowledged; opening replays the lines (a torn final line is dropped, any
//! other undecodable line is corruption). One process owns a journal; its owner identity is
//! the Process seam's (a host incarnation in the simulator).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::{check_enqueue, clip, Claim, Delivery, DeliveryStatus, Enqueued, Finish, Outbox, Resolution};
use crate::seams::{EntropyExt, FsFile, Liveness, OpenOptions, OwnerIdentity, Seams};
use crate::store::{append_durably, create_dir_all_durable, materialise, truncate_durably};
use crate::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Op {
    Enqueue {
        id: String,
        payload: String,
        at: u64,
        #[serde(default)]
        resend_of: Option<String>,
    },
    Claim {
        id: String,
        owner: OwnerIdentity,
        at: u64,
    },
    Finish {
        id: String,
        status: DeliveryStatus,
        #[serde(default)]
        result: Option<String>,
        #[serde(default)]
        error: Option<String>,
        at: u64,
    },
    Prune {
        id: String,
        at: u64,
    },
}

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
        match op {
            Op::Enqueue { id, payload, at, resend_of } => {
                self.order.insert(self.next_order, id.clone());
                self.next_order += 1;
                self.rows.insert(
                    id.clone(),
                    Delivery {
                        execution_id: id.clone(),
                        status: DeliveryStatus::Pending,
                        payload: Some(payload.clone()),
                        owner: None,
                        result: None,
                        error: None,
                        claimed: false,
                        resend_of: resend_of.clone(),
                        updated_at: *at,
                    },
                );
            }
            Op::Claim { id, owner, at } => {
                if let Some(row) = self.rows.get_mut(id) {
                    row.status = DeliveryStatus::Delivering;
                    row.owner = Some(owner.clone());
                    row.claimed = true;
                    row.updated_at = *at;
                }
            }
            Op::Finish { id, status, result, error, at } => {
                if let Some(row) = self.rows.get_mut(id) {
                    row.status = *status;
                    row.result.clone_from(result);
                    row.error.clone_from(error);
                    row.updated_at = *at;
                    if status.drops_payload() {
                        row.payload = None;
                    }
                }
            }
            Op::Prune { id, .. } => {
                if let Some(row) = self.rows.remove(id) {
                    self.tombstones.insert(id.clone(), row.status);
                    self.order.retain(|_, v| v != id);
                }
            }
        }
    }
}

struct Inner {
    state: State,
    file: Box<dyn FsFile>,
    len: u64,
    in_flight: BTreeSet<String>,
}

/// A delivery queue journaled to one file.
#[derive(Clone)]
pub struct JournalOutbox {
    seams: Seams,
    path: PathBuf,
    me: OwnerIdentity,
    inner: Arc<Mutex<Inner>>,
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
        let inner = Inner { state, file, len: committed as u64, in_flight: BTreeSet::new() };
        Ok(Self { seams, path, me, inner: Arc::new(Mutex::new(inner)) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.seams.clock.now_ms()
    }

    /// Makes `op` durable, then applies it.
    fn commit(&self, inner: &mut Inner, op: Op) -> Result<()> {
        let mut line = serde_json::to_vec(&op).expect("journal ops serialise");
        line.push(b'\n');
        append_durably(
            inner.file.as_mut(),
            inner.len,
            &crate::store::Encoded { bytes: &line, unit_ends: &[line.len()] },
        )?;
        inner.len += line.len() as u64;
        inner.state.apply(&op);
        Ok(())
    }

    fn is_abandoned(&self, inner: &Inner, row: &Delivery) -> bool {
        let Some(owner) = &row.owner else { return false };
        if owner.instance == self.me.instance {
            return !inner.in_flight.contains(&row.execution_id);
        }
        self.seams.process.liveness(owner) == Liveness::Dead
    }
}

impl Outbox for JournalOutbox {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued> {
        check_enqueue(execution_id, payload)?;
        let mut inner = self.lock();
        if let Some(status) = inner.state.tombstones.get(execution_id) {
            return Ok(Enqueued::Tombstoned(*status));
        }
        if let Some(row) = inner.state.rows.get(execution_id) {
            return Ok(Enqueued::Existing(row.status));
        }
        let op =
            Op::Enqueue { id: execution_id.to_owned(), payload: payload.to_owned(), at: self.now(), resend_of: None };
        self.commit(&mut inner, op)?;
        Ok(Enqueued::New)
    }

    fn claim_next(&self) -> Result<Option<Claim>> {
        let mut inner = self.lock();
        let claimable = |status: DeliveryStatus| {
            status == DeliveryStatus::Pending
                || (status == DeliveryStatus::Unknown && crate::bugs::planted("unknown-claimable"))
        };
        let next = inner
            .state
            .order
            .values()
            .find(|id| inner.state.rows.get(*id).is_some_and(|r| claimable(r.status)))
            .cloned();
        let Some(id) = next else { return Ok(None) };
        let payload = inner.state.rows[&id].payload.clone().unwrap_or_default();
        self.commit(&mut inner, Op::Claim { id: id.clone(), owner: self.me.clone(), at: self.now() })?;
        inner.in_flight.insert(id.clone());
        Ok(Some(Claim { execution_id: id, payload }))
    }

    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool> {
        let mut inner = self.lock();
        inner.in_flight.remove(execution_id);
        let fenced = inner
            .state
            .rows
            .get(execution_id)
            .is_some_and(|r| r.status == DeliveryStatus::Delivering && r.owner.as_ref() == Some(&self.me));
        if !fenced {
            return Ok(false);
        }
        if self.seams.probe.hit(crate::seams::CrashPoint::DuringOutboxFinish) {
            return Err(Error::io(
                "finishing a delivery",
                std::io::Error::other("host crashed (simulated) during outbox finish"),
            ));
        }
        let (status, result, error) = match outcome {
            Finish::Delivered(answer) => {
                (DeliveryStatus::Delivered, Some(clip(&self.seams.secrets.scrub(&answer))), None)
            }
            Finish::Failed(reason) => (DeliveryStatus::Failed, None, Some(clip(&self.seams.secrets.scrub(&reason)))),
            Finish::Unknown(reason) => (DeliveryStatus::Unknown, None, Some(clip(&self.seams.secrets.scrub(&reason)))),
        };
        self.commit(&mut inner, Op::Finish { id: execution_id.to_owned(), status, result, error, at: self.now() })?;
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
        let abandoned: Vec<String> = inner
            .state
            .rows
            .values()
            .filter(|r| r.status == DeliveryStatus::Delivering && self.is_abandoned(&inner, r))
            .map(|r| r.execution_id.clone())
            .collect();
        for id in &abandoned {
            let error = Some("exited during delivery; outcome unknown; not retried".to_owned());
            self.commit(
                &mut inner,
                Op::Finish { id: id.clone(), status: DeliveryStatus::Unknown, result: None, error, at: self.now() },
            )?;
        }
        Ok(abandoned)
    }

    fn abandon(&self, execution_id: &str) {
        self.lock().in_flight.remove(execution_id);
    }

    fn settle(&self, execution_id: &str, reason: &str) -> Result<Option<DeliveryStatus>> {
        let mut inner = self.lock();
        let Some(status) = inner.state.rows.get(execution_id).map(|r| r.status) else { return Ok(None) };
        let next = match status {
            DeliveryStatus::Delivering => DeliveryStatus::Unknown,
            DeliveryStatus::Pending if reason.starts_with("cancel") => DeliveryStatus::Failed,
            other => return Ok(Some(other)),
        };
        let error = Some(clip(&self.seams.secrets.scrub(reason)));
        self.commit(
            &mut inner,
            Op::Finish { id: execution_id.to_owned(), status: next, result: None, error, at: self.now() },
        )?;
        Ok(Some(next))
    }

    fn prune(&self, before_ms: u64) -> Result<usize> {
        let mut inner = self.lock();
        let old: Vec<String> = inner
            .state
            .rows
            .values()
            .filter(|r| r.status.is_terminal() && r.updated_at < before_ms)
            .map(|r| r.execution_id.clone())
            .collect();
        for id in &old {
            self.commit(&mut inner, Op::Prune { id: id.clone(), at: self.now() })?;
        }
        Ok(old.len())
    }

    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>> {
        let mut inner = self.lock();
        let row = inner
            .state
            .rows
            .get(execution_id)
            .cloned()
            .ok_or_else(|| Error::SessionNotFound(format!("delivery {execution_id}")))?;
        if row.status != DeliveryStatus::Unknown {
            return Err(Error::BadBatch(format!(
                "delivery {execution_id} is {}; only unknown deliveries are resolved by hand",
                row.status
            )));
        }
        let at = self.now();
        match resolution {
            Resolution::Delivered => {
                let result = Some("confirmed by an operator".to_owned());
                self.commit(
                    &mut inner,
                    Op::Finish {
                        id: execution_id.to_owned(),
                        status: DeliveryStatus::Delivered,
                        result,
                        error: None,
                        at,
                    },
                )?;
                Ok(None)
            }
            Resolution::Failed(reason) => {
                let error = Some(clip(&self.seams.secrets.scrub(&format!("operator: {reason}"))));
                self.commit(
                    &mut inner,
                    Op::Finish { id: execution_id.to_owned(), status: DeliveryStatus::Failed, result: None, error, at },
                )?;
                Ok(None)
            }
            Resolution::Resend => {
                let Some(payload) = row.payload.clone() else {
                    return Err(Error::BadBatch(format!("delivery {execution_id} has no payload left to resend")));
                };
                let n = (1..)
                    .find(|n| !inner.state.rows.contains_key(&format!("{execution_id}#resend-{n}")))
                    .expect("a free resend id");
                let new_id = format!("{execution_id}#resend-{n}");
                let error = Some(format!("operator: resent as {new_id}"));
                self.commit(
                    &mut inner,
                    Op::Finish { id: execution_id.to_owned(), status: DeliveryStatus::Failed, result: None, error, at },
                )?;
                self.commit(
                    &mut inner,
                    Op::Enqueue { id: new_id.clone(), payload, at, resend_of: Some(execution_id.to_owned()) },
                )?;
                Ok(Some(new_id))
            }
        }
    }
}

/// Whether `rest` (from a line that does not decode to the end of the journal) is one line
/// holding zero bytes: the trace of a power loss inside the last write.
fn is_hole_in_last_line(rest: &[u8]) -> bool {
    let Some(end) = rest.iter().position(|&b| b == b'\n') else { return true };
    rest[..end].contains(&0) && end + 1 == rest.len() && !crate::bugs::planted("holes-are-corrupt")
}
