//! The memory backend: for embedders that need no persistence, and as the reference the
//! contract suite holds the durable backends to. It cannot tear, so it never needs
//! truncation, but it applies the same ownership, fencing and repair rules.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::writer::{LogMedium, SessionWriter};
use super::{Inspection, Loaded, Opened, Repair, Scan, SessionId, SessionLog, Store, Takeover};
use crate::event::{Record, SessionHeader};
use crate::seams::{OwnerIdentity, Process};
use crate::{Error, Result};

#[derive(Debug, Clone)]
struct MemSession {
    header: SessionHeader,
    records: Vec<Record>,
    token: u64,
    owner: Option<OwnerIdentity>,
}

/// Sessions held in memory.
#[derive(Clone)]
pub struct MemoryStore {
    sessions: Arc<Mutex<BTreeMap<SessionId, MemSession>>>,
    process: Arc<dyn Process>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store; ownership is judged by `process`.
    pub fn new(process: Arc<dyn Process>) -> Self {
        Self { sessions: Arc::default(), process }
    }

    /// The same sessions seen by another process (tests use this to play two writers).
    pub fn as_process(&self, process: Arc<dyn Process>) -> Self {
        Self { sessions: self.sessions.clone(), process }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<SessionId, MemSession>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn inspection(session: &MemSession) -> Inspection {
        let scan = Scan::of_records(session.header.clone(), session.records.clone());
        Inspection::from_scan(scan, session.owner.clone(), &super::NoEvidence)
    }

    fn acquire(&self, id: &SessionId, session: &mut MemSession, takeover: Takeover) -> Result<u64> {
        if let Some(holder) = &session.owner {
            super::check_takeover(self.process.as_ref(), id.as_str(), Some(holder), holder.to_string(), takeover)?;
        }
        session.token += 1;
        session.owner = Some(self.process.identity());
        Ok(session.token)
    }
}

impl Store for MemoryStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        let mut sessions = self.lock();
        if sessions.contains_key(id) {
            return Err(Error::SessionExists(id.to_string()));
        }
        let session = MemSession {
            header: SessionHeader::new(id.as_str(), created_at),
            records: Vec::new(),
            token: 1,
            owner: Some(self.process.identity()),
        };
        sessions.insert(id.clone(), session);
        drop(sessions);
        SessionWriter::boxed(id, 1, &[], Box::new(MemoryMedium { store: self.clone() }))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        let token = self.acquire(id, session, takeover)?;
        let closers = Self::inspection(session).closers;
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
        Ok(Self::inspection(session))
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
        if session.token != token {
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
        Self::fenced(&mut sessions, id, token)?.records.extend(batch.iter().cloned());
        Ok(())
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        let mut sessions = self.store.lock();
        let session = Self::fenced(&mut sessions, id, token)?;
        session.token += 1;
        session.owner = None;
        Ok(())
    }
}
