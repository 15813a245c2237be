//! The invoicing agent under every fault faultline knows: the same `send_invoice` code as in
//! production, its HTTP calls crossing the simulated network to a simulated invoicing service
//! that records every invoice it receives (the oracle's evidence) and deduplicates by the
//! `Idempotency-Key`. Built with `--features retry-without-key`, `every_invoice_is_sent_at_most_once`
//! fails: a lost reply is retried without a key and the service bills twice.

use faultline_example_invoicing::{tools, IDEMPOTENCY_KEY, PROVIDER_TOML, SEND_INVOICE};
use faultline_sim::{AgentUnderTest, Harness, Service};

/// Seeds per run of the fault test: every fault family fires several times over these.
const SEEDS: u64 = 120;

fn agent() -> AgentUnderTest {
    AgentUnderTest::new("invoicing", |seams| tools(seams, "http://invoices"))
        .provider_toml(PROVIDER_TOML)
        .expect("the production provider settings parse")
        .service(Service::new("invoices").dedup_by_header(IDEMPOTENCY_KEY))
}

#[test]
fn every_invoice_is_sent_at_most_once() {
    let report = Harness::new(agent()).seeds(0..SEEDS).run();
    // The faults that can duplicate an invoice did fire: without them a pass proves nothing.
    for family in ["partition", "crash", "disconnect"] {
        assert!(report.families.keys().any(|f| f.starts_with(family)), "{family} never fired:\n{report}");
    }
    assert!(!report.crash_points.is_empty(), "no crash point reached:\n{report}");
    report.assert_passed();
}

#[test]
fn a_replayed_seed_is_the_same_run() {
    let harness = Harness::new(agent()).seeds(0..1);
    let (first, second) = (harness.replay("generated", 7), harness.replay("generated", 7));
    assert_eq!(first.trace_hash, second.trace_hash);
    assert!(
        first.service_receipts.iter().all(|r| r.service == "invoices"),
        "only the declared service received anything"
    );
    let calls = first
        .transcript
        .iter()
        .filter(|r| matches!(&r.event, faultline_runtime::event::Event::ToolCall(c) if c.name == SEND_INVOICE));
    assert!(calls.count() > 0, "the generated conversation calls send_invoice");
}
