//! The model server's own count of what each incarnation of the agent asked: evidence the
//! runtime cannot touch, for the retry bound (a retry the runtime did not log is still a
//! request the server received).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::model_server::RequestObserver;

/// One request as the server received it: the incarnation that was alive when it arrived,
/// its body (a retry of a step sends the same body again; shared with the server's log, not
/// copied), the server's request number and its arrival time by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerEntry {
    pub life: u64,
    pub body: Arc<str>,
    pub n: usize,
    pub at_ms: u64,
}

impl LedgerEntry {
    /// The same request from the same incarnation: a retry of the other. Bodies are compared
    /// whole (a hash of each was a byte-at-a-time pass over every body, ~17 % of a run that
    /// sends tool outputs of 256 KiB; the comparison runs once per neighbouring pair).
    pub fn repeats(&self, other: &LedgerEntry) -> bool {
        self.life == other.life && self.body == other.body
    }
}

#[derive(Debug, Default)]
struct State {
    life: u64,
    /// Hosts alive at once (the fleet's workers): a request from one of these addresses is
    /// that host's, whatever `life` says.
    lives_by_address: std::collections::BTreeMap<std::net::IpAddr, u64>,
    entries: Vec<LedgerEntry>,
}

/// Shared between the world (which says which incarnation is alive) and the model server
/// (which records every request).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestLedger {
    state: Arc<Mutex<State>>,
}

impl RequestLedger {
    /// Incarnation `life` is the one alive from now on.
    pub fn begin_life(&self, life: u64) {
        self.lock().life = life;
    }

    /// A ledger holding `entries` (a part of another's, as a checker judges it).
    pub fn of(entries: Vec<LedgerEntry>) -> Self {
        let ledger = Self::default();
        ledger.lock().entries = entries;
        ledger
    }

    /// Requests from `address` are life `life`'s (hosts alive at the same time, as the
    /// fleet's two workers are: their retries are told apart by who sent them).
    pub fn life_at(&self, address: std::net::IpAddr, life: u64) {
        self.lock().lives_by_address.insert(address, life);
    }

    /// What the model server calls with every request it receives.
    pub fn observer(&self) -> RequestObserver {
        let ledger = self.clone();
        Box::new(move |request| {
            let mut state = ledger.lock();
            let life = state.lives_by_address.get(&request.from).copied().unwrap_or(state.life);
            let entry = LedgerEntry { life, body: request.body.clone(), n: request.n, at_ms: request.at_ms };
            state.entries.push(entry);
        })
    }

    /// Every request so far, in arrival order.
    /// Adds a request the server never received (the oracle's tests plant evidence).
    #[cfg(test)]
    pub fn push(&self, entry: LedgerEntry) {
        self.lock().entries.push(entry);
    }

    pub fn entries(&self) -> Vec<LedgerEntry> {
        self.lock().entries.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs of identical requests from one incarnation, as `(first index, length)` in arrival
/// order: `n` identical requests in a row are one step's first attempt and `n - 1` retries.
pub(crate) fn identical_runs(entries: &[LedgerEntry]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=entries.len() {
        if i == entries.len() || !entries[i].repeats(&entries[start]) {
            runs.push((start, i - start));
            start = i;
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(life: u64, body: u64) -> LedgerEntry {
        LedgerEntry { life, body: Arc::from(body.to_string()), n: 0, at_ms: 0 }
    }

    #[test]
    fn a_run_of_identical_requests_ends_at_a_new_body_or_a_new_life() {
        assert_eq!(identical_runs(&[]), vec![]);
        assert_eq!(identical_runs(&[e(1, 7)]), vec![(0, 1)]);
        assert_eq!(identical_runs(&[e(1, 7), e(1, 7), e(1, 8), e(1, 8), e(1, 8)]), vec![(0, 2), (2, 3)]);
        // The same step asked again by the next incarnation is a new run, not a retry.
        assert_eq!(identical_runs(&[e(1, 7), e(1, 7), e(2, 7), e(2, 7)]), vec![(0, 2), (2, 2)]);
    }
}
