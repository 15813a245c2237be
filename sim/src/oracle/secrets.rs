//! FAILURE-SECRETS: a secret of the run (the provider key, the gateway token) appears nowhere
//! the agent wrote or sent — not in a byte of its session file or outbox journal (whatever
//! survived the crashes), not in the trace, not in a request body the model server received
//! (a key in a tool's output would ride the next request), not in a payload the gateway
//! received (a key the model wrote into a tool's arguments would leave the process with the
//! effect). Checked whether or not the run converged: a leak is a safety violation, never
//! excused as "no liveness".

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let mut secrets = vec![
        ("the provider key".to_owned(), crate::world::setup::sim_secret(evidence.seed)),
        ("the gateway token".to_owned(), crate::world::setup::gateway_token(evidence.seed)),
    ];
    secrets.extend(evidence.world.held_secrets.iter().cloned());
    for (what, secret) in secrets {
        // By halves: a whole secret holds both, and a secret split across two streamed deltas
        // leaks in two records, neither of which holds it whole.
        let (head, tail) = secret.split_at(secret.len() / 2);
        for (part, needle) in [(" (its first half at least)", head), (" (its second half)", tail)] {
            if leaks_of(&format!("{what}{part}"), needle, evidence, found) {
                break;
            }
        }
    }
}

/// Reports every place `secret` appears in; whether it appeared anywhere.
fn leaks_of(what: &str, secret: &str, evidence: &RunEvidence<'_>, found: &mut FoundViolations) -> bool {
    let before = found.0.len();
    let mut leak = |place: String, advice: &str| {
        found.fail_advised(
            Invariant::SecretLeak,
            format!("{what} appears in {place}"),
            advice.to_owned(),
            evidence.end_ms,
        );
    };
    // The runtime holds both secrets and scrubs them by value from everything it writes or
    // sends; only a tool of the embedder's can send one it holds itself.
    let runtime = "A runtime defect: every record, trace line and request the runtime writes is scrubbed of the \
                   secrets it holds, by value (Secrets::scrub_held), never by pattern; replay the seed and report it.";
    let finder = memchr::memmem::Finder::new(secret.as_bytes());
    // The disk holds every record that survived; the records accepted by the last
    // incarnation but lost in a crash never left the process.
    for (path, bytes) in &evidence.world.disk {
        if let Some(at) = finder.find(bytes) {
            leak(format!("{path} at byte {at}"), runtime);
        }
    }
    if let Some(line) = evidence.world.trace.iter().find(|line| finder.find(line.as_bytes()).is_some()) {
        leak(format!("the trace line {line:?}"), runtime);
    }
    if let Some(n) = evidence.request_bodies.iter().position(|body| finder.find(body.as_bytes()).is_some()) {
        leak(format!("the body of model request {n}"), runtime);
    }
    if let Some(receipt) = evidence.receipts.iter().find(|r| finder.find(r.body.as_bytes()).is_some()) {
        leak(format!("the payload the gateway received for {}", receipt.execution_id), runtime);
    }
    let in_request = |r: &&crate::world::ServiceReceipt| {
        finder.find(r.body.as_bytes()).is_some() || r.headers.iter().any(|(_, v)| finder.find(v.as_bytes()).is_some())
    };
    if let Some(receipt) = evidence.service_receipts.iter().find(in_request) {
        leak(
            format!("the request {} received for {}", receipt.service, receipt.execution_id),
            &format!(
                "A tool sent {what} to {}: a tool must never put a secret the runtime holds (the provider key, a \
                 token of the agent's) in a request; give the service its own credential.",
                receipt.service
            ),
        );
    }
    found.0.len() > before
}
