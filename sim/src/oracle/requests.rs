//! `request-accepted`: every request the runtime sent is one the provider would take. The
//! evidence is the model server's validator (`model_server/validate.rs` for Anthropic and
//! Gemini, `model_server/request.rs` for OpenAI), run on the bytes it received — never the
//! runtime's own idea of its history.

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::{Invariant, Violation};

/// Each refused request is a violation that quotes the provider's words.
pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    for exchange in evidence.exchanges {
        let Some(problem) = &exchange.refused else { continue };
        found.0.push(Violation::new(
            Invariant::RequestAccepted,
            format!(
                "model request {} ({}) was refused as the provider's API refuses it: {problem}",
                exchange.n,
                exchange.format.name()
            ),
            exchange.at_ms,
        ));
    }
}
