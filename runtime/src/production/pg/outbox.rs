//! The PostgreSQL delivery queue: the shared machine (`outbox::machine`) decides every
//! transition; this backend reads and writes rows, one transaction per transition, on a
//! connection thread of its own (`link`).
//!
//! - Every transition on one execution id first takes a transaction-scoped advisory lock on
//!   that id, then the row `FOR UPDATE`: two workers enqueueing, finishing or settling the
//!   same id run one after the other, so "the first payload wins" and the owner fence of
//!   `finish` hold across hosts.
//! - A claim takes the oldest claimable row `FOR UPDATE SKIP LOCKED`: many workers drain one
//!   queue without waiting on each other, and no row is claimed twice.
//! - A session's row carries the session and the epoch it was enqueued under (`fence.rs`).
//!   Its enqueue, claim and finish read the session's epoch `FOR KEY SHARE` in their own
//!   transaction, so a takeover (which takes the session row `FOR UPDATE`) cannot commit
//!   between the check and the write. The session row is locked before the delivery's; a
//!   claim or finish that finds it locked (a takeover under way) does not wait: the row is
//!   skipped or left, and the takeover's repair settles it. The enqueue waits: it holds no
//!   delivery lock yet, and nothing the takeover waits for waits on it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use postgres::types::Type;

use super::client::Queries;
use super::link::{classify, Link, Linked};
use super::schema;
use super::store::parse_url;
use crate::outbox::machine::{self, After, Found, Op};
use crate::outbox::{Claim, Delivery, DeliveryStatus, Enqueued, Finish, Outbox, Resolution, SessionFence, SettleCause};
use crate::seams::{Clock, EntropyExt, OwnerIdentity, Process};
use crate::store::LEASE_MS_DEFAULT;
use crate::{Error, Result};

const COLUMNS: &str =
    "execution_id, status, payload, owner, result, error, claimed, resend_of, updated_at, session_id, session_epoch";

/// Rows whose session was found locked or moved on that one claim steps over at most.
const CLAIM_SKIPS_MAX: usize = 64;

/// A delivery queue in a PostgreSQL database, shared by any number of workers. A session's
/// deliveries ([`Outbox::enqueue_fenced`]) are fenced by the sessions of the same database
/// (a [`super::PgStore`] on it); a session kept elsewhere gives no epoch to fence by.
#[derive(Clone)]
pub struct PgOutbox {
    link: Arc<Link>,
    process: Arc<dyn Process>,
    clock: Arc<dyn Clock>,
    me: OwnerIdentity,
    in_flight: Arc<Mutex<BTreeSet<String>>>,
    /// Claims whose commit's answer was lost and that no lookup has settled yet: in flight
    /// too (the recovery of abandoned claims leaves them be), looked up by the next claim.
    unsure_claims: Arc<Mutex<BTreeSet<String>>>,
    secrets: crate::secrets::Scrubber,
    target: String,
    /// Opened for inspection: every transition refuses before it sends anything.
    read_only: bool,
}

impl std::fmt::Debug for PgOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOutbox").field("target", &self.target).finish_non_exhaustive()
    }
}

fn read_row(row: &postgres::Row) -> Delivery {
    let status: String = row.get(1);
    let owner: Option<String> = row.get(3);
    Delivery {
        execution_id: row.get(0),
        status: DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown),
        payload: row.get(2),
        owner: owner.and_then(|o| serde_json::from_str(&o).ok()),
        result: row.get(4),
        error: row.get(5),
        claimed: row.get(6),
        resend_of: row.get(7),
        updated_at: row.get::<_, i64>(8).max(0) as u64,
        session: match (row.get::<_, Option<String>>(9), row.get::<_, Option<i64>>(10)) {
            (Some(session), Some(epoch)) => Some(SessionFence { session, epoch: epoch.max(0) as u64 }),
            _ => None,
        },
    }
}

/// How a transition found its session's row.
enum SessionEpoch {
    /// Read under `FOR KEY SHARE` (`None`: no such session): no takeover commits before this
    /// transaction does.
    Current(Option<u64>),
    /// Locked by a takeover under way (only when not waiting).
    Locked,
}

/// The current epoch of `session`, its row locked `FOR KEY SHARE` for the rest of the
/// transaction (appends and renewals do not conflict with it; a takeover's `FOR UPDATE` does).
/// `wait: false` answers [`SessionEpoch::Locked`] instead of waiting for a takeover.
fn session_epoch(tx: &mut Tx<'_>, session: &str, wait: bool) -> Result<SessionEpoch> {
    let sql = if wait {
        "SELECT epoch FROM faultline_sessions WHERE id = $1 FOR KEY SHARE"
    } else {
        "SELECT epoch FROM faultline_sessions WHERE id = $1 FOR KEY SHARE SKIP LOCKED"
    };
    let epoch = tx.query_typed_opt(sql, &[(&session, Type::TEXT)]).map_err(classify)?.map(|r| r.get::<_, i64>(0));
    if epoch.is_none() && !wait {
        // Skipped as locked, or missing: ask without locking which.
        let exists = tx
            .query_typed_opt("SELECT 1 FROM faultline_sessions WHERE id = $1", &[(&session, Type::TEXT)])
            .map_err(classify)?
            .is_some();
        if exists {
            return Ok(SessionEpoch::Locked);
        }
    }
    Ok(SessionEpoch::Current(epoch.map(|e| e.max(0) as u64)))
}

/// The epoch of `row`'s session, not waiting (`None` for a row of no session); a session
/// locked by a takeover under way is `Err(())`: the row is not touched now.
fn row_session_epoch(tx: &mut Tx<'_>, row: &Delivery) -> Result<std::result::Result<Option<u64>, ()>> {
    let Some(fence) = &row.session else { return Ok(Ok(None)) };
    Ok(match session_epoch(tx, &fence.session, false)? {
        SessionEpoch::Current(epoch) => Ok(epoch),
        SessionEpoch::Locked => Err(()),
    })
}

type Tx<'a> = super::client::PgTx<'a>;

/// The row of `id`, locked for this transaction.
fn row(tx: &mut Tx<'_>, id: &str) -> Result<Option<Delivery>> {
    let sql = format!("SELECT {COLUMNS} FROM faultline_deliveries WHERE execution_id = $1 FOR UPDATE");
    Ok(tx.query_typed_opt(&sql, &[(&id, Type::TEXT)]).map_err(classify)?.as_ref().map(read_row))
}

/// Serialises every transition on `id` (across hosts) for the rest of the transaction.
fn lock_id(tx: &mut Tx<'_>, id: &str) -> Result<()> {
    tx.execute_typed("SELECT pg_advisory_xact_lock(hashtext($1))", &[(&id, Type::TEXT)]).map_err(classify)?;
    Ok(())
}

fn found(tx: &mut Tx<'_>, id: &str) -> Result<Found> {
    let tomb = tx
        .query_typed_opt("SELECT status FROM faultline_tombstones WHERE execution_id = $1", &[(&id, Type::TEXT)])
        .map_err(classify)?;
    if let Some(tomb) = tomb {
        let status: String = tomb.get(0);
        return Ok(Found::Tombstone(DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Unknown)));
    }
    Ok(row(tx, id)?.map_or(Found::Nothing, |r| Found::Row(r.status)))
}

/// The ids of rows of `statuses`, oldest first, unlocked (each is locked by id before use).
fn ids_with(tx: &mut Tx<'_>, statuses: &[DeliveryStatus]) -> Result<Vec<String>> {
    let wanted: Vec<String> = statuses.iter().map(ToString::to_string).collect();
    let sql = "SELECT execution_id FROM faultline_deliveries WHERE status = ANY($1) ORDER BY seq";
    Ok(tx.query_typed(sql, &[(&wanted, Type::TEXT_ARRAY)]).map_err(classify)?.iter().map(|r| r.get(0)).collect())
}

/// Rows of `statuses`, oldest first, locked (rows another transaction holds are waited for).
fn rows_with(tx: &mut Tx<'_>, statuses: &[DeliveryStatus]) -> Result<Vec<Delivery>> {
    let wanted: Vec<String> = statuses.iter().map(ToString::to_string).collect();
    let sql = format!("SELECT {COLUMNS} FROM faultline_deliveries WHERE status = ANY($1) ORDER BY seq FOR UPDATE");
    Ok(tx.query_typed(&sql, &[(&wanted, Type::TEXT_ARRAY)]).map_err(classify)?.iter().map(read_row).collect())
}

fn millis(ms: u64) -> i64 {
    ms.min(i64::MAX as u64) as i64
}

/// Carries out one op the machine decided: the row it leaves is written whole.
fn execute(tx: &mut Tx<'_>, op: &Op) -> Result<()> {
    let before = row(tx, op.id())?;
    match machine::apply(before.as_ref(), op) {
        After::Row(r) => {
            let owner = r.owner.as_ref().map(|o| serde_json::to_string(o).expect("identities serialise"));
            let (status, updated_at) = (r.status.to_string(), millis(r.updated_at));
            let session = r.session.as_ref().map(|f| f.session.clone());
            let session_epoch = r.session.as_ref().map(|f| millis(f.epoch));
            tx.execute_typed(
                "INSERT INTO faultline_deliveries (execution_id, status, payload, owner, result, error, claimed, resend_of,
                     updated_at, session_id, session_epoch)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (execution_id) DO UPDATE SET status = $2, payload = $3, owner = $4, result = $5,
                     error = $6, claimed = $7, resend_of = $8, updated_at = $9, session_id = $10, session_epoch = $11",
                &[
                    (&r.execution_id, Type::TEXT),
                    (&status, Type::TEXT),
                    (&r.payload, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&r.result, Type::TEXT),
                    (&r.error, Type::TEXT),
                    (&r.claimed, Type::BOOL),
                    (&r.resend_of, Type::TEXT),
                    (&updated_at, Type::INT8),
                    (&session, Type::TEXT),
                    (&session_epoch, Type::INT8),
                ],
            )
            .map_err(classify)?;
        }
        After::Tombstone(status) => {
            let Op::Prune { at, .. } = op else { unreachable!("only a prune leaves a tombstone") };
            let (id, status, at) = (op.id(), status.to_string(), millis(*at));
            tx.execute_typed(
                "INSERT INTO faultline_tombstones (execution_id, status, pruned_at) VALUES ($1, $2, $3)
                 ON CONFLICT (execution_id) DO UPDATE SET status = $2, pruned_at = $3",
                &[(&id, Type::TEXT), (&status, Type::TEXT), (&at, Type::INT8)],
            )
            .map_err(classify)?;
            tx.execute_typed("DELETE FROM faultline_deliveries WHERE execution_id = $1", &[(&id, Type::TEXT)])
                .map_err(classify)?;
        }
    }
    Ok(())
}

impl PgOutbox {
    /// Connects to the queue in the database at `url`, applying missing schema migrations.
    pub fn connect(
        url: &str,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Result<Self> {
        let (config, target) = parse_url(url)?;
        let link = Link::start(config, Duration::from_millis(LEASE_MS_DEFAULT))?;
        let named = target.clone();
        link.run(move |linked| schema::migrate(linked.client()?, &named).map(|_| ()))?;
        Ok(Self::on(link, target, process, clock, entropy))
    }

    /// Connects for reading only (`list`, evidence for a report): nothing is created or
    /// migrated, and a database without the faultline schema is refused.
    pub fn connect_read_only(
        url: &str,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Result<Self> {
        let (config, target) = parse_url(url)?;
        let link = Link::start(config, Duration::from_millis(LEASE_MS_DEFAULT))?;
        let named = target.clone();
        link.run(move |linked| schema::check_readable(linked.client()?, &named))?;
        Ok(Self { read_only: true, ..Self::on(link, target, process, clock, entropy) })
    }

    fn on(
        link: Arc<Link>,
        target: String,
        process: Arc<dyn Process>,
        clock: Arc<dyn Clock>,
        entropy: &dyn crate::seams::Entropy,
    ) -> Self {
        let mut me = process.identity();
        me.instance = format!("{}/outbox-{}", me.instance, entropy.hex_id(8));
        Self {
            link,
            process,
            clock,
            me,
            in_flight: Arc::default(),
            unsure_claims: Arc::default(),
            secrets: crate::secrets::Scrubber::new(),
            target,
            read_only: false,
        }
    }

    /// Scrubs the secrets in `secrets` (by value) from every error and answer it stores, before
    /// the pattern redaction (FAILURE-SECRETS).
    pub fn with_scrubber(mut self, secrets: crate::secrets::Scrubber) -> Self {
        self.secrets = secrets;
        self
    }

    /// The database, as printed (no password).
    pub fn target(&self) -> &str {
        &self.target
    }

    fn in_flight(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `body` in one transaction on the connection thread, then commits. Every
    /// transition goes through here, so a queue opened for inspection refuses them all.
    fn transaction<T: Send + 'static>(
        &self,
        body: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.refuse_if_read_only()?;
        self.link.run(move |linked: &mut Linked| in_transaction(linked, body))
    }

    /// [`PgOutbox::transaction`] for an idempotent transition (an enqueue: the first payload
    /// wins), run once more on a new connection when the first attempt lost its connection:
    /// a commit whose reply was lost is found, not repeated.
    fn transaction_idempotent<T: Send + 'static>(
        &self,
        body: impl Fn(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.refuse_if_read_only()?;
        self.link.run_idempotent(move |linked: &mut Linked| in_transaction(linked, &body))
    }

    fn refuse_if_read_only(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::NotFaultlineDatabase {
                path: self.target.clone(),
                reason: "it was opened for inspection only; a transition writes".into(),
            });
        }
        Ok(())
    }
}

fn in_transaction<T>(linked: &mut Linked, body: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
    let mut tx = linked.client()?.transaction().map_err(classify)?;
    let value = body(&mut tx)?;
    tx.commit().map_err(classify)?;
    Ok(value)
}

/// One claim's statements on the connection thread, for [`crate::store::lost_answer::claim`].
struct PgClaims<'a> {
    linked: Option<&'a mut Linked>,
    me: OwnerIdentity,
    now: u64,
    in_flight: Arc<Mutex<BTreeSet<String>>>,
    unsure: Arc<Mutex<BTreeSet<String>>>,
}

fn locked(set: &Mutex<BTreeSet<String>>) -> MutexGuard<'_, BTreeSet<String>> {
    set.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PgClaims<'_> {
    fn linked(&mut self) -> &mut Linked {
        self.linked.as_deref_mut().expect("claims run on the connection thread")
    }

    /// `id` is no claim of this queue any more: neither in flight nor unsure.
    fn drop_claim(&self, id: &str) {
        locked(&self.unsure).remove(id);
        locked(&self.in_flight).remove(id);
    }
}

impl crate::store::lost_answer::UnsureClaim for PgClaims<'_> {
    type Claimed = Claim;

    fn claim(&mut self) -> Result<Option<Claim>> {
        let (me, now) = (self.me.clone(), self.now);
        // The claim joins the in-flight set before its transaction commits, so a recovery of
        // this process that sees the row `delivering` also sees it in flight (issue 54); and
        // it is unsure until the commit's answer says how it went.
        let (in_flight, unsure) = (self.in_flight.clone(), self.unsure.clone());
        let mut taken = None::<String>;
        let claim = in_transaction(self.linked(), |tx| {
            let wanted: Vec<String> = machine::claimable_statuses().iter().map(ToString::to_string).collect();
            // Rows of a session that moved on are not candidates; a session being taken over
            // right now is stepped over (its repair settles the row).
            let sql = format!(
                "SELECT {COLUMNS} FROM faultline_deliveries d WHERE status = ANY($1) AND NOT (execution_id = ANY($2))
                   AND (session_id IS NULL
                        OR session_epoch = (SELECT s.epoch FROM faultline_sessions s WHERE s.id = d.session_id))
                 ORDER BY seq LIMIT 1 FOR UPDATE OF d SKIP LOCKED"
            );
            let mut skipped: Vec<String> = Vec::new();
            let next = loop {
                let next = tx
                    .query_typed_opt(&sql, &[(&wanted, Type::TEXT_ARRAY), (&skipped, Type::TEXT_ARRAY)])
                    .map_err(classify)?;
                let Some(next) = next.as_ref().map(read_row) else { return Ok(None) };
                match row_session_epoch(tx, &next)? {
                    Ok(current) if machine::claimable(&next, current) => break next,
                    _ if skipped.len() < CLAIM_SKIPS_MAX => skipped.push(next.execution_id),
                    _ => return Ok(None),
                }
            };
            let (claim, op) = machine::claim(&next, &me, now);
            execute(tx, &op)?;
            locked(&in_flight).insert(claim.execution_id.clone());
            locked(&unsure).insert(claim.execution_id.clone());
            taken = Some(claim.execution_id.clone());
            Ok(Some(claim))
        });
        if let Some(id) = taken {
            match &claim {
                Ok(_) => {
                    locked(&self.unsure).remove(&id);
                }
                // Rolled back, or refused at its commit: nothing of it landed.
                Err(e) if !crate::store::lost_answer::is_connection_lost(e) => self.drop_claim(&id),
                // Its outcome is unknown: in flight and unsure until a lookup settles it.
                Err(_) => {}
            }
        }
        claim
    }

    fn unsure(&mut self) -> Option<String> {
        locked(&self.unsure).first().cloned()
    }

    fn claimed_unseen(&mut self, id: &str) -> Result<Option<Claim>> {
        let sql = format!("SELECT {COLUMNS} FROM faultline_deliveries WHERE execution_id = $1");
        let found = self.linked().client()?.query_typed_opt(&sql, &[(&id, Type::TEXT)]).map_err(classify)?;
        match found.as_ref().map(read_row) {
            Some(row) if row.status == DeliveryStatus::Delivering && row.owner.as_ref() == Some(&self.me) => {
                locked(&self.unsure).remove(id);
                Ok(Some(Claim { execution_id: row.execution_id, payload: row.payload.unwrap_or_default() }))
            }
            _ => {
                self.drop_claim(id);
                Ok(None)
            }
        }
    }

    fn forget(&mut self) {
        self.linked().forget();
    }
}

impl Outbox for PgOutbox {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let now = self.clock.now_ms();
        let (id, payload) = (execution_id.to_owned(), payload.to_owned());
        self.transaction_idempotent(move |tx| {
            lock_id(tx, &id)?;
            let (enqueued, op) = machine::enqueue(found(tx, &id)?, &id, &payload, None, now)?;
            if let Some(op) = op {
                execute(tx, &op)?;
            }
            Ok(enqueued)
        })
    }

    fn enqueue_fenced(&self, fence: &SessionFence, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let now = self.clock.now_ms();
        let (id, payload, fence) = (execution_id.to_owned(), payload.to_owned(), fence.clone());
        self.transaction_idempotent(move |tx| {
            // The session first, waiting out a takeover under way: then it is read as it ends.
            let SessionEpoch::Current(current) = session_epoch(tx, &fence.session, true)? else {
                unreachable!("a waiting read is never skipped")
            };
            lock_id(tx, &id)?;
            let (enqueued, op) = machine::enqueue(found(tx, &id)?, &id, &payload, Some((&fence, current)), now)?;
            if let Some(op) = op {
                execute(tx, &op)?;
            }
            Ok(enqueued)
        })
    }

    fn claim_next(&self) -> Result<Option<Claim>> {
        self.refuse_if_read_only()?;
        let claims = PgClaims {
            linked: None,
            me: self.me.clone(),
            now: self.clock.now_ms(),
            in_flight: self.in_flight.clone(),
            unsure: self.unsure_claims.clone(),
        };
        self.link.run(move |linked: &mut Linked| {
            let mut claims = PgClaims { linked: Some(linked), ..claims };
            crate::store::lost_answer::claim(&mut claims)
        })
    }

    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool> {
        let now = self.clock.now_ms();
        let (id, me, secrets) = (execution_id.to_owned(), self.me.clone(), self.secrets.clone());
        // The owner fence is read and the row written in one transaction, the row locked. Run
        // again after a lost connection: a finish that committed leaves the row no longer
        // `delivering`, and the second attempt changes nothing.
        let finished = self.transaction_idempotent(move |tx| {
            // The row's session before the row (the lock order): its session never changes,
            // so an unlocked read names it. A takeover under way leaves the row to its repair.
            let session: Option<String> = tx
                .query_typed_opt(
                    "SELECT session_id FROM faultline_deliveries WHERE execution_id = $1",
                    &[(&id, Type::TEXT)],
                )
                .map_err(classify)?
                .and_then(|r| r.get(0));
            let current = match &session {
                None => None,
                Some(session) => match session_epoch(tx, session, false)? {
                    SessionEpoch::Current(epoch) => epoch,
                    SessionEpoch::Locked => return Ok(false),
                },
            };
            lock_id(tx, &id)?;
            let Some(op) = machine::finish(row(tx, &id)?.as_ref(), &me, outcome.clone(), current, &secrets, now) else {
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
        let id = execution_id.to_owned();
        self.link.run_idempotent(move |linked| {
            let sql = format!("SELECT {COLUMNS} FROM faultline_deliveries WHERE execution_id = $1");
            Ok(linked.client()?.query_typed_opt(&sql, &[(&id, Type::TEXT)]).map_err(classify)?.as_ref().map(read_row))
        })
    }

    fn list(&self, status: Option<DeliveryStatus>) -> Result<Vec<Delivery>> {
        let status = status.map(|s| s.to_string());
        self.link.run_idempotent(move |linked| {
            let sql = format!(
                "SELECT {COLUMNS} FROM faultline_deliveries WHERE $1::text IS NULL OR status = $1 ORDER BY seq"
            );
            let rows = linked.client()?.query_typed(&sql, &[(&status, Type::TEXT)]).map_err(classify)?;
            Ok(rows.iter().map(read_row).collect())
        })
    }

    fn recover_abandoned(&self) -> Result<Vec<String>> {
        let in_flight = self.in_flight.clone();
        let now = self.clock.now_ms();
        let (me, process) = (self.me.clone(), self.process.clone());
        // Run again after a lost connection: what the first attempt settled is no longer
        // `delivering`, and the second finds only what is left.
        self.transaction_idempotent(move |tx| {
            let mut abandoned = Vec::new();
            let rows = rows_with(tx, &[DeliveryStatus::Delivering])?;
            // Read after the rows are locked: a claim that committed is in it.
            let in_flight = in_flight.lock().unwrap_or_else(PoisonError::into_inner).clone();
            for row in rows {
                if let Some(op) = machine::recover_abandoned(&row, &me, &in_flight, process.as_ref(), now) {
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
        let now = self.clock.now_ms();
        let (id, reason, secrets) = (execution_id.to_owned(), reason.to_owned(), self.secrets.clone());
        self.transaction(move |tx| {
            lock_id(tx, &id)?;
            let (status, op) = machine::settle(row(tx, &id)?.as_ref(), cause, &reason, &secrets, now);
            if let Some(op) = op {
                execute(tx, &op)?;
            }
            Ok(status)
        })
    }

    fn prune(&self, before_ms: u64) -> Result<usize> {
        let now = self.clock.now_ms();
        let terminal = [DeliveryStatus::Delivered, DeliveryStatus::Failed, DeliveryStatus::Unknown];
        self.transaction(move |tx| {
            let mut pruned = 0;
            // Each candidate is locked by id, then by row — the order of every transition — and
            // read again: an enqueue racing the prune waits on the id lock and then finds the
            // tombstone (it found neither when the prune held only the row; issue 54).
            for id in ids_with(tx, &terminal)? {
                lock_id(tx, &id)?;
                let Some(row) = row(tx, &id)? else { continue };
                if let Some(op) = machine::prune(&row, before_ms, now) {
                    execute(tx, &op)?;
                    pruned += 1;
                }
            }
            Ok(pruned)
        })
    }

    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>> {
        let now = self.clock.now_ms();
        let (id, secrets) = (execution_id.to_owned(), self.secrets.clone());
        self.transaction(move |tx| {
            lock_id(tx, &id)?;
            let before = row(tx, &id)?;
            // Resolving `id` holds its lock, so a concurrent resolve of it waits; each candidate
            // resend id is locked too before it is looked up (a row or a tombstone takes it).
            let taken = |candidate: &str| -> Result<bool> {
                lock_id(tx, candidate)?;
                Ok(found(tx, candidate)? != Found::Nothing)
            };
            let (new_id, ops) = machine::resolve(before.as_ref(), &id, resolution, taken, &secrets, now)?;
            for op in &ops {
                execute(tx, op)?;
            }
            Ok(new_id)
        })
    }
}
