//! The catalog: every invariant the oracle checks, what it protects and the evidence it reads.
//! A violation names one of these; nothing else can be named.

use serde::{Serialize, Serializer};

/// What kind of promise an invariant is: what a planted bug may be "caught" by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Nothing bad happens: a broken one is a bug whatever the timing.
    Safety,
    /// Something good eventually happens: the workload converges once faults heal.
    Liveness,
    /// What one scenario file says of its own run (turn ends, receipts, the faults it needs).
    Expectation,
    /// The harness itself could not judge (a real run that could not run, parity).
    Harness,
}

macro_rules! catalog {
    ($($variant:ident = $name:literal, $kind:ident, $protects:literal, $evidence:literal;)*) => {
        /// One invariant of the catalog.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Invariant {
            $(
                #[doc = $protects]
                $variant,
            )*
        }

        impl Invariant {
            /// Every invariant, in catalog order.
            pub const ALL: &'static [Invariant] = &[$(Invariant::$variant),*];

            /// The name violations and reports use.
            pub fn name(self) -> &'static str {
                match self { $(Invariant::$variant => $name,)* }
            }

            /// Safety, liveness, an expectation, or the harness's own.
            pub fn kind(self) -> Kind {
                match self { $(Invariant::$variant => Kind::$kind,)* }
            }

            /// What it protects, in one sentence.
            pub fn protects(self) -> &'static str {
                match self { $(Invariant::$variant => $protects,)* }
            }

            /// The evidence it reads: never the runtime's own word for what it checks.
            pub fn evidence(self) -> &'static str {
                match self { $(Invariant::$variant => $evidence,)* }
            }

            /// The invariant named `name`.
            pub fn named(name: &str) -> Option<Invariant> {
                Self::ALL.iter().copied().find(|i| i.name() == name)
            }
        }
    };
}

catalog! {
    SecretLeak = "secret-leak", Safety,
        "No secret the agent holds (the provider key, the gateway token) leaves the process or reaches its disk.",
        "every byte of the agent's files, the trace, the model server's request bodies, the gateway's payloads";
    FalseCorrupt = "false-corrupt", Safety,
        "Recovery refuses a log only for damage no crash, torn write or power loss explains.",
        "the harness's own record of the bit rot it applied (none)";
    RefusalLeftFileUntouched = "refusal-left-file-untouched", Safety,
        "A log refused as corrupt is left exactly as it was found.",
        "the rotted file's bytes right after the rot, against the disk at the end";
    RotRefused = "rot-refused", Safety,
        "Bit rot inside the durable prefix is refused, never recovered from.",
        "the harness's own record of the rot it applied";
    UnprovokedStop = "unprovoked-stop", Safety,
        "Only an injected disk failure may stop the agent.",
        "the disk failures the fault filesystem returned";
    Liveness = "liveness", Liveness,
        "Once faults heal, every submitted message ends in a closed turn within the budget.",
        "the user messages the simulated user submitted, against the recovered transcript";
    LogInvariants = "log-invariants", Safety,
        "The recovered transcript passes every log invariant (SPEC §2).",
        "the recovered transcript, read back from the disk";
    TurnClosed = "turn-closed", Safety,
        "A converged run leaves no turn open.",
        "the recovered transcript";
    PlannedCrashFired = "planned-crash-fired", Expectation,
        "A scenario's planned crashes fire as many times as it says.",
        "the crashes the driver carried out";
    DurablePrefix = "durable-prefix", Safety,
        "Everything acknowledged durable, and everything the disk synced, survives every crash byte for byte.",
        "the barrier's acknowledgements observed outside the host, and the disk witness's synced records";
    OutcomeDurable = "outcome-durable", Safety,
        "A turn reported kept has its turn/end, saying the same, synced strictly before the report.",
        "the outcomes the simulated user was given, against the disk witness's synced records";
    AcceptedKeptOrReported = "accepted-kept-or-reported", Safety,
        "Every record the agent accepted becomes durable, or a persistence failure is reported after it, or a crash took it.",
        "what the agent's subscribers saw accepted and failing, against the disk witness's synced records";
    AnswerLimit = "answer-limit", Safety,
        "No stored answer is above the agent's answer limit.",
        "the recovered transcript and the scenario's limit";
    ToolOutputLimit = "tool-output-limit", Safety,
        "No stored tool output is above the tool-output limit and its marker.",
        "the recovered transcript and the runtime's published limit";
    ToolOutputAsPrinted = "tool-output-as-printed", Safety,
        "A tool's output is stored as printed, or cut exactly at the limit.",
        "the text the scenario's tool printed";
    FailureMessageBounded = "failure-message-bounded", Safety,
        "A provider's error text kept in a failure is bounded.",
        "the recovered transcript";
    IntentBeforeEffect = "intent-before-effect", Safety,
        "Every effect the gateway (or a service of an agent under test) received has its tool/call synced strictly before it.",
        "the gateway's receipts and the services' records against the disk witness's synced records, in one order of events";
    ReceiptMatchesCall = "receipt-matches-call", Safety,
        "The gateway received what the tool call asked for.",
        "the gateway's receipts and the durable tool/call arguments";
    FencedEpoch = "fenced-epoch", Safety,
        "Once a worker's session is taken over, no record and no tool dispatch of that worker lands: nothing comes from a fenced epoch.",
        "the harness's own record of the takeover and the log it found, each worker's accepted records and tool dispatches stamped outside the runtime, the store read back at the end";
    AtMostOnce = "at-most-once", Safety,
        "An effect reaches the gateway (or a service, per service) at most once per execution id, across restarts.",
        "the gateway's receipts and the services' records (attributed by the runtime-stamped execution id)";
    ResultMatchesReceipt = "result-matches-receipt", Safety,
        "What the transcript says of an effect agrees with what the gateway or a service received.",
        "the gateway's receipts and the services' records against the recovered tool results";
    RetryBudget = "retry-budget", Safety,
        "A step is retried no more than its policy allows.",
        "the model server's request log";
    RetryAfterHonoured = "retry-after-honoured", Safety,
        "A retry after provider advice within the cap waits at least the advice.",
        "the model server's request log and clock, and the scripted responses";
    FinalFailureNotRetried = "final-failure-not-retried", Safety,
        "A failure no policy retries ends its step.",
        "the model server's request log and the scripted responses";
    AnswerNotRetried = "answer-not-retried", Safety,
        "A complete answer (text, tool calls or a refusal) is never requested again as a failure would be.",
        "the model server's request log and the scripted responses";
    RetryBackoff = "retry-backoff", Safety,
        "A retry waits at least SPEC's backoff floor for its number.",
        "the model server's request log and clock";
    FailureCodeAsServed = "failure-code-as-served", Safety,
        "Every recorded failure carries the code of what the server served.",
        "the scripted responses, read by the oracle's own classifier";
    Expectation = "expectation", Expectation,
        "What a scenario file says of its own run holds.",
        "the scenario's [expect] table against the transcript, receipts and requests";
    PlannedFaultFired = "planned-fault-fired", Expectation,
        "A scenario's named fault families fire.",
        "what the servers served, the fault filesystem returned and the witnesses saw";
    Parity = "parity", Harness,
        "A real run recovers the simulator's transcript, record by record.",
        "both worlds' recovered transcripts, normalised";
    RealRun = "real-run", Harness,
        "The real harness could run the scenario.",
        "the harness's own errors";
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Invariant {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl PartialEq<&str> for Invariant {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl PartialEq<str> for Invariant {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<String> for Invariant {
    fn eq(&self, other: &String) -> bool {
        self.name() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_name_their_invariant() {
        let names: std::collections::BTreeSet<&str> = Invariant::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), Invariant::ALL.len());
        for invariant in Invariant::ALL {
            assert_eq!(Invariant::named(invariant.name()), Some(*invariant));
            assert!(invariant.protects().ends_with('.'), "{invariant}: one sentence");
            assert!(!invariant.evidence().is_empty(), "{invariant}");
        }
    }
}

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
