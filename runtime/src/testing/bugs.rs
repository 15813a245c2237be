//! The planted-bug catalog: named switches, each removing one protection, so the simulator
//! can prove it catches their absence (issue: "prove the harness finds bugs").
//!
//! Compiled only with the `planted-bugs` feature, which production builds never enable;
//! without it [`planted`] is a constant `false` the optimiser deletes. Switches are
//! thread-local: a simulated run executes on one thread, so parallel tests and sweep workers
//! never see each other's bugs.

/// Every planted bug, with the protection it removes.
pub const CATALOG: [(&str, &str); 37] = [
    ("tool-body-before-flush", "the tool body runs before its tool/call is flushed"),
    ("stream-closed-retryable", "STREAM_CLOSED (clean EOF without [DONE]) is treated as retryable"),
    ("cite-failed-attempts", "the assistant/message cites the chunks of failed attempts"),
    ("no-sync-dir-after-link", "the parent directory is not synced after the first link"),
    ("no-truncate-back", "a failed append is not truncated back before the retry"),
    ("unknown-claimable", "unknown deliveries can be claimed (and sent) again"),
    ("repair-not-started", "crash repair marks durably started calls TOOL_NOT_STARTED"),
    ("ack-before-fsync", "the flush barrier acknowledges a batch before it is durable"),
    ("ignore-retry-after", "the provider's Retry-After is ignored (local backoff instead)"),
    ("drop-failed-batch", "write-behind drops a failed batch instead of re-queuing it"),
    ("scrub-by-pattern-only", "secrets are redacted by pattern only, never by value"),
    ("any-damage-is-torn", "the seed's torn rule: any damaged line without a later turn/end is a torn tail"),
    ("holes-are-corrupt", "a hole of zero bytes in the last write unit is called corrupt, not torn"),
    (
        "hole-past-the-damaged-frame",
        "a zstd frame whose checksum fails is called torn when a hole lies anywhere after it in the last unit",
    ),
    ("no-answer-limit", "an answer above the answer limit is stored instead of ending its attempt"),
    ("unlogged-retry", "a failed attempt is retried once more, silently: no llm/retry record, outside the budget"),
    ("outcome-before-durable", "a turn's outcome is reported kept without waiting for its turn/end to be durable"),
    ("refusal-as-empty", "a refusal is not read as content: the stream is an empty response, retried"),
    ("zombie-write-unfenced", "the leased memory store accepts a write from a writer whose epoch was taken over"),
    (
        "queue-epoch-unfenced",
        "the delivery queue enqueues, claims and finishes a session's deliveries under an epoch taken over",
    ),
    ("lost-answer-rerun", "a takeover or an append whose answer was lost is sent again without looking the store up"),
    ("signature-dropped", "signed reasoning is not sent back to Anthropic with the tool calls it preceded"),
    ("error-event-as-end", "an Anthropic error event inside a 200 stream is read as the end of the answer"),
    (
        "userspace-buffer-on-sync",
        "the production filesystem's sync fsyncs the file but leaves the last write in a userspace buffer",
    ),
    (
        "dispatch-before-durable",
        "an approved call's body starts before its approval/dispatched (and a decision taken in-process) is durable",
    ),
    (
        "decision-unbound",
        "a tool approved once in a turn runs its later calls unasked: a decision not bound to its arguments",
    ),
    (
        "approval-redispatch",
        "crash repair takes a dispatched approved call for one still waiting: it runs again on resume",
    ),
    ("cut-calls-sent", "the calls of a step cut by the token limit or a refusal are sent back with no result"),
    ("refused-call-run", "a call streamed before a refusal is run"),
    ("empty-answer-sent", "an answer with nothing to send back is sent as an empty assistant message"),
    ("pings-not-activity", "a ping re-arms nothing: a queued request that pings past the idle timeout is given up"),
    ("timeout-hides-answer", "a tool past its deadline reads TOOL_TIMEOUT whatever it answered"),
    ("mcp-reads-whole-stream", "an MCP reply stream is read to its end before the response in it is looked at"),
    ("mcp-no-resume", "an MCP stream closed after a priming event is not resumed with Last-Event-ID"),
    ("mcp-headers-unscrubbed", "an MCP server's header values are not held as secrets"),
    ("decision-raced", "a decision is checked, then queued after an await: two at once on one call both pass"),
    ("cancel-before-drive-lost", "a cancel right after a continue is lost: the continued turn runs on"),
];

/// The bugs planted below the seams the simulator replaces (in `production`, the real
/// filesystem): the simulator cannot see them by construction, only a real run can
/// (`faultline run --real`, `cli/tests/real_bugs.rs`).
pub const REAL_ONLY: [&str; 1] = ["userspace-buffer-on-sync"];

#[cfg(feature = "planted-bugs")]
thread_local! {
    static ACTIVE: std::cell::RefCell<std::collections::BTreeSet<String>> = const { std::cell::RefCell::new(std::collections::BTreeSet::new()) };
}

/// Whether bug `name` is planted on this thread.
#[inline]
pub fn planted(name: &str) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        ACTIVE.with(|active| active.borrow().contains(name))
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = name;
        false
    }
}

/// Plants exactly `bugs` on this thread (an empty list is the clean build).
#[cfg(feature = "planted-bugs")]
pub fn plant(bugs: &[&str]) {
    for bug in bugs {
        assert!(CATALOG.iter().any(|(name, _)| name == bug), "unknown planted bug {bug:?}");
    }
    ACTIVE.with(|active| *active.borrow_mut() = bugs.iter().map(|b| (*b).to_owned()).collect());
}

/// The bugs planted on a thread, carried to a thread that works on its behalf (a database
/// connection's): a bug planted in a caller shows in the work done for it. Empty, and free,
/// without the `planted-bugs` feature.
#[derive(Debug, Clone, Default)]
pub struct Carried {
    #[cfg(feature = "planted-bugs")]
    bugs: Vec<String>,
}

impl Carried {
    /// The bugs planted on this thread now.
    pub fn here() -> Carried {
        #[cfg(feature = "planted-bugs")]
        {
            Carried { bugs: ACTIVE.with(|active| active.borrow().iter().cloned().collect()) }
        }
        #[cfg(not(feature = "planted-bugs"))]
        {
            Carried {}
        }
    }

    /// Plants exactly these bugs on the current thread.
    pub fn plant_here(&self) {
        #[cfg(feature = "planted-bugs")]
        {
            let names: Vec<&str> = self.bugs.iter().map(String::as_str).collect();
            plant(&names);
        }
    }
}
