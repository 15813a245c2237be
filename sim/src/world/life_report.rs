//! What an incarnation of the agent host tells the world around it (records accepted, the
//! durable watermark, faults that fired, trace lines, outcomes): into the simulator's shared
//! state, or down a pipe to the real harness. Its own file, so that the incarnation and the
//! person acting in it both report without importing each other.

use faultline_runtime::agent::{Agent, TurnOutcome};
use faultline_runtime::event::Record;

/// What an incarnation reports as it runs. Implementations stamp each report with their own
/// world's time.
pub(crate) trait LifeReport: Send + Sync {
    /// A line for the run's trace.
    fn trace(&self, line: String);
    /// The agent accepted `record` (not yet durable).
    fn accepted(&self, record: &Record);
    /// Every record below seq `through` is acknowledged durable.
    fn durable(&self, through: u64);
    /// The disk witness saw `record` become durable (stamped in the run's order of events).
    fn synced(&self, record: Record);
    /// A local tool's body ran for `execution_id` with `arguments` (stamped in the run's
    /// order of events): the tool's own record, which the runtime cannot touch.
    fn ran(&self, execution_id: &str, arguments: &str);
    /// A local tool returned its answer for `execution_id` (not a stop on its signal): the
    /// tool's own record that the call came to an end with an answer, whatever its deadline
    /// had fired by then (FAILURE-USER-VIEW).
    fn answered(&self, execution_id: &str);
    /// The host produced world catalog entry `entry` (a tool answered past its deadline, say).
    fn reached(&self, entry: &'static str);
    /// The simulated user was given `outcome` (stamped in the run's order of events).
    fn outcome(&self, outcome: &TurnOutcome);
    /// The agent reported a persistence failure (its failure channel).
    fn persist_failure(&self);
    /// A fault family fired (`cancel`, `config-applied`, `config-rejected`, `refused`,
    /// `oversize-output`): what happened in this host, not what the plan held.
    fn fault(&self, family: &str);
    /// The message sent with a late cancel was refused (the agent was already disposed).
    fn extra_refused(&self);
}

/// Tells the world the outcome the user now holds (the oracle holds a kept one to the disk).
pub(crate) fn report_outcome(agent: &Agent, report: &dyn LifeReport, life: u64) {
    let Some(outcome) = agent.last_outcome() else { return };
    if !outcome.kept {
        let code = match &outcome.reason {
            faultline_runtime::event::TurnEndReason::Error { error } => error.code.to_string(),
            other => other.kind().to_owned(),
        };
        let reached = outcome.reached.as_ref().map_or("no end".to_owned(), |r| r.kind().to_owned());
        report.trace(format!(
            "agent#{life} turn {} was told not kept ({code}; it reached {reached} in memory)",
            outcome.turn
        ));
    }
    report.outcome(&outcome);
}
