//! The scenario's person at work (FAILURE-APPROVAL): each time the agent's turn pauses for
//! approval they think, decide each waiting call as the plan says — misbehaving as it says:
//! twice, from a second worker at once, after cancelling the turn —, and continue the turn.
//! What they were told (accepted or refused) goes into the trace; a decision accepted where it
//! must be refused is a fault family the approval checker reads as a violation.

use std::time::Duration;

use faultline_runtime::agent::Agent;
use faultline_runtime::approval::{awaiting_approval, decide, DecisionRequest, PendingApproval};
use faultline_runtime::event::Decision;
use faultline_runtime::seams::Seams;
use faultline_runtime::store::{SessionId, Store};

use super::life_report::{report_outcome, LifeReport};
use crate::{Person as Plan, PersonDecision};

/// Who decides, as the deciders' lists name them.
const DECIDER: &str = "simulated-person";
/// A denial's reason: what the model reads.
const DENIAL_REASON: &str = "the simulated person said no";
/// The family a decision accepted where it must be refused fires (a violation).
pub(crate) const ACCEPTED_WRONGLY: &str = "approval-accepted-wrongly";

/// The person, with what they act through.
pub(crate) struct ActingPerson<'a> {
    plan: Plan,
    seams: &'a Seams,
    report: &'a dyn LifeReport,
}

fn request(call: &PendingApproval, decision: Decision) -> DecisionRequest {
    let request = DecisionRequest::new(call.call_id.clone(), decision, DECIDER);
    match decision {
        Decision::Denied => request.reason(DENIAL_REASON),
        Decision::Approved => request,
    }
}

fn other(decision: Decision) -> Decision {
    match decision {
        Decision::Approved => Decision::Denied,
        Decision::Denied => Decision::Approved,
    }
}

impl<'a> ActingPerson<'a> {
    pub(crate) fn new(plan: Plan, seams: &'a Seams, report: &'a dyn LifeReport) -> Self {
        Self { plan, seams, report }
    }

    fn decision(&self) -> Option<Decision> {
        match self.plan.decision {
            PersonDecision::Approve => Some(Decision::Approved),
            PersonDecision::Deny => Some(Decision::Denied),
            PersonDecision::Never => None,
        }
    }

    /// Settles every pause of `agent`'s session (`at`): returns once nothing waits.
    pub(crate) async fn settle(&self, agent: &Agent, at: (&dyn Store, &SessionId), life: u64) -> Result<(), String> {
        while !agent.awaiting_approval().is_empty() {
            self.report.fault("approval-paused");
            self.seams.clock.sleep(Duration::from_millis(self.plan.think_ms)).await;
            if self.plan.cancel_first {
                self.cancel_then_decide(agent, life).await;
                continue;
            }
            for call in agent.awaiting_approval().iter().filter(|c| c.decision.is_none()) {
                self.decide_one(agent, at, call).await;
            }
            self.wait_out_the_undecided(agent).await?;
            // A cancel that came while the person thought has closed the turn already.
            let continued = match agent.continue_turn() {
                Ok(()) => true,
                Err(e) => {
                    self.report.trace(format!("person: nothing to continue: {e}"));
                    false
                }
            };
            if continued && self.plan.cancel_after_continue {
                agent.cancel();
                self.report.fault("approval-cancel-after-continue");
            }
            agent.when_idle().await;
            report_outcome(agent, self.report, life);
            if continued && self.plan.cancel_after_continue {
                self.held_to_the_cancel(agent);
            }
        }
        Ok(())
    }

    /// The turn continued and cancelled in one breath ended aborted — or failed to persist
    /// first —, never went on to complete, pause again or run out of steps.
    fn held_to_the_cancel(&self, agent: &Agent) {
        use faultline_runtime::event::TurnEndReason;
        let Some(outcome) = agent.last_outcome() else { return };
        let end = if outcome.kept { Some(&outcome.reason) } else { outcome.reached.as_ref() };
        match end {
            None | Some(TurnEndReason::Aborted { .. } | TurnEndReason::Error { .. }) => {}
            Some(other) => {
                self.report.trace(format!(
                    "person: turn {} was cancelled right after it continued, yet it ended {}",
                    outcome.turn,
                    other.kind()
                ));
                self.report.fault(ACCEPTED_WRONGLY);
            }
        }
    }

    /// One call: a second worker's decision at the same moment (refused while this one owns
    /// the session), the person's own, and their second thoughts (refused).
    async fn decide_one(&self, agent: &Agent, (store, id): (&dyn Store, &SessionId), call: &PendingApproval) {
        let decision = self.decision();
        if self.plan.race {
            let at_once = request(call, decision.unwrap_or(Decision::Approved));
            match decide(store, id, &at_once, self.seams.clock.now_ms(), &self.seams.secrets) {
                Err(faultline_runtime::Error::SessionLocked { .. }) => self.report.fault("approval-race"),
                Err(e) => self.report.trace(format!("person: the second worker was refused: {e}")),
                Ok(_) => {
                    self.report
                        .trace(format!("person: a second worker decided {} while the owner lives", call.call_id));
                    self.report.fault(ACCEPTED_WRONGLY);
                }
            }
        }
        let Some(decision) = decision else { return };
        if self.plan.twice {
            return self.decide_twice_at_once(agent, call, decision).await;
        }
        match agent.decide(&request(call, decision)).await {
            Ok(_) => self.report.trace(format!("person: {} {}", decision.as_str(), call.call_id)),
            Err(e) => self.report.trace(format!("person: deciding {} was refused: {e}", call.call_id)),
        }
    }

    /// They decide, and think again the other way while the first decision is still being
    /// written: one of the two is taken, the other refused — never both.
    async fn decide_twice_at_once(&self, agent: &Agent, call: &PendingApproval, decision: Decision) {
        let (asked, again) = (request(call, decision), request(call, other(decision)));
        let (first, second) = tokio::join!(agent.decide(&asked), agent.decide(&again));
        let taken = if first.is_ok() { decision } else { other(decision) };
        match (first, second) {
            (Ok(_), Err(_)) | (Err(_), Ok(_)) => {
                self.report.trace(format!("person: {} {}", taken.as_str(), call.call_id));
                self.report.fault("approval-twice");
            }
            (Ok(_), Ok(_)) => {
                self.report.trace(format!("person: both decisions on {} were accepted", call.call_id));
                self.report.fault(ACCEPTED_WRONGLY);
            }
            (Err(e), Err(_)) => self.report.trace(format!("person: deciding {} was refused: {e}", call.call_id)),
        }
    }

    /// The person cancels the paused turn, then tries to decide one of its calls: nothing
    /// waits any more, so it must be refused.
    async fn cancel_then_decide(&self, agent: &Agent, life: u64) {
        let waiting = agent.awaiting_approval();
        agent.cancel();
        agent.when_idle().await;
        report_outcome(agent, self.report, life);
        self.report.fault("approval-cancelled");
        let Some(call) = waiting.first() else { return };
        match agent.decide(&request(call, Decision::Approved)).await {
            Err(_) => self.report.trace(format!("person: deciding {} after the cancel was refused", call.call_id)),
            Ok(_) => {
                self.report.trace(format!("person: deciding {} after the cancel was accepted", call.call_id));
                self.report.fault(ACCEPTED_WRONGLY);
            }
        }
    }

    /// Waits past the latest deadline of the calls still undecided (they expire when the
    /// turn continues); a call without one would wait for ever, and says so.
    async fn wait_out_the_undecided(&self, agent: &Agent) -> Result<(), String> {
        let undecided: Vec<PendingApproval> =
            agent.awaiting_approval().into_iter().filter(|c| c.decision.is_none()).collect();
        if undecided.is_empty() {
            return Ok(());
        }
        let Some(latest) =
            undecided.iter().map(|c| c.deadline_ms).collect::<Option<Vec<u64>>>().and_then(|d| d.into_iter().max())
        else {
            return Err("the person never decides and a waiting call has no approval deadline".into());
        };
        let now = self.seams.clock.now_ms();
        self.seams.clock.sleep(Duration::from_millis(latest.saturating_sub(now) + 1)).await;
        Ok(())
    }
}

/// While the host was down, the person decided through another worker: `approval::decide` on
/// the store, which takes the session over from the dead incarnation. Refused when the session
/// needs crash repair first (the restarted agent decides then).
pub(crate) fn decide_while_down(
    plan: &Plan,
    (store, id): (&dyn Store, &SessionId),
    seams: &Seams,
    report: &dyn LifeReport,
) {
    let Ok(inspection) = store.inspect(id) else { return };
    let person = ActingPerson::new(plan.clone(), seams, report);
    let Some(decision) = person.decision() else { return };
    for call in awaiting_approval(&inspection.records).iter().filter(|c| c.decision.is_none()) {
        match decide(store, id, &request(call, decision), seams.clock.now_ms(), &seams.secrets) {
            Ok(_) => {
                report.fault("approval-while-down");
                report.trace(format!("person: {} {} through another worker", decision.as_str(), call.call_id));
            }
            Err(e) => report.trace(format!("person: deciding {} while down was refused: {e}", call.call_id)),
        }
    }
}
