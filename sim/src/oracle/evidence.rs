//! What every checker reads about one finished run, in either world, and what it writes.

use std::collections::BTreeSet;
use std::sync::Arc;

use faultline_runtime::event::Record;

use super::invariant::{Invariant, Violation};
use crate::world::evidence::World;
use crate::world::gateway::Receipt;
use crate::world::seeded::Plan;

/// Everything the oracle reads about one finished run, in either world.
pub(crate) struct RunEvidence<'a> {
    pub plan: &'a Plan,
    pub seed: u64,
    pub world: &'a World,
    /// What the gateway received.
    pub receipts: &'a [Receipt],
    /// What the services of an agent under test received.
    pub service_receipts: &'a [crate::world::ServiceReceipt],
    /// The services the agent under test declared (empty otherwise).
    pub services: &'a [crate::world::Service],
    /// Every model request and what it was served.
    pub exchanges: &'a [crate::model_server::Exchange],
    /// Every request body the model server received.
    pub request_bodies: &'a [Arc<str>],
    /// The fault families that fired, by what happened (coverage).
    pub faults_fired: &'a BTreeSet<String>,
    /// The run's end, in ms of its world's clock.
    pub end_ms: u64,
}

impl RunEvidence<'_> {
    /// The recovered transcript of a run that converged; `None` when recovery refused the
    /// log or the workload never converged (then only the checks that need no transcript
    /// apply).
    pub(super) fn transcript(&self) -> Option<&[Record]> {
        match (&self.world.refused, &self.world.transcript) {
            (None, Some(transcript)) => Some(transcript),
            _ => None,
        }
    }
}

/// A checker's list of violations.
#[derive(Default)]
pub(super) struct FoundViolations(pub(super) Vec<Violation>);

impl FoundViolations {
    /// A violation with the catalog's advice.
    pub(super) fn fail(&mut self, invariant: Invariant, detail: String, at_ms: u64) {
        self.0.push(Violation::new(invariant, detail, at_ms));
    }

    /// A violation with advice fitted to its evidence.
    pub(super) fn fail_advised(&mut self, invariant: Invariant, detail: String, advice: String, at_ms: u64) {
        self.0.push(Violation::new(invariant, detail, at_ms).advised(advice));
    }
}
