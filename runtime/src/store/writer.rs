//! The single writer of a session, shared by every backend.
//!
//! The protocol of an append lives here once: a poisoned writer refuses; the batch must
//! continue the log (seq, invariants) or nothing is written; the backend writes it fenced on
//! this writer's token, all or nothing; only then does the validator move on. A failed
//! rollback poisons the writer, because the file's tail is no longer known. Backends only
//! provide a [`LogMedium`]: write a batch under a fence, and release.

use std::sync::Arc;

use super::format::{EncodedRecord, SealedBatch, Sealer};
use super::{SessionId, SessionLog};
use crate::event::{Record, Validator};
use crate::{Error, Result};

/// What a backend does for one session's writer.
pub(crate) trait LogMedium: Send + std::fmt::Debug {
    /// Writes `batch` durably if `token` still owns session `id`; otherwise
    /// [`Error::Fenced`] and nothing is written. The fence check and the write are as close
    /// as the medium allows (one SQLite transaction; the owner file re-read just before a
    /// file append). On any error nothing of the batch remains, or — when even the rollback
    /// failed — [`Error::AppendFailed`] with `rollback` set.
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()>;

    /// [`LogMedium::write_fenced`] of records encoded when they were accepted. A medium that
    /// writes lines (a file) uses them as they are; the default writes the records.
    fn write_fenced_accepted(&mut self, id: &SessionId, token: u64, batch: &[Arc<EncodedRecord>]) -> Result<()> {
        let records: Vec<Record> = batch.iter().map(|e| (*e.record).clone()).collect();
        self.write_fenced(id, token, &records)
    }

    /// A sealer for full batches when this medium writes bytes it can have encoded ahead
    /// (see [`SealedBatch`]); `None` (the default) when it writes records.
    fn sealer(&self) -> Option<Arc<Sealer>> {
        None
    }

    /// [`LogMedium::write_fenced_accepted`] of a batch sealed by [`LogMedium::sealer`]'s
    /// sealer: the sealed bytes are written as they are.
    fn write_fenced_sealed(&mut self, id: &SessionId, token: u64, batch: &SealedBatch) -> Result<()> {
        self.write_fenced_accepted(id, token, &batch.records)
    }

    /// Releases ownership of `id` if `token` still holds it.
    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()>;
}

/// A session's writer: the append protocol over any [`LogMedium`].
#[derive(Debug)]
pub(crate) struct SessionWriter {
    id: SessionId,
    token: u64,
    /// The log as written. A batch is checked on a copy, which replaces it only after the
    /// medium wrote: a copy costs little, because a step's chunks are kept as a few runs of
    /// seqs, not one entry each (copying one entry per chunk made a long stream quadratic).
    validator: Validator,
    poisoned: bool,
    medium: Box<dyn LogMedium>,
}

impl SessionWriter {
    /// A writer continuing `records` (already validated by the load that produced them).
    pub(crate) fn boxed(
        id: &SessionId,
        token: u64,
        records: &[Record],
        medium: Box<dyn LogMedium>,
    ) -> Result<Box<dyn SessionLog>> {
        let validator = Validator::validate_all(records)?;
        Ok(Self::continuing(id, token, validator, medium))
    }

    /// A writer continuing the log `validator` has read (a scan's, so the session is not
    /// validated a second time).
    pub(crate) fn continuing(
        id: &SessionId,
        token: u64,
        validator: Validator,
        medium: Box<dyn LogMedium>,
    ) -> Box<dyn SessionLog> {
        Box::new(SessionWriter { id: id.clone(), token, validator, poisoned: false, medium })
    }
}

/// Checks that `batch` continues the log `next` has seen, advancing `next` over it. On error
/// `next` is left part-way: the caller drops it.
fn check_records<'a>(next: &mut Validator, mut batch: impl Iterator<Item = &'a Record>) -> Result<()> {
    let first = batch.next().ok_or_else(|| Error::BadBatch("empty batch".into()))?;
    if first.seq != next.next_seq() {
        return Err(Error::BadBatch(format!(
            "batch starts at seq {}, the log continues at {}",
            first.seq,
            next.next_seq()
        )));
    }
    next.push_in_place(first)?;
    for record in batch {
        next.push_in_place(record)?;
    }
    Ok(())
}

impl SessionWriter {
    /// The append protocol once: a poisoned writer refuses; a batch that does not continue
    /// the log writes nothing; the validator moves on only after the medium wrote; a failed
    /// rollback poisons the writer.
    fn guarded<'a>(
        &mut self,
        records: impl Iterator<Item = &'a Record>,
        write: impl FnOnce(&mut dyn LogMedium, &SessionId, u64) -> Result<()>,
    ) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned(format!("session {}", self.id)));
        }
        // One pass over the batch, on a copy: a refused or unwritten batch leaves the
        // validator as the log is.
        let mut next = self.validator.clone();
        check_records(&mut next, records)?;
        match write(self.medium.as_mut(), &self.id, self.token) {
            Ok(()) => {
                self.validator = next;
                Ok(())
            }
            Err(e) => {
                if matches!(&e, Error::AppendFailed { rollback: Some(_), .. }) {
                    self.poisoned = true;
                }
                Err(e)
            }
        }
    }
}

impl SessionLog for SessionWriter {
    fn id(&self) -> &SessionId {
        &self.id
    }

    fn next_seq(&self) -> u64 {
        self.validator.next_seq()
    }

    fn token(&self) -> u64 {
        self.token
    }

    fn append(&mut self, batch: &[Record]) -> Result<()> {
        self.guarded(batch.iter(), |medium, id, token| medium.write_fenced(id, token, batch))
    }

    fn append_accepted(&mut self, batch: &[Arc<EncodedRecord>]) -> Result<()> {
        self.guarded(batch.iter().map(|e| &*e.record), |medium, id, token| {
            medium.write_fenced_accepted(id, token, batch)
        })
    }

    fn sealer(&self) -> Option<Arc<Sealer>> {
        self.medium.sealer()
    }

    fn append_sealed(&mut self, batch: &SealedBatch) -> Result<()> {
        self.guarded(batch.records.iter().map(|e| &*e.record), |medium, id, token| {
            medium.write_fenced_sealed(id, token, batch)
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        let SessionWriter { id, token, medium, .. } = *self;
        medium.release(&id, token)
    }
}
