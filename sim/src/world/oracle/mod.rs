//! The oracle (SPEC §10): the invariants checked after every run, as a catalog
//! ([`Invariant`]: a name, what it protects, the evidence it reads) and one checker per
//! concern. A violation names its invariant, where (a seq or an execution id) and when.
//!
//! Each checker reads evidence the runtime cannot touch — the gateway's receipts, the model
//! server's request log, what was acknowledged durable outside the host, the harness's own
//! record of the faults it applied — and never a bound or a count from the runtime's records.

mod durability;
mod effects;
mod expectations;
pub(crate) mod fencing;
mod invariant;
mod limits;
mod liveness;
mod refusal;
mod retries;
mod secrets;
mod served;
mod services;
mod sometimes;

use std::collections::BTreeSet;
use std::sync::Arc;

use faultline_runtime::event::Record;
use serde::Serialize;

pub use invariant::{Invariant, Kind};
pub(super) use sometimes::sometimes;
pub use sometimes::SOMETIMES;

use super::seeded::Plan;
use super::{Receipt, World};

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// Where and what.
    pub detail: String,
    /// Simulated ms at the end of the run (or of the offending event).
    pub at_ms: u64,
}

/// Everything the oracle reads about one finished run, in either world.
pub(super) struct Evidence<'a> {
    pub plan: &'a Plan,
    pub seed: u64,
    pub world: &'a World,
    /// What the gateway received.
    pub receipts: &'a [Receipt],
    /// What the services of an agent under test received.
    pub service_receipts: &'a [super::ServiceReceipt],
    /// Every model request and what it was served.
    pub exchanges: &'a [crate::model_server::Exchange],
    /// Every request body the model server received.
    pub request_bodies: &'a [Arc<str>],
    /// The fault families that fired, by what happened (coverage).
    pub faults_fired: &'a BTreeSet<String>,
    /// The run's end, in ms of its world's clock.
    pub end_ms: u64,
}

impl Evidence<'_> {
    /// The recovered transcript of a run that converged; `None` when recovery refused the
    /// log or the workload never converged (then only the checks that need no transcript
    /// apply).
    fn transcript(&self) -> Option<&[Record]> {
        match (&self.world.refused, &self.world.transcript) {
            (None, Some(transcript)) => Some(transcript),
            _ => None,
        }
    }
}

/// A checker's list of violations.
#[derive(Default)]
struct Found(Vec<Violation>);

impl Found {
    fn fail(&mut self, invariant: Invariant, detail: String, at_ms: u64) {
        self.0.push(Violation { invariant, detail, at_ms });
    }
}

/// The secret-leak check alone: the fleet world (`fleet.rs`) has no disk witness, its own
/// checker for the rest, and the same secrets to keep.
pub(super) fn secrets(evidence: &Evidence<'_>) -> Vec<Violation> {
    let mut found = Found::default();
    secrets::check(evidence, &mut found);
    found.0
}

/// Judges a finished run: every checker, in catalog order of concern. A run whose recovery
/// refused its log, or whose workload never converged, has no transcript to judge, and still
/// gets every check that needs none: its secrets, effects, retries and durability evidence.
pub(super) fn judge(evidence: &Evidence<'_>) -> Vec<Violation> {
    let mut found = Found::default();
    secrets::check(evidence, &mut found);
    refusal::check(evidence, &mut found);
    if evidence.world.refused.is_none() {
        liveness::check(evidence, &mut found);
    }
    durability::check(evidence, &mut found);
    limits::check(evidence, &mut found);
    effects::check(evidence, &mut found);
    services::check(evidence, &mut found);
    retries::check(evidence, &mut found);
    expectations::check_table(evidence, &mut found);
    expectations::check_faults_fired(evidence, &mut found);
    found.0
}
