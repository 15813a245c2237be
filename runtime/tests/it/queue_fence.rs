//! One fencing rule for everything a session owns (issue 54, `outbox/fence.rs`): a delivery
//! enqueued under a session's epoch is neither queued, claimed nor finished once the session
//! was taken over, and the takeover's repair settles a row in flight `unknown`. Run on
//! PostgreSQL (a real server) and on the simulator's fleet queue (a journal beside the leased
//! memory store). Each step fails when its transition's epoch check is removed.

use std::sync::Arc;

use faultline_runtime::outbox::{DeliveryStatus, Enqueued, Finish, JournalOutbox, Outbox, QueueEvidence, SessionFence};
use faultline_runtime::production::{self, PgOutbox, PgStore};
use faultline_runtime::seams::Process;
use faultline_runtime::store::LEASE_MS_DEFAULT;
use faultline_runtime::store::{Evidence, MemoryStore, OutcomeEvidence, SessionLog, Store, Takeover};
use faultline_runtime::testing::PgServer;
use faultline_runtime::Error;

use crate::fixtures::{seams_with, FaultyFs, TestProcess};
use crate::leased_store::StepClock;
use crate::store_contract::sid;
use crate::support::T0;

const LEASE_MS: u64 = 3_000;

/// Two workers on one queue and one session store; `take_over` makes worker `b` the
/// session's writer while `a`, the zombie, still believes it is, and returns the new epoch.
struct Fleet {
    zombie: Arc<dyn Outbox>,
    heir: Arc<dyn Outbox>,
    /// Worker `a`'s writer, kept open: it is not released, it is overtaken.
    _held: Box<dyn SessionLog>,
    take_over: Box<dyn FnOnce() -> Box<dyn SessionLog>>,
}

/// The simulator's fleet: one journal shared as a database's queue, its fences read from the
/// leased memory store; the lease runs out on the test's clock.
fn journal_fleet(dir: &std::path::Path) -> Fleet {
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let clock = Arc::new(StepClock::default());
    let store = MemoryStore::leased(a.clone(), clock.clone(), LEASE_MS).unwrap();
    let held = store.create(&sid("s"), T0).unwrap();
    let seams = |process: Arc<dyn Process>| seams_with(process, Arc::new(FaultyFs::default()));
    let zombie = JournalOutbox::open(seams(a), dir.join("journal.jsonl")).unwrap().with_epochs(Arc::new(store.clone()));
    let heir = zombie.as_process(seams(b.clone()));
    let store_b = store.as_process(b);
    Fleet {
        zombie: Arc::new(zombie),
        heir: Arc::new(heir),
        _held: held,
        take_over: Box::new(move || {
            clock.advance_ms(LEASE_MS + 1);
            store_b.open(&sid("s"), Takeover::IfDead).unwrap().log
        }),
    }
}

/// Two workers on a real server; worker `a` is taken for dead, its lease still live.
fn pg_fleet(url: &str) -> Fleet {
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let seams = production::seams();
    let held = PgStore::connect(url, a.clone(), LEASE_MS_DEFAULT).unwrap().create(&sid("s"), T0).unwrap();
    let queue = |process: Arc<TestProcess>| -> Arc<dyn Outbox> {
        Arc::new(PgOutbox::connect(url, process, seams.clock.clone(), seams.entropy.as_ref()).unwrap())
    };
    let (zombie, heir) = (queue(a.clone()), queue(b.clone()));
    let store_b = PgStore::connect(url, b, LEASE_MS_DEFAULT).unwrap();
    Fleet {
        zombie,
        heir,
        _held: held,
        take_over: Box::new(move || {
            a.kill();
            store_b.open(&sid("s"), Takeover::IfDead).unwrap().log
        }),
    }
}

fn a_zombie_queues_claims_and_finishes_nothing_once_its_session_is_taken_over(fleet: Fleet) {
    let Fleet { zombie, heir, _held, take_over } = fleet;
    let old = SessionFence::new("s", 1);
    assert_eq!(zombie.enqueue_fenced(&old, "s:1:1:sent", "{}").unwrap(), Enqueued::New);
    assert_eq!(zombie.claim_next().unwrap().map(|c| c.execution_id).as_deref(), Some("s:1:1:sent"));
    assert_eq!(zombie.enqueue_fenced(&old, "s:1:1:queued", "{}").unwrap(), Enqueued::New);

    let heir_log = take_over();
    assert_eq!(heir_log.token(), 2, "the takeover moved the epoch on");

    // Enqueue: the zombie's new effect is refused, nothing written.
    let late = zombie.enqueue_fenced(&old, "s:1:2:late", "{}").unwrap_err();
    assert!(matches!(late, Error::Fenced { token: 1, current: 2, .. }), "{late}");
    assert_eq!(zombie.get("s:1:2:late").unwrap(), None, "nothing was queued");
    // Claim: what the zombie queued before the takeover is sent by no one.
    assert_eq!(heir.claim_next().unwrap(), None, "a row of the old epoch is not claimed");
    assert_eq!(zombie.claim_next().unwrap(), None);
    // Finish: the zombie's receipt is not recorded over the new owner's repair.
    assert!(!zombie.finish("s:1:1:sent", Finish::Delivered("ok".into())).unwrap(), "the zombie's finish is fenced");
    assert_eq!(zombie.get("s:1:1:sent").unwrap().unwrap().status, DeliveryStatus::Delivering);

    // An inspection reads what repair would find, and writes nothing.
    match QueueEvidence::read_only(heir.clone()).lookup("s:1:1:sent") {
        Some(Evidence::Uncertain { status, .. }) => assert_eq!(status, "delivering"),
        other => panic!("the row in flight, inspected: {other:?}"),
    }
    assert_eq!(heir.get("s:1:1:sent").unwrap().unwrap().status, DeliveryStatus::Delivering, "inspecting wrote nothing");

    // The new owner's repair: the row in flight becomes `unknown`, the queued one is taken.
    let evidence = QueueEvidence::new(heir.clone());
    match evidence.lookup("s:1:1:sent") {
        Some(Evidence::Uncertain { status, detail }) => {
            assert_eq!(status, "unknown");
            assert!(detail.contains("taken over during delivery"), "{detail}");
        }
        other => panic!("the row in flight: {other:?}"),
    }
    assert_eq!(heir.get("s:1:1:sent").unwrap().unwrap().status, DeliveryStatus::Unknown);
    assert_eq!(evidence.lookup("s:1:1:queued"), Some(Evidence::NeverClaimed));
    assert_eq!(heir.get("s:1:1:queued").unwrap().unwrap().status, DeliveryStatus::Failed);

    // The new owner's own effects flow, fenced by its epoch.
    let new = SessionFence::new("s", heir_log.token());
    assert_eq!(heir.enqueue_fenced(&new, "s:2:1:next", "{}").unwrap(), Enqueued::New);
    assert_eq!(heir.claim_next().unwrap().map(|c| c.execution_id).as_deref(), Some("s:2:1:next"));
    assert!(heir.finish("s:2:1:next", Finish::Delivered("ok".into())).unwrap());
    // A row of no session (an operator's) is fenced by nothing.
    zombie.enqueue("operator", "{}").unwrap();
    assert_eq!(zombie.claim_next().unwrap().map(|c| c.execution_id).as_deref(), Some("operator"));
}

#[test]
fn on_the_simulators_fleet_queue_a_zombie_queues_claims_and_finishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    a_zombie_queues_claims_and_finishes_nothing_once_its_session_is_taken_over(journal_fleet(dir.path()));
}

#[test]
fn on_postgres_a_zombie_queues_claims_and_finishes_nothing() {
    let Some(server) = PgServer::shared() else { return };
    a_zombie_queues_claims_and_finishes_nothing_once_its_session_is_taken_over(pg_fleet(&server.fresh_database()));
}
