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
    ($($variant:ident = $name:literal, $kind:ident, $protects:literal, $evidence:literal, $advice:literal;)*) => {
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

            /// What to do when it breaks and the checker has nothing more specific to say:
            /// where the cause lies (a runtime defect, the agent's code, a setting, the
            /// scenario file) and what would prevent it.
            pub fn advice(self) -> &'static str {
                match self { $(Invariant::$variant => $advice,)* }
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
        "every byte of the agent's files, the trace, the model server's request bodies, the gateway's payloads",
        "Scrub held secrets by value (Secrets::scrub_held) on every path text leaves by, and never let a tool print or send a secret its process holds.";
    FalseCorrupt = "false-corrupt", Safety,
        "Recovery refuses a log only for damage no crash, torn write or power loss explains.",
        "the harness's own record of the bit rot it applied (none)",
        "A runtime defect in recovery's scan: damage a crash explains (a torn tail, a power-loss hole) was refused as corrupt; replay the seed and hold the scan's verdict against the fault filesystem's record.";
    RefusalLeftFileUntouched = "refusal-left-file-untouched", Safety,
        "A log refused as corrupt is left exactly as it was found.",
        "the rotted file's bytes right after the rot, against the disk at the end",
        "A runtime defect: recovery wrote to a log it refused; a path that refuses or inspects must open the file read-only.";
    RotRefused = "rot-refused", Safety,
        "Bit rot inside the durable prefix is refused, never recovered from.",
        "the harness's own record of the rot it applied",
        "A runtime defect in recovery's scan: damage no crash explains was recovered from instead of refused; only the unsynced tail may be excused.";
    UnprovokedStop = "unprovoked-stop", Safety,
        "Only an injected disk failure may stop the agent.",
        "the disk failures the fault filesystem returned",
        "The agent stopped with no disk fault injected: read the stop's reason; a write guard refusing a record the runtime built is a runtime defect.";
    Liveness = "liveness", Liveness,
        "Once faults heal, every submitted message ends in a closed turn within the liveness bound the agent's own settings promise.",
        "the user messages the simulated user submitted, against the recovered transcript",
        "A wait nothing ended within the agent's own bound: replay the seed and read the trace from the heal on; a tool without a deadline, or a runtime defect, leaves a wait open.";
    LogInvariants = "log-invariants", Safety,
        "The recovered transcript passes every log invariant (FAILURE-EVENT-LOG).",
        "the recovered transcript, read back from the disk",
        "A runtime defect: the recovered transcript breaks the log rule the evidence names (FAILURE-EVENT-LOG); the writer must never produce what the reader refuses.";
    TurnClosed = "turn-closed", Safety,
        "A converged run leaves no turn open.",
        "the recovered transcript",
        "A runtime defect: recovery left a turn open; every interrupted turn must be closed by a repair record.";
    PlannedCrashFired = "planned-crash-fired", Expectation,
        "A scenario's planned crashes fire as many times as it says.",
        "the crashes the driver carried out",
        "The scenario's crash points are not reached as often as it says: the code path moved; update the crash's hit or expect.crashes_fired, or find why it moved.";
    DurablePrefix = "durable-prefix", Safety,
        "Everything acknowledged durable, and everything the disk synced, survives every crash byte for byte.",
        "the barrier's acknowledgements observed outside the host, and the disk witness's synced records",
        "A runtime defect in persistence: a record acknowledged or synced durable was lost or changed by a crash; check the fsync of the file and of its directory, and the truncate-back after a failed append.";
    OutcomeDurable = "outcome-durable", Safety,
        "A turn reported kept has its turn/end, saying the same, synced strictly before the report.",
        "the outcomes the simulated user was given, against the disk witness's synced records",
        "A runtime defect: a turn was reported kept before its turn/end was synced; report an outcome only after the flush barrier.";
    AcceptedKeptOrReported = "accepted-kept-or-reported", Safety,
        "Every record the agent accepted becomes durable, or a persistence failure is reported after it, or a crash took it.",
        "what the agent's subscribers saw accepted and failing, against the disk witness's synced records",
        "A runtime defect: an accepted record was neither made durable nor reported failed; a failed batch must be reported, never dropped.";
    AnswerLimit = "answer-limit", Safety,
        "No stored answer is above the agent's answer limit.",
        "the recovered transcript and the scenario's limit",
        "A runtime defect: an answer above the agent's answer limit was stored; the adapter must stop reading at the limit.";
    ToolOutputLimit = "tool-output-limit", Safety,
        "No stored tool output is above the tool-output limit and its marker.",
        "the recovered transcript and the runtime's published limit",
        "A runtime defect: a tool output above the limit was stored; the runtime must cut it at the limit and mark the cut.";
    ToolOutputAsPrinted = "tool-output-as-printed", Safety,
        "A tool's output is stored as printed, or cut exactly at the limit.",
        "the text the scenario's tool printed",
        "A runtime defect: a tool's output was changed on the way to the transcript; it is stored as printed or cut exactly at the limit.";
    FailureMessageBounded = "failure-message-bounded", Safety,
        "A provider's error text kept in a failure is bounded.",
        "the recovered transcript",
        "A runtime defect: a provider's error text was kept unbounded; a failure keeps at most the message limit.";
    IntentBeforeEffect = "intent-before-effect", Safety,
        "Every effect the gateway (or a service of an agent under test) received has its tool/call synced strictly before it.",
        "the gateway's receipts and the services' records against the disk witness's synced records, in one order of events",
        "An effect arrived before its tool/call was durable: make a tool's requests only from inside its call (the runtime dispatches after the intent is synced), never from a task of its own.";
    ReceiptMatchesCall = "receipt-matches-call", Safety,
        "The gateway received what the tool call asked for.",
        "the gateway's receipts and the durable tool/call arguments",
        "A runtime defect in the delivery queue: what the gateway received differs from the durable tool/call's arguments.";
    FencedEpoch = "fenced-epoch", Safety,
        "Once a worker's session is taken over, no record and no tool dispatch of that worker lands: nothing comes from a fenced epoch.",
        "the harness's own record of the takeover and the log it found, each worker's accepted records and tool dispatches stamped outside the runtime, the store read back at the end",
        "A runtime defect: a worker wrote or dispatched after its session was taken over; every write and dispatch must carry and check the lease epoch.";
    AnswerLookedUp = "answer-looked-up", Safety,
        "A store write whose answer was lost is looked up before it is sent again: a worker is never refused by the lease its own lost takeover took, and no batch lands twice.",
        "the store link's own record of every answer it lost, each open the harness saw refused and the holder it named, the store read back at the end",
        "A runtime defect: a takeover or an append whose answer was lost was sent again blind; look the store up first (store/lost_answer.rs) and resend only what never landed.";
    AtMostOnce = "at-most-once", Safety,
        "An effect reaches the gateway (or a service, per service) at most once per execution id, across restarts.",
        "the gateway's receipts and the services' records (attributed by the runtime-stamped execution id)",
        "An effect came twice for one call: send ToolInvocation::execution_id as the idempotency key on every attempt to a service that honours it, or end a call whose reply was lost as ToolOutput::Unknown instead of repeating it.";
    ResultMatchesReceipt = "result-matches-receipt", Safety,
        "What the transcript says of an effect agrees with what the gateway or a service received.",
        "the gateway's receipts and the services' records against the recovered tool results",
        "The transcript contradicts what was received: a call whose request may have arrived must end TOOL_OUTCOME_UNKNOWN (ToolOutput::Unknown), never not-started or failed.";
    AnswerHeard = "answer-heard", Safety,
        "A tool that answered (within its deadline, or after it within the cancel's grace) is heard: its result never reads as stopped before it acted.",
        "the local tools' and MCP servers' own records of each answer they gave, against the recovered results",
        "A runtime defect: a result reads TOOL_TIMEOUT or ABORTED although the tool answered; keep the answer that arrived (or TOOL_OUTCOME_UNKNOWN when none did), never a result that says the call did nothing.";
    ApprovalMatchesEffect = "approval-matches-effect", Safety,
        "No effect of a call that waits for approval happens without a synced approval of that call, bound to the digest of its own arguments; no decision is accepted where it must be refused, and a turn cancelled as it continues does not go on.",
        "the gateway's receipts and the tools' own records of each run, against the disk witness's synced approval records and tool/calls; the person's own record of what was accepted and of how a turn they cancelled ended",
        "A runtime defect: a call that needs a person's approval ran without one bound to its arguments (or a decision was accepted twice, after a cancel, or beside a live owner, or a cancel was lost); check and queue a decision in one step, and dispatch only after an approval/decided whose digest is the call's own.";
    ApprovalDispatchedOnce = "approval-dispatched-once", Safety,
        "An approved call runs at most once, across crashes, resumes and workers.",
        "the gateway's receipts and the tools' own records of each run, by execution id",
        "A runtime defect: an approved call ran twice; a call whose approval/dispatched is durable and whose result was lost is TOOL_OUTCOME_UNKNOWN, never dispatched again.";
    DeniedNeverRuns = "denied-never-runs", Safety,
        "A call that was denied, expired or cancelled while it waited never runs.",
        "the gateway's receipts and the tools' own records of each run, against the synced decisions and the recovered results",
        "A runtime defect: a denied, expired or cancelled call ran; its result must be APPROVAL_DENIED, APPROVAL_EXPIRED or ABORTED_BEFORE_DISPATCH and its body never started.";
    DecisionDurableBeforeDispatch = "decision-durable-before-dispatch", Safety,
        "An approved call's decision and its approval/dispatched are synced strictly before its effect.",
        "the disk witness's synced approval records against the gateway's receipts and the tools' records, in one order of events",
        "A runtime defect: an approved call's effect came before its approval/decided and approval/dispatched were durable; flush the dispatch record (and the decision with it) before the body starts.";
    RetryBudget = "retry-budget", Safety,
        "A step is retried no more than its policy allows.",
        "the model server's request log",
        "A runtime defect: a step was retried more often than provider.retry_policy.max_retries allows.";
    RetryAfterHonoured = "retry-after-honoured", Safety,
        "A retry after provider advice within the cap waits at least the advice.",
        "the model server's request log and clock, and the scripted responses",
        "A runtime defect: a retry ignored the provider's Retry-After although it was within the backoff cap.";
    FinalFailureNotRetried = "final-failure-not-retried", Safety,
        "A failure no policy retries ends its step.",
        "the model server's request log and the scripted responses",
        "A runtime defect: a failure outside provider.retry_policy.retryable_codes was retried.";
    AnswerNotRetried = "answer-not-retried", Safety,
        "A complete answer (text, tool calls or a refusal) is never requested again as a failure would be.",
        "the model server's request log and the scripted responses",
        "A runtime defect: a complete answer was taken for a failure and requested again.";
    RetryBackoff = "retry-backoff", Safety,
        "A retry waits at least SPEC's backoff floor for its number.",
        "the model server's request log and clock",
        "A runtime defect: a retry came sooner than its backoff floor; every retry waits and is logged as llm/retry first.";
    FailureCodeAsServed = "failure-code-as-served", Safety,
        "Every recorded failure carries the code of what the server served.",
        "the scripted responses, read by the oracle's own classifier",
        "A runtime defect in the adapter's classifier: the recorded code differs from what the server served (FAILURE-ADAPTER-BOUNDARY).";
    AnswerKept = "answer-kept", Safety,
        "A complete answer the provider sent (by its specification, as the world catalog reads it) is kept as its step's answer, never recorded as a failure.",
        "the world catalog's reading of each served response, against the recovered transcript",
        "A runtime defect in the adapter: an answer its specification calls complete was taken for a failure (a stop read as an error, a stream that pinged while the provider queued the request given up); read the entry's source (docs/internals/world-catalog.md) and read it as an answer.";
    FinalCallsNotRun = "final-calls-not-run", Safety,
        "A tool call in an answer cut by the token limit or refused is never run.",
        "the world catalog's reading of each served response, against the tool/call records after it",
        "A runtime defect: a call the provider cut short (max_tokens, length, a refusal) was dispatched; a step that ends at the token limit or in a refusal runs none of its calls.";
    RequestAccepted = "request-accepted", Safety,
        "Every request the runtime sends (after a retry, a crash and its repair) is one the provider's API accepts.",
        "the model server's validator: each provider's own 400 rules, applied to the bytes it received",
        "A runtime defect in the request writer or in crash repair: the history sent breaks the provider's rules (the refusal quotes which), and the session cannot go on; every tool call needs its result next, and signed reasoning must come back exactly as signed.";
    Expectation = "expectation", Expectation,
        "What a scenario file says of its own run holds.",
        "the scenario's [expect] table against the transcript, receipts and requests",
        "The scenario file's [expect] table no longer holds: if the behaviour changed on purpose, update the file; otherwise the evidence names what regressed.";
    PlannedFaultFired = "planned-fault-fired", Expectation,
        "A scenario's named fault families fire.",
        "what the servers served, the fault filesystem returned and the witnesses saw",
        "A fault the scenario names never happened, so the scenario tests nothing: move its window or crash point to where the workload is.";
    Parity = "parity", Harness,
        "A real run recovers the simulator's transcript, record by record.",
        "both worlds' recovered transcripts, normalised",
        "The real run recovered another transcript than the simulator: the first differing record shows where the simulated seams part from the operating system.";
    RealRun = "real-run", Harness,
        "The real harness could run the scenario.",
        "the harness's own errors",
        "The real harness could not run the scenario: the error names what is missing (a binary, a port, a permission).";
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
            assert!(invariant.advice().ends_with('.'), "{invariant}: advice in sentences");
        }
    }
}

/// A broken invariant: the evidence that broke it and the advice that fits that evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// The evidence: where and what.
    pub detail: String,
    /// What would prevent it, fitted to the evidence where the checker can (the catalog's
    /// [`Invariant::advice`] otherwise).
    pub advice: String,
    /// Simulated ms at the end of the run (or of the offending event).
    pub at_ms: u64,
}

impl Violation {
    /// A violation of `invariant` with the catalog's advice.
    pub fn new(invariant: Invariant, detail: String, at_ms: u64) -> Self {
        Self { invariant, detail, advice: invariant.advice().to_owned(), at_ms }
    }

    /// The same violation with advice fitted to its evidence.
    pub fn advised(mut self, advice: String) -> Self {
        self.advice = advice;
        self
    }
}
