//! The oracle (FAILURE-SIM-HARNESS): the invariants checked after every run, as a catalog
//! ([`Invariant`]: a name, what it protects, the evidence it reads) and one checker per
//! concern. A violation names its invariant, where (a seq or an execution id) and when.
//!
//! Each checker reads evidence the runtime cannot touch — the gateway's receipts, the model
//! server's request log, what was acknowledged durable outside the host, the harness's own
//! record of the faults it applied — and never a bound or a count from the runtime's records.

mod answers;
mod approvals;
mod durability;
mod effects;
mod evidence;
mod expectations;
mod fencing;
mod invariant;
mod limits;
mod liveness;
#[cfg(test)]
mod planted_evidence;
mod readings;
mod refusal;
mod requests;
mod retries;
mod secrets;
mod served;
mod services;
mod sometimes;

use evidence::FoundViolations;
pub(crate) use evidence::RunEvidence;
pub use invariant::{Invariant, Kind, Violation};
pub(crate) use sometimes::sometimes;
pub use sometimes::SOMETIMES;

/// Judges a run of the fleet world: its fencing checker over what the world gathered, the
/// scenario's fault families that must have fired, and [`fleet`]'s checks, in that order.
pub(crate) fn judge_fleet(
    evidence: &RunEvidence<'_>,
    gathered: &crate::world::fleet_evidence::FleetEvidence,
) -> Vec<Violation> {
    let mut violations = fencing::check(gathered, evidence.plan, evidence.receipts, evidence.end_ms);
    let fired = evidence.faults_fired;
    for family in evidence.plan.expect.faults_fired.iter().flatten().filter(|f| !fired.contains(*f)) {
        violations.push(Violation::new(
            Invariant::PlannedFaultFired,
            format!("the scenario's {family} fault never happened (fired: {fired:?})"),
            evidence.end_ms,
        ));
    }
    violations.extend(fleet(evidence));
    violations
}

/// What the fleet world (`fleet.rs`) is judged by besides its own checker: the same secrets
/// to keep, every request its two workers sent is one the provider's API accepts (the
/// standby's first request carries the zombie's history as repaired), an embedder's services
/// each see a call's effect at most once, and the retry rules hold, each worker's requests
/// told apart by its address in the model server's ledger. It has no disk: its store's
/// witness is the store itself, read by the fleet's checker.
fn fleet(evidence: &RunEvidence<'_>) -> Vec<Violation> {
    let mut found = FoundViolations::default();
    secrets::check(evidence, &mut found);
    services::check_fleet(evidence, &mut found);
    retries::check(evidence, &mut found);
    requests::check(evidence, &mut found);
    found.0
}

/// Judges a finished run: every checker, in catalog order of concern. A run whose recovery
/// refused its log, or whose workload never converged, has no transcript to judge, and still
/// gets every check that needs none: its secrets, effects, retries and durability evidence.
pub(crate) fn judge(evidence: &RunEvidence<'_>) -> Vec<Violation> {
    let mut found = FoundViolations::default();
    secrets::check(evidence, &mut found);
    refusal::check(evidence, &mut found);
    if evidence.world.refused.is_none() {
        liveness::check(evidence, &mut found);
    }
    durability::check(evidence, &mut found);
    limits::check(evidence, &mut found);
    effects::check(evidence, &mut found);
    approvals::check(evidence, &mut found);
    services::check(evidence, &mut found);
    answers::check(evidence, &mut found);
    answers::check_mcp(evidence, &mut found);
    retries::check(evidence, &mut found);
    readings::check(evidence, &mut found);
    requests::check(evidence, &mut found);
    expectations::check_table(evidence, &mut found);
    expectations::check_faults_fired(evidence, &mut found);
    found.0
}
