//! A statement whose answer was lost: what a shared store's client does when the connection
//! goes while a write is under way (FAILURE-DB-TLS item 2). The write may have committed; its
//! answer did not come back. Sending it again blind is wrong both ways: a takeover run again
//! is refused by the lease its own first attempt took, and a batch sent again lands twice or
//! is refused by its own first copy. So the store is looked up first, on a new connection,
//! and the write is sent again only when the lookup shows it never landed.
//!
//! The rules live here once and serve every leased backend: `production::pg` (PostgreSQL,
//! whose connections the soak and the proxy tests cut) and [`super::MemoryStore`] with a
//! [`StoreLink`] (the simulator's fleet, whose link faults are seeded). One lookup and one
//! more attempt: a connection that fails twice in a row surfaces its error (classified
//! `DATABASE_UNREACHABLE`), and the caller's own retry rules take over.

use crate::error::DatabaseError;
use crate::{Error, Result};

/// A statement a leased store's client sends, as a [`StoreLink`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Statement {
    /// Creating a session (the writer takes its first lease).
    Create,
    /// Opening a session to write it: the lease rule, crash repair, the epoch moved on.
    TakeOver,
    /// Appending a batch under the writer's epoch.
    Append,
    /// Releasing a session (the epoch moved on, no holder).
    Release,
    /// Renewing the leases a process holds.
    Renew,
    /// A read (an inspection, a lookup, the list of sessions).
    Read,
}

impl Statement {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Statement::Create => "create",
            Statement::TakeOver => "takeover",
            Statement::Append => "append",
            Statement::Release => "release",
            Statement::Renew => "lease renewal",
            Statement::Read => "read",
        }
    }
}

/// The connection between one process and a shared store: where a simulated database loses
/// statements and answers (production's is a real network).
pub trait StoreLink: Send + Sync {
    /// Whether `statement` from `host` is cut before the store sees it.
    fn cut_before(&self, host: &str, statement: Statement) -> bool;

    /// Whether the answer to `statement` from `host`, which the store carried out
    /// (`changed`: it wrote something), is lost on its way back.
    fn answer_lost(&self, host: &str, statement: Statement, changed: bool) -> bool;
}

/// SQLSTATE `unique_violation`: a batch's seqs are taken already.
pub(crate) const UNIQUE_VIOLATION: &str = "23505";

/// The error of a statement whose connection was lost: its outcome is unknown.
pub(crate) fn connection_lost(statement: Statement) -> Error {
    Error::Database(DatabaseError {
        message: format!("the connection to the store was lost during a statement ({})", statement.name()),
        code: None,
        connection_lost: true,
    })
}

/// Whether `e` is a lost connection (the statement's outcome may be unknown).
pub(crate) fn is_connection_lost(e: &Error) -> bool {
    matches!(e, Error::Database(DatabaseError { connection_lost: true, .. }))
}

/// The store's SQLSTATE of `e`, if the store answered with one.
pub(crate) fn sqlstate(e: &Error) -> Option<&str> {
    match e {
        Error::Database(DatabaseError { code: Some(code), .. }) => Some(code),
        _ => None,
    }
}

/// What the store holds where a batch would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// None of its seqs.
    Nothing,
    /// Its first `n` records exactly, and nothing after (a batch sent again with more records
    /// behind the ones an earlier attempt landed).
    Prefix(usize),
    /// Exactly the batch.
    TheBatch,
    /// Other records at its seqs.
    Other,
}

impl Stored {
    /// What `found` says of a batch of `len` records from seq `first`: `found` is each stored
    /// row in the batch's range, in seq order, as its seq and whether it is the batch's own
    /// record at that seq.
    pub(crate) fn judge(first: u64, len: usize, found: impl IntoIterator<Item = (u64, bool)>) -> Stored {
        let mut landed = 0;
        for (seq, same) in found {
            if seq != first + landed as u64 || !same {
                return Stored::Other;
            }
            landed += 1;
        }
        match landed {
            0 => Stored::Nothing,
            n if n == len => Stored::TheBatch,
            n => Stored::Prefix(n),
        }
    }
}

/// The statements that settle an append whose answer was lost.
pub(crate) trait UnsureAppend {
    /// The fenced append of the batch's records from the `from`th on: all of them, or
    /// nothing and an error.
    fn append(&mut self, from: usize) -> Result<()>;
    /// What the store holds at the batch's seqs.
    fn stored(&mut self) -> Result<Stored>;
    /// Why the append matched nothing: [`Error::Fenced`] with the session's epoch now.
    fn fenced(&mut self) -> Error;
    /// The connection is gone: the next statement opens a new one.
    fn forget(&mut self);
}

/// Appends a batch of session `id` at `epoch`, seqs `first..=last`: an append whose answer
/// was lost, or that found its seqs taken, is settled by what the store holds there (what an
/// earlier attempt landed is not sent again; the rest is).
pub(crate) fn append(link: &mut impl UnsureAppend, id: &str, epoch: u64, (first, last): (u64, u64)) -> Result<()> {
    let sent = link.append(0);
    let lost = match &sent {
        Err(e) if is_connection_lost(e) => true,
        // An earlier attempt, reported lost, committed after all.
        Err(e) if sqlstate(e) == Some(UNIQUE_VIOLATION) => false,
        _ => return sent,
    };
    if lost {
        link.forget();
        if crate::testing::bugs::planted("lost-answer-rerun") {
            return link.append(0);
        }
    }
    tracing::warn!(session = %id, first_seq = first, lost, "append outcome unknown: comparing the stored rows with the batch");
    match link.stored()? {
        Stored::TheBatch => Ok(()),
        Stored::Prefix(landed) => link.append(landed),
        Stored::Nothing if lost => link.append(0),
        Stored::Nothing => sent,
        // Another writer's records: a writer taken over meanwhile is told so (its epoch moved
        // on); only under its own epoch is the batch itself wrong.
        Stored::Other => match link.fenced() {
            taken @ Error::Fenced { current, .. } if current != epoch => Err(taken),
            _ => Err(Error::BadBatch(format!(
                "seqs {first}..={last} of session {id} already hold other records; nothing was written"
            ))),
        },
    }
}

/// The statements that settle a takeover whose answer was lost.
pub(crate) trait UnsureTakeover {
    /// What a takeover yields (the epoch and the session as found).
    type Taken;
    /// The takeover: the lease rule, repair and the epoch moved on, in one transaction.
    fn take_over(&mut self) -> Result<Self::Taken>;
    /// The session as a first attempt left it, if that attempt committed unseen: this
    /// process is the live holder at an epoch none of its writers holds.
    fn committed_unseen(&mut self) -> Result<Option<Self::Taken>>;
    /// The connection is gone: the next statement opens a new one.
    fn forget(&mut self);
}

/// Takes session `id` over: a takeover whose answer was lost is looked up, and tried once
/// more only if it never committed (run again, it would be refused by its own lease).
pub(crate) fn take_over<L: UnsureTakeover>(link: &mut L, id: &str) -> Result<L::Taken> {
    match link.take_over() {
        Err(e) if is_connection_lost(&e) => {
            link.forget();
            if crate::testing::bugs::planted("lost-answer-rerun") {
                return link.take_over();
            }
            tracing::warn!(session = %id, "takeover outcome unknown: looking the session up");
            match link.committed_unseen()? {
                Some(taken) => Ok(taken),
                None => link.take_over(),
            }
        }
        other => other,
    }
}

/// The statements that settle a delivery queue's claim whose answer was lost (PostgreSQL's
/// queue; the others' claims are local).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) trait UnsureClaim {
    /// What a claim yields.
    type Claimed;
    /// The claim of the oldest claimable delivery. The id it takes is noted as unsure before
    /// the commit is sent, and stays noted only while the commit's outcome is unknown (its
    /// connection was lost).
    fn claim(&mut self) -> Result<Option<Self::Claimed>>;
    /// A claim noted unsure (by this call or an earlier one), if any.
    fn unsure(&mut self) -> Option<String>;
    /// Delivery `id` as an unsure claim left it: claimed by this queue (the commit landed
    /// unseen; no longer unsure), or `None` (it never landed; forgotten). An error leaves it
    /// unsure, to be looked up by the next claim.
    fn claimed_unseen(&mut self, id: &str) -> Result<Option<Self::Claimed>>;
    /// The connection is gone: the next statement opens a new one.
    fn forget(&mut self);
}

/// Claims the next delivery: a claim whose answer was lost is looked up (claimed by this
/// queue, it is this call's claim: delivered now, never left for the abandoned-claim
/// recovery to call `unknown` although nothing was sent), and tried once more only if it
/// never landed. A claim an earlier call could not look up is looked up first.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn claim<L: UnsureClaim>(link: &mut L) -> Result<Option<L::Claimed>> {
    while let Some(id) = link.unsure() {
        if let Some(claimed) = link.claimed_unseen(&id)? {
            return Ok(Some(claimed));
        }
    }
    match link.claim() {
        Err(e) if is_connection_lost(&e) => {
            link.forget();
            let Some(id) = link.unsure() else { return link.claim() };
            tracing::warn!(execution_id = %id, "claim outcome unknown: looking the delivery up");
            match link.claimed_unseen(&id)? {
                Some(claimed) => Ok(Some(claimed)),
                None => link.claim(),
            }
        }
        other => other,
    }
}

/// Runs `job`, once more after a lost connection (a read, or a write whose second attempt
/// checks what the first did); `forget` drops the lost connection in between.
pub(crate) fn again_if_lost<C, T>(cx: &mut C, job: impl Fn(&mut C) -> Result<T>, forget: impl Fn(&mut C)) -> Result<T> {
    match job(cx) {
        Err(e) if is_connection_lost(&e) => {
            forget(cx);
            job(cx)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_stored_is_judged_against_the_batch_seq_by_seq() {
        assert_eq!(Stored::judge(5, 3, []), Stored::Nothing);
        assert_eq!(Stored::judge(5, 3, [(5, true), (6, true), (7, true)]), Stored::TheBatch);
        assert_eq!(Stored::judge(5, 3, [(5, true)]), Stored::Prefix(1), "an earlier, shorter attempt");
        assert_eq!(Stored::judge(5, 3, [(5, true), (6, false)]), Stored::Other, "another record");
        assert_eq!(Stored::judge(5, 3, [(6, true)]), Stored::Other, "not from the first seq");
        assert_eq!(Stored::judge(5, 3, [(5, true), (7, true)]), Stored::Other, "a gap");
    }
}
