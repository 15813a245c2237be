//! The person of a scenario's approval family (FAILURE-APPROVAL): what they decide on each
//! call a paused turn waits on, how late, and how they misbehave — decide twice, decide from a
//! second worker at once, cancel the turn and decide after, cancel right after continuing,
//! decide while the host is down.

use serde::{Deserialize, Serialize};

/// Longest a person thinks before deciding, in simulated ms.
pub const PERSON_THINK_MS_MAX: u64 = 60_000;
/// The approval deadline of a scenario tool that names none, in simulated ms: a person who
/// never decides must not hold the workload for ever.
pub const APPROVAL_DEADLINE_MS_DEFAULT: u64 = 5_000;

/// What the person answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PersonDecision {
    /// Approves every call.
    #[default]
    Approve,
    /// Denies every call, with a reason.
    Deny,
    /// Never decides: each call expires at its deadline.
    Never,
}

/// `[faults.person]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Person {
    /// What they answer (default: approve).
    #[serde(default)]
    pub decision: PersonDecision,
    /// How long after the pause they decide, in ms (0..=[`PERSON_THINK_MS_MAX`]); past a call's
    /// deadline the decision is refused and the call expires.
    #[serde(default)]
    pub think_ms: u64,
    /// They decide each call a second time, the other way: it must be refused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub twice: bool,
    /// A second worker decides each call at the same moment, through the store, while this
    /// one owns the session: refused (a live owner decides).
    #[serde(default, skip_serializing_if = "is_false")]
    pub race: bool,
    /// They cancel the paused turn first, then decide: refused (nothing waits any more).
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel_first: bool,
    /// They decide, continue the turn and cancel it in the same breath: the turn ends
    /// aborted and none of its calls runs (the cancel reaches a turn not yet taken up again).
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel_after_continue: bool,
    /// While the host is down after a crash, they decide through another worker (the store,
    /// taken over from the dead owner): the restarted agent honours that decision.
    #[serde(default, skip_serializing_if = "is_false")]
    pub while_down: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl Person {
    /// Its ranges.
    pub fn check(&self) -> Result<(), String> {
        if self.think_ms > PERSON_THINK_MS_MAX {
            return Err(format!("faults.person.think_ms must be 0..={PERSON_THINK_MS_MAX}, got {}", self.think_ms));
        }
        Ok(())
    }
}
