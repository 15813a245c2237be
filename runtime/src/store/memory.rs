//! The memory backend: for embedders that need no persistence, and as the reference the
//! contract suite holds the durable backends to. It cannot tear, so it never needs
//! truncation, but it applies the same ownership, fencing and repair rules.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::file::check_batch;
use super::{Inspection, Loaded, Opened, Repair, Scan, ScanStatus, SessionId, SessionLog, Store, Takeover};
use crate::event::{Record, SessionHeader, Validator};
use crate::seams::{Liveness, OwnerIdentity, Process};
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
        let scan = Scan {
            status: ScanStatus::Clean,
            header: Some(session.header.clone()),
            records: session.records.clone(),
            committed_len: 0,
            file_len: 0,
            recovered: Vec::new(),
            error: None,
            dropped: Vec::new(),
        };
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
        Ok(Box::new(MemoryLog { store: self.clone(), id: id.clone(), token: 1, validator: Validator::new() }))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        let token = self.acquire(id, session, takeover)?;
        let closers = Self::inspection(session).closers;
        session.records.extend(closers.iter().cloned());
        let repair = (!closers.is_empty()).then(|| Repair { closers, ..Repair::default() });
        let loaded = Loaded { header: session.header.clone(), records: session.records.clone(), repair };
        let validator = Validator::validate_all(&loaded.records)?;
        let log = MemoryLog { store: self.clone(), id: id.clone(), token, validator };
        Ok(Opened { log: Box::new(log), loaded })
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        let sessions = self.lock();
        let session = sessions.get(id).ok_or_else(|| Error::SessionNotFound(id.to_string()))?;
        Ok(Self::inspection(session))
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        let inspection = self.inspect(id)?;
        if !inspection.needs_repair() {
            let header = inspection.header.expect("memory sessions have headers");
            return Ok(Loaded { header, records: inspection.records, repair: None });
        }
        if let Some(holder) = inspection.owner.filter(|o| self.process.liveness(o) == Liveness::Alive) {
            return Err(Error::SessionLive { id: id.to_string(), holder: holder.to_string() });
        }
        let Opened { log, loaded } = self.open(id, Takeover::IfDead)?;
        log.close()?;
        Ok(loaded)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        Ok(self.lock().keys().cloned().collect())
    }
}

#[derive(Debug)]
struct MemoryLog {
    store: MemoryStore,
    id: SessionId,
    token: u64,
    validator: Validator,
}

impl MemoryLog {
    fn fenced(&self, session: &MemSession) -> Result<()> {
        if session.token != self.token {
            return Err(Error::Fenced { id: self.id.to_string(), token: self.token, current: session.token });
        }
        Ok(())
    }
}

impl SessionLog for MemoryLog {
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
        let next = check_batch(&self.validator, batch)?;
        for record in batch {
            crate::store::check_record_line(record.seq, record.encode().len())?;
        }
        let mut sessions = self.store.lock();
        let session = sessions.get_mut(&self.id).ok_or_else(|| Error::SessionNotFound(self.id.to_string()))?;
        self.fenced(session)?;
        session.records.extend(batch.iter().cloned());
        self.validator = next;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        let mut sessions = self.store.lock();
        let session = sessions.get_mut(&self.id).ok_or_else(|| Error::SessionNotFound(self.id.to_string()))?;
        self.fenced(session)?;
        session.token += 1;
        session.owner = None;
        Ok(())
    }
}
