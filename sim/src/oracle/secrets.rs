//! FAILURE-SECRETS: a secret of the run (the provider key, the gateway token) appears nowhere
//! the agent wrote or sent — not in a byte of its session file or outbox journal (whatever
//! survived the crashes), not in the trace, not in a request body the model server received
//! (a key in a tool's output would ride the next request), not in a payload the gateway
//! received (a key the model wrote into a tool's arguments would leave the process with the
//! effect). Checked whether or not the run converged: a leak is a safety violation, never
//! excused as "no liveness".

use super::evidence::{Found, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut Found) {
    let secrets = [
        ("the provider key", crate::world::setup::sim_secret(evidence.seed)),
        ("the gateway token", crate::world::setup::gateway_token(evidence.seed)),
    ];
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
fn leaks_of(what: &str, secret: &str, evidence: &RunEvidence<'_>, found: &mut Found) -> bool {
    let before = found.0.len();
    let mut leak =
        |place: String| found.fail(Invariant::SecretLeak, format!("{what} appears in {place}"), evidence.end_ms);
    let finder = memchr::memmem::Finder::new(secret.as_bytes());
    // The disk holds every record that survived; the records accepted by the last
    // incarnation but lost in a crash never left the process.
    for (path, bytes) in &evidence.world.disk {
        if let Some(at) = finder.find(bytes) {
            leak(format!("{path} at byte {at}"));
        }
    }
    if let Some(line) = evidence.world.trace.iter().find(|line| finder.find(line.as_bytes()).is_some()) {
        leak(format!("the trace line {line:?}"));
    }
    if let Some(n) = evidence.request_bodies.iter().position(|body| finder.find(body.as_bytes()).is_some()) {
        leak(format!("the body of model request {n}"));
    }
    if let Some(receipt) = evidence.receipts.iter().find(|r| finder.find(r.body.as_bytes()).is_some()) {
        leak(format!("the payload the gateway received for {}", receipt.execution_id));
    }
    if let Some(receipt) = evidence.service_receipts.iter().find(|r| finder.find(r.body.as_bytes()).is_some()) {
        leak(format!("the request {} received for {}", receipt.service, receipt.execution_id));
    }
    found.0.len() > before
}
