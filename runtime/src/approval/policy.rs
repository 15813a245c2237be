//! Which tools need a person's decision, who may give it, and for how long it is awaited.

/// Most deciders one tool may name.
pub const APPROVAL_DECIDERS_MAX: usize = 32;
/// Longest decider name (and `--by`), in bytes.
pub const APPROVAL_NAME_BYTES_MAX: usize = 128;
/// Longest reason a decision may carry, in bytes: the model reads a denial's reason.
pub const APPROVAL_REASON_BYTES_MAX: usize = 4096;
/// Longest approval deadline: thirty days.
pub const APPROVAL_DEADLINE_MS_MAX: u64 = 30 * 24 * 3_600_000;

/// A tool's approval rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalPolicy {
    /// Who may decide (empty: anyone who can write the session). At most
    /// [`APPROVAL_DECIDERS_MAX`] names of at most [`APPROVAL_NAME_BYTES_MAX`] bytes.
    pub deciders: Vec<String>,
    /// How long a request waits before it expires, in ms (none: for ever). At most
    /// [`APPROVAL_DEADLINE_MS_MAX`].
    pub deadline_ms: Option<u64>,
}

impl ApprovalPolicy {
    /// A policy: `deciders` (empty: anyone) and an optional deadline.
    ///
    /// # Panics
    /// On more deciders than [`APPROVAL_DECIDERS_MAX`], an empty or oversized name, or a
    /// deadline of 0 or above [`APPROVAL_DEADLINE_MS_MAX`] (the agent file checks the same and
    /// says so).
    pub fn new(deciders: Vec<String>, deadline_ms: Option<u64>) -> Self {
        assert!(deciders.len() <= APPROVAL_DECIDERS_MAX, "at most {APPROVAL_DECIDERS_MAX} deciders");
        assert!(
            deciders.iter().all(|d| !d.is_empty() && d.len() <= APPROVAL_NAME_BYTES_MAX),
            "decider names are 1..={APPROVAL_NAME_BYTES_MAX} bytes"
        );
        assert!(
            deadline_ms.is_none_or(|ms| (1..=APPROVAL_DEADLINE_MS_MAX).contains(&ms)),
            "approval deadlines are 1..={APPROVAL_DEADLINE_MS_MAX} ms"
        );
        Self { deciders, deadline_ms }
    }
}
