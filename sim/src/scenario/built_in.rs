//! The built-in and regression scenarios, compiled into the binary so a fresh clone's
//! `faultline sweep` needs no paths.

use super::schema::Scenario;

/// A built-in scenario's listing.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioInfo {
    /// Unique name.
    pub name: &'static str,
    /// The TOML text.
    pub text: &'static str,
}

macro_rules! scenarios {
    ($($name:literal),* $(,)?) => {
        /// Every built-in scenario, in listing order.
        pub const BUILT_IN_SCENARIOS: &[ScenarioInfo] = &[
            $(ScenarioInfo { name: $name, text: include_str!(concat!("../../../scenarios/", $name, ".toml")) },)*
        ];
    };
}

scenarios![
    "happy-tool-turn",
    "refused-then-up",
    "disconnect-mid-text",
    "partial-tool-call-then-disconnect",
    "empty-completion",
    "empty-and-malformed-bodies",
    "mid-stream-errors",
    "tool-call-finish-variants",
    "provider-shapes",
    "stalled-body",
    "partial-eof",
    "rate-limit-retry-after-seconds",
    "rate-limit-retry-after-ms",
    "rate-limit-over-cap",
    "retry-after-hostile",
    "mcp-tools",
    "tool-call-cut-by-token-limit",
    "refusal-inside-a-tool-call",
    "keep-alives-while-queued",
    "auth-401",
    "tool-timeout-slow-cleanup",
    "parallel-tools-cancelled",
    "cancel-during-backoff",
    "cancel-keep-inbox-wake",
    "sigkill-at-dispatch",
    "sigkill-mid-stream",
    "sigkill-after-tool-call-flush",
    "sigkill-after-side-effect",
    "crash-mid-flush",
    "crash-during-repair",
    "crash-during-outbox-finish",
    "torn-write-mid-append",
    "fsync-eio-on-append",
    "enospc-first-materialise",
    "disk-full-window",
    "gateway-partition-during-delivery",
    "model-partition-heals",
    "invalid-live-config-update",
    "echoed-secret",
    "power-loss-hole",
    "power-loss-hole-then-rot",
    "bit-rot-session",
    "bit-rot-journal",
    "hostile-session-lines",
    "oversize-output",
    "zombie-takeover",
    "zombie-woken-before-its-effect",
    "takeover-answer-lost",
    "approval-crash-while-waiting",
    "approval-crash-after-decision",
    "approval-crash-after-dispatch",
    "approval-denied",
    "approval-expired",
    "approval-cancelled",
    "approval-cancelled-after-continue",
    "mixed",
    "generated",
];

macro_rules! regressions {
    ($($name:literal),* $(,)?) => {
        /// Regression scenarios written by `faultline shrink` (`scenarios/regressions/`):
        /// replayed by CI at their seed against the clean build, and with their planted bug.
        pub const REGRESSION_SCENARIOS: &[ScenarioInfo] = &[
            $(ScenarioInfo { name: $name, text: include_str!(concat!("../../../scenarios/regressions/", $name, ".toml")) },)*
        ];
    };
}

regressions![
    "intent-before-effect-tool-body-before-flush",
    "at-most-once-unknown-claimable",
    "durable-prefix-ack-before-fsync",
    "intent-before-effect-ack-before-fsync",
    "at-most-once-unknown-claimable-refused",
    "outcome-durable-outcome-before-durable",
    "rot-refused-hole-past-the-damaged-frame-generated-5143",
    "rot-refused-hole-past-the-damaged-frame-generated-42582",
    "rot-refused-hole-past-the-damaged-frame-generated-70180",
    "rot-refused-hole-past-the-damaged-frame-mixed-5143",
    "rot-refused-hole-past-the-damaged-frame-mixed-42582",
    "rot-refused-hole-past-the-damaged-frame-mixed-54243",
    "rot-refused-hole-past-the-damaged-frame-mixed-70180",
    "false-corrupt-lost-sector-after-a-stray-zero",
];

impl Scenario {
    /// A built-in or regression scenario by name.
    pub fn built_in(name: &str) -> Option<Scenario> {
        BUILT_IN_SCENARIOS
            .iter()
            .chain(REGRESSION_SCENARIOS)
            .find(|s| s.name == name)
            .map(|s| Scenario::parse(s.text).expect("built-in scenarios parse"))
    }
}
