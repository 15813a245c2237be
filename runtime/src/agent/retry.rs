//! The retry executor's decision (FAILURE-RETRY-EXECUTOR). The policy belongs to the provider
//! route; this only applies it.

use crate::event::{ErrorCode, Failure};
use crate::llm::RetryPolicy;

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait `delay_ms`, then make attempt number `retry + 1`.
    Retry {
        /// Retry number, 1-based.
        retry: u32,
        /// The wait.
        delay_ms: u64,
    },
    /// End the turn with the failure.
    GiveUp,
}

/// Decides whether failure number `retry` (1-based: the first failure asks for retry 1) of a
/// step is retried and after how long. `unit` draws `u ∈ [0, 1]` from the Entropy seam, and
/// is called only when a local backoff is computed.
///
/// Delay = `min(min(initial·2^(retry-1), max)·(1 − j + 2j·u), max)`. A provider Retry-After
/// within `max` is used verbatim (no jitter); above it, `normal` gives up and `always` falls
/// back to the local backoff. An abort is never retried.
pub fn decide(policy: &RetryPolicy, failure: &Failure, retry: u32, unit: impl FnOnce() -> f64) -> RetryDecision {
    assert!(retry >= 1, "retries are numbered from 1");
    // Never retried, whatever the mode: an abort is the caller's word, an answer too large for
    // a record would be just as large the next time, and an untrusted certificate comes back.
    if matches!(failure.code, ErrorCode::Aborted | ErrorCode::ResponseTooLarge | ErrorCode::TlsCertificate) {
        return RetryDecision::GiveUp;
    }
    if let RetryPolicy::Normal { max_retries, codes, .. } = policy {
        let planted =
            crate::testing::bugs::planted("stream-closed-retryable") && failure.code == ErrorCode::StreamClosed;
        if retry > *max_retries || !(codes.contains(&failure.code) || planted) {
            return RetryDecision::GiveUp;
        }
    }
    let backoff = policy.backoff();
    if let Some(advice) =
        failure.provider_retry_after_ms.filter(|_| !crate::testing::bugs::planted("ignore-retry-after"))
    {
        if advice <= backoff.max_delay_ms {
            return RetryDecision::Retry { retry, delay_ms: advice };
        }
        if matches!(policy, RetryPolicy::Normal { .. }) {
            return RetryDecision::GiveUp;
        }
    }
    let exponent = (retry - 1).min(62);
    let base = backoff.initial_delay_ms.saturating_mul(1u64 << exponent).min(backoff.max_delay_ms);
    let j = backoff.jitter_ratio;
    let u = unit().clamp(0.0, 1.0);
    let jittered = (base as f64 * (1.0 - j + 2.0 * j * u)).round() as u64;
    RetryDecision::Retry { retry, delay_ms: jittered.min(backoff.max_delay_ms) }
}
