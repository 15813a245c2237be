//! The memory backend: for embedders that need no persistence, and as the reference the
//! contract suite holds the durable backends to. It cannot tear, so it never needs
//! truncation, but it applies the same ownership, fencing and repair rules.
//!
//! [`MemoryStore::leased`] shares one set of sessions between hosts that cannot see each
//! other's processes, as a database does: writers hold leases (the rules of `lease.rs`,
//! shared with PostgreSQL) judged by one clock, the store's. The simulator runs its fleet
//! on it: a worker paused past its lease is taken over, and every write it sends under
//! its old epoch is refused under the store's lock, the one statement that does the work.
//! With a [`StoreLink`] ([`MemoryStore::with_link`]) each statement crosses a connection the
//! simulator may cut, before the store sees it or on the answer's way back; the client
//! settles a lost answer by the rules PostgreSQL's uses (`lost_answer.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::lost_answer::{self, connection_lost, Statement, StoreLink, Stored, UnsureAppend, UnsureTakeover};
use super::writer::{LogMedium, SessionWriter};
use super::{HeldLeases, Inspection, Loaded, Opened, Repair, Scan, SessionId, SessionLog, Store, Takeover};
use crate::event::{Record, SessionHeader};
use crate::seams::{Clock, Monotonic, OwnerIdentity, Process};
use crate::{Error, Result};

#[derive(Debug, Clone)]
struct MemSession {
    header: SessionHeader,
    records: Vec<Record>,
    token: u64,
    owner: Option<OwnerIdentity>,
    /// When the holder's lease runs out (leased stores; `None` when released or unleased).
    lease_expires_at: Option<Monotonic>,
}

/// How a leased store judges its leases: one clock for every host that shares it.
#[derive(Clone)]
struct Leasing {
    clock: Arc<dyn Clock>,
    lease: std::time::Duration,
    /// The leases this process's writers hold (each handle of the store is one process).
    held: HeldLeases,
}

impl Leasing {
    fn expiry(&self) -> Monotonic {
        self.clock.now().saturating_add(self.lease)
    }

    fn live(&self, session: &MemSession) -> bool {
        session.lease_expires_at.is_some_and(|at| self.clock.now() < at)
    }
}

/// Sessions held in memory.
#[derive(Clone)]
pub struct MemoryStore {
    sessions: Arc<Mutex<BTreeMap<SessionId, MemSession>>>,
    process: Arc<dyn Process>,
    leasing: Option<Leasing>,
    /// The connection each statement crosses (`None`: none, nothing is ever lost).
    link: Option<Arc<dyn StoreLink>>,
}

type Sessions = BTreeMap<SessionId, MemSession>;

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store; ownership is judged by `process`.
    pub fn new(process: Arc<dyn Process>) -> Self {
        Self { sessions: Arc::default(), process, leasing: None, link: None }
    }

    /// An empty store shared as a database is: a writer holds a lease of `lease_ms`
    /// ([`super::LEASE_MS_MIN`]..=[`super::LEASE_MS_MAX`]) judged by `clock`, kept while its
    /// process calls [`MemoryStore::renew_leases`] every [`MemoryStore::renewal_interval`];
    /// once it runs out another process may take the session over.
    pub fn leased(process: Arc<dyn Process>, clock: Arc<dyn Clock>, lease_ms: u64) -> Result<Self> {
        let lease = super::check_lease_ms(lease_ms)?;
        let leasing = Leasing { clock, lease, held: HeldLeases::default() };
        Ok(Self { sessions: Arc::default(), process, leasing: Some(leasing), link: None })
    }

    /// The same sessions seen by another process (tests use this to play two writers; the
    /// simulator, two worker hosts). That process holds its own leases.
    pub fn as_process(&self, process: Arc<dyn Process>) -> Self {
        let leasing = self.leasing.clone().map(|l| Leasing { held: HeldLeases::default(), ..l });
        Self { sessions: self.sessions.clone(), process, leasing, link: self.link.clone() }
    }

    /// The same sessions reached over `link`, which may cut any statement or lose its answer
    /// (the simulator's connection faults). Handles made from this one with
    /// [`MemoryStore::as_process`] cross the same link.
    pub fn with_link(&self, link: Arc<dyn StoreLink>) -> Self {
        Self { link: Some(link), ..self.clone() }
    }

    /// How often this process must renew its leases (`None`: an unleased store).
    pub fn renewal_interval(&self) -> Option<std::time::Duration> {
        self.leasing.as_ref().map(|l| super::renewal_interval(l.lease))
    }

    /// Renews every lease this process's writers hold, each only at its own epoch; a lease
    /// taken over is dropped, and its writer's next write is refused as fenced.
    pub fn renew_leases(&self) {
        let Some(leasing) = &self.leasing else { return };
        let held = leasing.held.held();
        let renewed = self.statement(Statement::Renew, |sessions| {
            let mut taken = Vec::new();
            for (id, epoch) in &held {
                match sessions.iter_mut().find(|(sid, _)| sid.as_str() == id) {
                    Some((_, session)) if session.token == *epoch => session.lease_expires_at = Some(leasing.expiry()),
                    _ => taken.push((id.clone(), *epoch)),
                }
            }
            Ok(taken)
        });
        // Lost: tried again at the next round, while the lease lasts.
        for (id, epoch) in renewed.unwrap_or_default() {
            leasing.held.drop_lease(&id, epoch);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One statement: `run` under the store's lock, across the link if there is one (cut
    /// before the store sees it, or its answer lost after it ran).
    fn statement<T>(&self, what: Statement, run: impl FnOnce(&mut Sessions) -> Result<T>) -> Result<T> {
        let Some(link) = &self.link else { return run(&mut self.lock()) };
        let host = self.process.identity().host;
        if link.cut_before(&host, what) {
            return Err(connection_lost(what));
        }
        let answer = run(&mut self.lock());
        if link.answer_lost(&host, what, answer.is_ok()) {
            return Err(connection_lost(what));
        }
        answer
    }

    /// A statement that may be sent twice: once more after a lost connection.
    fn idempotent<T>(&self, what: Statement, run: impl Fn(&mut Sessions) -> Result<T>) -> Result<T> {
        lost_answer::again_if_lost(&mut (), |()| self.statement(what, &run), |()| {})
    }

    fn inspection(&self, session: &MemSession) -> Inspection {
        let scan = Scan::of_records(session.header.clone(), session.records.clone());
        // An owner whose lease ran out holds nothing (as PostgreSQL's inspection says).
        let owner = session.owner.clone().filter(|_| self.leasing.as_ref().is_none_or(|l| l.live(session)));
        Inspection::from_scan(scan, owner, &super::NoEvidence)
    }

    fn acquire(&self, id: &SessionId, session: &mut MemSession, takeover: Takeover) -> Result<u64> {
        match &self.leasing {
            Some(leasing) => {
                let live = leasing.live(session);
                super::check_lease_takeover(
                    self.process.as_ref(),
                    id.as_str(),
                    session.owner.as_ref(),
                    live,
                    takeover,
                )?;
            }
            None => {
                if let Some(holder) = &session.owner {
                    let holder_text = holder.to_string();
                    super::check_takeover(self.process.as_ref(), id.as_str(), Some(holder), holder_text, takeover)?;
                }
            }
        }
        session.token += 1;
        self.take_lease(session);
        Ok(session.token)
    }

    /// Makes this process the holder of `session` at its current token (in the statement;
    /// the process keeps renewing it once the answer came back, [`MemoryStore::hold`]).
    fn take_lease(&self, session: &mut MemSession) {
        session.owner = Some(self.process.identity());
        if let Some(leasing) = &self.leasing {
            session.lease_expires_at = Some(leasing.expiry());
        }
    }

    /// Keeps renewing the lease of `id` at `token`.
    fn hold(&self, id: &SessionId, token: u64) {
        if let Some(leasing) = &self.leasing {
            leasing.held.hold(id.as_str(), token);
        }
    }
}

impl Store for MemoryStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        let me = self.process.identity();
        self.idempotent(Statement::Create, |sessions| {
            if let Some(existing) = sessions.get(id) {
                // Created by a first attempt whose answer was lost? Only if it is ours at 1.
                let ours = existing.token == 1 && existing.owner.as_ref() == Some(&me) && existing.records.is_empty();
                return if ours { Ok(()) } else { Err(Error::SessionExists(id.to_string())) };
            }
            let mut session = MemSession {
                header: SessionHeader::new(id.as_str(), created_at),
                records: Vec::new(),
                token: 1,
                owner: None,
                lease_expires_at: None,
            };
            self.take_lease(&mut session);
            sessions.insert(id.clone(), session);
            Ok(())
        })?;
        self.hold(id, 1);
        SessionWriter::boxed(id, 1, &[], Box::new(MemoryMedium { store: self.clone() }))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        let (token, loaded) = lost_answer::take_over(&mut MemTakeover { store: self, id, takeover }, id.as_str())?;
        self.hold(id, token);
        let log = SessionWriter::boxed(id, token, &loaded.records, Box::new(MemoryMedium { store: self.clone() }))?;
        Ok(Opened { log, loaded })
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        self.idempotent(Statement::Read, |sessions| {
            let session = sessions.get(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
            Ok(self.inspection(session))
        })
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        super::load_through_open(self, self.process.as_ref(), id, self.inspect(id)?)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        self.idempotent(Statement::Read, |sessions| Ok(sessions.keys().cloned().collect()))
    }
}

/// A takeover across the store's link (`lost_answer.rs` settles a lost answer).
struct MemTakeover<'a> {
    store: &'a MemoryStore,
    id: &'a SessionId,
    takeover: Takeover,
}

impl UnsureTakeover for MemTakeover<'_> {
    type Taken = (u64, Loaded);

    fn take_over(&mut self) -> Result<(u64, Loaded)> {
        let (store, id) = (self.store, self.id);
        store.statement(Statement::TakeOver, |sessions| {
            let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
            let token = store.acquire(id, session, self.takeover)?;
            let closers = store.inspection(session).closers;
            session.records.extend(closers.iter().cloned());
            let repair = (!closers.is_empty()).then(|| Repair { closers, ..Repair::default() });
            Ok((token, Loaded { header: session.header.clone(), records: session.records.clone(), repair }))
        })
    }

    fn committed_unseen(&mut self) -> Result<Option<(u64, Loaded)>> {
        let (store, id) = (self.store, self.id);
        let me = store.process.identity();
        let held = store.leasing.as_ref().map(|l| l.held.held()).unwrap_or_default();
        store.statement(Statement::Read, |sessions| {
            let session = sessions.get(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
            let live = store.leasing.as_ref().is_none_or(|l| l.live(session));
            let ours = live && session.owner.as_ref() == Some(&me);
            if !ours || held.iter().any(|(sid, token)| sid == id.as_str() && *token == session.token) {
                return Ok(None);
            }
            let loaded = Loaded { header: session.header.clone(), records: session.records.clone(), repair: None };
            Ok(Some((session.token, loaded)))
        })
    }

    fn forget(&mut self) {}
}

/// The medium of one in-memory session.
#[derive(Debug)]
struct MemoryMedium {
    store: MemoryStore,
}

impl MemoryMedium {
    fn fenced<'a>(sessions: &'a mut Sessions, id: &SessionId, token: u64) -> Result<&'a mut MemSession> {
        let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        if session.token != token && !crate::testing::bugs::planted("zombie-write-unfenced") {
            return Err(Error::Fenced { id: id.to_string(), token, current: session.token });
        }
        Ok(session)
    }
}

/// An append across the store's link (`lost_answer.rs` settles a lost answer).
struct MemAppend<'a> {
    store: &'a MemoryStore,
    id: &'a SessionId,
    token: u64,
    batch: &'a [Record],
}

impl UnsureAppend for MemAppend<'_> {
    fn append(&mut self, from: usize) -> Result<()> {
        let (store, id, token, batch) = (self.store, self.id, self.token, &self.batch[from..]);
        store.statement(Statement::Append, |sessions| {
            let session = MemoryMedium::fenced(sessions, id, token)?;
            // A seq is taken once, as PostgreSQL's key says: a batch sent again after its
            // answer was lost is refused, and `lost_answer.rs` finds it stored. (A writer let
            // through unfenced by the planted bug is let through here too: that bug is a store
            // that accepts a fenced writer's write.)
            let taken = session.records.last().is_some_and(|last| batch[0].seq <= last.seq);
            if taken && session.token == token {
                return Err(Error::Database(crate::error::DatabaseError {
                    message: format!("duplicate key: seq {} of session {id} is taken", batch[0].seq),
                    code: Some(lost_answer::UNIQUE_VIOLATION.to_owned()),
                    connection_lost: false,
                }));
            }
            session.records.extend(batch.iter().cloned());
            // A write renews the lease it was fenced on (PostgreSQL's append does the same).
            if let Some(leasing) = &store.leasing {
                session.lease_expires_at = Some(leasing.expiry());
            }
            Ok(())
        })
    }

    fn stored(&mut self) -> Result<Stored> {
        let (id, batch) = (self.id, self.batch);
        let (first, last) = (batch[0].seq, batch[batch.len() - 1].seq);
        self.store.statement(Statement::Read, |sessions| {
            let session = sessions.get(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
            let found = session.records.iter().filter(|r| (first..=last).contains(&r.seq)).map(|r| {
                let own = usize::try_from(r.seq - first).ok().and_then(|i| batch.get(i));
                (r.seq, own == Some(r))
            });
            Ok(Stored::judge(first, batch.len(), found))
        })
    }

    fn fenced(&mut self) -> Error {
        let (id, token) = (self.id, self.token);
        let current =
            self.store.statement(Statement::Read, |sessions| Ok(sessions.get(id).map(|session| session.token)));
        match current {
            Ok(Some(current)) => Error::Fenced { id: id.to_string(), token, current },
            Ok(None) => Error::SessionNotFound(id.to_string()),
            Err(e) => e,
        }
    }

    fn forget(&mut self) {}
}

impl LogMedium for MemoryMedium {
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()> {
        // The same record limit as the files: a memory-backed test sees what production sees.
        for record in batch {
            crate::store::check_record_line(record.seq, record.encode().len())?;
        }
        let Some(last) = batch.last() else { return Ok(()) };
        let range = (batch[0].seq, last.seq);
        lost_answer::append(&mut MemAppend { store: &self.store, id, token, batch }, id.as_str(), token, range)
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        if let Some(leasing) = &self.store.leasing {
            leasing.held.drop_lease(id.as_str(), token);
        }
        self.store.idempotent(Statement::Release, |sessions| {
            let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
            // A first attempt that committed unseen left it released at token + 1.
            if session.token == token + 1 && session.owner.is_none() {
                return Ok(());
            }
            let session = Self::fenced(sessions, id, token)?;
            session.token += 1;
            session.owner = None;
            session.lease_expires_at = None;
            Ok(())
        })
    }
}

/// The store's sessions' epochs, for a delivery queue kept beside it (the simulator's fleet):
/// the queue fences a session's deliveries by them (`outbox/fence.rs`).
impl crate::outbox::SessionEpochs for MemoryStore {
    fn epoch(&self, session: &str) -> Option<u64> {
        let id = SessionId::new(session).ok()?;
        self.lock().get(&id).map(|session| session.token)
    }
}
