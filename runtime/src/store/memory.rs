//! The memory backend: for embedders that need no persistence, and as the reference the
//! contract suite holds the durable backends to. It cannot tear, so it never needs
//! truncation, but it applies the same ownership, fencing and repair rules.
//!
//! [`MemoryStore::leased`] shares one set of sessions between hosts that cannot see each
//! other's processes, as a database does: writers hold leases (the rules of `lease.rs`,
//! shared with PostgreSQL) judged by one clock, the store's. The simulator runs its fleet
//! on it: a worker paused past its lease is taken over, and every write it sends under
//! its old epoch is refused under the store's lock, the one statement that does the work.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

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
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store; ownership is judged by `process`.
    pub fn new(process: Arc<dyn Process>) -> Self {
        Self { sessions: Arc::default(), process, leasing: None }
    }

    /// An empty store shared as a database is: a writer holds a lease of `lease_ms`
    /// ([`super::LEASE_MS_MIN`]..=[`super::LEASE_MS_MAX`]) judged by `clock`, kept while its
    /// process calls [`MemoryStore::renew_leases`] every [`MemoryStore::renewal_interval`];
    /// once it runs out another process may take the session over.
    pub fn leased(process: Arc<dyn Process>, clock: Arc<dyn Clock>, lease_ms: u64) -> Result<Self> {
        let lease = super::check_lease_ms(lease_ms)?;
        let leasing = Leasing { clock, lease, held: HeldLeases::default() };
        Ok(Self { sessions: Arc::default(), process, leasing: Some(leasing) })
    }

    /// The same sessions seen by another process (tests use this to play two writers; the
    /// simulator, two worker hosts). That process holds its own leases.
    pub fn as_process(&self, process: Arc<dyn Process>) -> Self {
        let leasing = self.leasing.clone().map(|l| Leasing { held: HeldLeases::default(), ..l });
        Self { sessions: self.sessions.clone(), process, leasing }
    }

    /// How often this process must renew its leases (`None`: an unleased store).
    pub fn renewal_interval(&self) -> Option<std::time::Duration> {
        self.leasing.as_ref().map(|l| super::renewal_interval(l.lease))
    }

    /// Renews every lease this process's writers hold, each only at its own epoch; a lease
    /// taken over is dropped, and its writer's next write is refused as fenced.
    pub fn renew_leases(&self) {
        let Some(leasing) = &self.leasing else { return };
        let mut sessions = self.lock();
        for (id, epoch) in leasing.held.held() {
            match sessions.iter_mut().find(|(sid, _)| sid.as_str() == id) {
                Some((_, session)) if session.token == epoch => session.lease_expires_at = Some(leasing.expiry()),
                _ => leasing.held.drop_lease(&id, epoch),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<SessionId, MemSession>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
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
        self.take_lease(id, session);
        Ok(session.token)
    }

    /// Makes this process the holder of `session` at its current token.
    fn take_lease(&self, id: &SessionId, session: &mut MemSession) {
        session.owner = Some(self.process.identity());
        if let Some(leasing) = &self.leasing {
            session.lease_expires_at = Some(leasing.expiry());
            leasing.held.hold(id.as_str(), session.token);
        }
    }
}

impl Store for MemoryStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        let mut sessions = self.lock();
        if sessions.contains_key(id) {
            return Err(Error::SessionExists(id.to_string()));
        }
        let mut session = MemSession {
            header: SessionHeader::new(id.as_str(), created_at),
            records: Vec::new(),
            token: 1,
            owner: None,
            lease_expires_at: None,
        };
        self.take_lease(id, &mut session);
        sessions.insert(id.clone(), session);
        drop(sessions);
        SessionWriter::boxed(id, 1, &[], Box::new(MemoryMedium { store: self.clone() }))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        let token = self.acquire(id, session, takeover)?;
        let closers = self.inspection(session).closers;
        session.records.extend(closers.iter().cloned());
        let repair = (!closers.is_empty()).then(|| Repair { closers, ..Repair::default() });
        let loaded = Loaded { header: session.header.clone(), records: session.records.clone(), repair };
        drop(sessions);
        let log = SessionWriter::boxed(id, token, &loaded.records, Box::new(MemoryMedium { store: self.clone() }))?;
        Ok(Opened { log, loaded })
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        let sessions = self.lock();
        let session = sessions.get(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        Ok(self.inspection(session))
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        super::load_through_open(self, self.process.as_ref(), id, self.inspect(id)?)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        Ok(self.lock().keys().cloned().collect())
    }
}

/// The medium of one in-memory session.
#[derive(Debug)]
struct MemoryMedium {
    store: MemoryStore,
}

impl MemoryMedium {
    fn fenced<'a>(
        sessions: &'a mut BTreeMap<SessionId, MemSession>,
        id: &SessionId,
        token: u64,
    ) -> Result<&'a mut MemSession> {
        let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        if session.token != token && !crate::testing::bugs::planted("zombie-write-unfenced") {
            return Err(Error::Fenced { id: id.to_string(), token, current: session.token });
        }
        Ok(session)
    }
}

impl LogMedium for MemoryMedium {
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()> {
        // The same record limit as the files: a memory-backed test sees what production sees.
        for record in batch {
            crate::store::check_record_line(record.seq, record.encode().len())?;
        }
        let mut sessions = self.store.lock();
        let session = Self::fenced(&mut sessions, id, token)?;
        session.records.extend(batch.iter().cloned());
        // A write renews the lease it was fenced on (PostgreSQL's append does the same).
        if let Some(leasing) = &self.store.leasing {
            session.lease_expires_at = Some(leasing.expiry());
        }
        Ok(())
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        let mut sessions = self.store.lock();
        let session = Self::fenced(&mut sessions, id, token)?;
        session.token += 1;
        session.owner = None;
        session.lease_expires_at = None;
        if let Some(leasing) = &self.store.leasing {
            leasing.held.drop_lease(id.as_str(), token);
        }
        Ok(())
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
