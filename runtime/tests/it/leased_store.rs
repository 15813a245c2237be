//! The leased memory store (the simulator's fleet store): the lease rules PostgreSQL's
//! backend applies — a live lease refuses, an expired one is taken over, a renewal keeps it,
//! and a writer whose epoch moved on writes nothing — judged by one clock the test moves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::event::{Event, Record, TurnStart};
use faultline_runtime::seams::{BoxFuture, Clock, Monotonic};
use faultline_runtime::store::{MemoryStore, SessionLog, Statement, Store, StoreLink, Takeover};
use faultline_runtime::Error;

use crate::fixtures::TestProcess;
use crate::store_contract::sid;
use crate::support::{Log, T0};

const LEASE_MS: u64 = 3_000;

/// A clock only the test moves.
#[derive(Default)]
pub(crate) struct StepClock(Mutex<Duration>);

impl StepClock {
    pub(crate) fn advance_ms(&self, ms: u64) {
        *self.0.lock().unwrap() += Duration::from_millis(ms);
    }
}

impl Clock for StepClock {
    fn now(&self) -> Monotonic {
        Monotonic(*self.0.lock().unwrap())
    }

    fn now_ms(&self) -> u64 {
        T0 + self.0.lock().unwrap().as_millis() as u64
    }

    fn sleep(&self, _: Duration) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

/// Worker `a` holding session `s` (turn 1 written), worker `b` on the same store, the clock.
fn two_workers() -> (MemoryStore, Box<dyn SessionLog>, MemoryStore, Arc<StepClock>) {
    let world = TestProcess::world();
    let clock = Arc::new(StepClock::default());
    let a = MemoryStore::leased(TestProcess::new("worker-a", &world), clock.clone(), LEASE_MS).unwrap();
    let b = a.as_process(TestProcess::new("worker-b", &world));
    let mut log = Log::default();
    log.tool_turn(1);
    let mut writer = a.create(&sid("s"), T0).unwrap();
    writer.append(&log.records).unwrap();
    (a, writer, b, clock)
}

fn next_turn(log: &dyn SessionLog) -> Record {
    Record::new(log.next_seq(), T0, Event::TurnStart(TurnStart { turn: 2 }))
}

fn assert_fenced(log: &mut Box<dyn SessionLog>) {
    let error = log.append(&[next_turn(log.as_ref())]).unwrap_err();
    assert!(matches!(error, Error::Fenced { token: 1, current: 2, .. }), "{error}");
}

#[test]
fn a_live_lease_is_refused_and_an_expired_one_is_taken_over_fencing_the_old_writer() {
    let (_, mut zombie, b, clock) = two_workers();
    clock.advance_ms(LEASE_MS - 1);
    let refused = b.open(&sid("s"), Takeover::IfDead).unwrap_err();
    assert!(matches!(refused, Error::SessionLocked { .. }), "{refused}");
    clock.advance_ms(1);
    let taken = b.open(&sid("s"), Takeover::IfDead).unwrap();
    assert_eq!(taken.log.token(), 2);
    assert_fenced(&mut zombie);
    assert!(matches!(zombie.close(), Err(Error::Fenced { .. })), "the zombie cannot release either");
    assert_eq!(b.inspect(&sid("s")).unwrap().records, taken.loaded.records, "nothing of the zombie's landed");
}

#[test]
fn renewals_keep_a_lease_and_a_holder_that_stops_renewing_loses_it() {
    let (a, mut writer, b, clock) = two_workers();
    let every = a.renewal_interval().unwrap();
    assert_eq!(every, Duration::from_millis(LEASE_MS / 3));
    for _ in 0..6 {
        clock.advance_ms(every.as_millis() as u64);
        a.renew_leases();
        assert!(matches!(b.open(&sid("s"), Takeover::IfDead), Err(Error::SessionLocked { .. })));
    }
    // Stopped: no renewal for a whole lease.
    clock.advance_ms(LEASE_MS);
    b.open(&sid("s"), Takeover::IfDead).unwrap();
    // Waking, its renewal finds the epoch moved on and drops the lease; its write is refused.
    a.renew_leases();
    assert_fenced(&mut writer);
}

#[test]
fn a_write_renews_the_lease_it_was_fenced_on() {
    let (_, mut writer, b, clock) = two_workers();
    clock.advance_ms(LEASE_MS - 1);
    writer.append(&[next_turn(writer.as_ref())]).unwrap();
    clock.advance_ms(LEASE_MS - 1);
    assert!(matches!(b.open(&sid("s"), Takeover::IfDead), Err(Error::SessionLocked { .. })));
}

#[test]
fn an_expired_lease_reads_as_no_owner_and_is_named_when_takeover_is_not_allowed() {
    let (_, _writer, b, clock) = two_workers();
    assert!(b.inspect(&sid("s")).unwrap().owner.is_some());
    clock.advance_ms(LEASE_MS);
    assert_eq!(b.inspect(&sid("s")).unwrap().owner, None, "an owner whose lease ran out holds nothing");
    let refused = b.open(&sid("s"), Takeover::Never).unwrap_err();
    assert!(matches!(&refused, Error::StaleOwner { holder, .. } if holder.contains("lease expired")), "{refused}");
}

#[test]
fn a_lease_outside_its_bounds_is_refused() {
    let process = TestProcess::new("w", &TestProcess::world());
    let clock = Arc::new(StepClock::default());
    for ms in [faultline_runtime::store::LEASE_MS_MIN - 1, faultline_runtime::store::LEASE_MS_MAX + 1] {
        assert!(MemoryStore::leased(process.clone(), clock.clone(), ms).is_err(), "{ms}");
    }
}

/// What a [`ScriptedLink`] does to the next statement of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Cut,
    AnswerLost,
}

/// A link that faults the statements its script names, in order, each once, and records
/// every statement it carried.
#[derive(Default)]
struct ScriptedLink(Mutex<Vec<(Statement, Fault)>>, Mutex<Vec<Statement>>);

impl ScriptedLink {
    fn new(script: &[(Statement, Fault)]) -> Arc<Self> {
        Arc::new(Self(Mutex::new(script.to_vec()), Mutex::default()))
    }

    /// Every statement sent so far, in order.
    fn sent(&self) -> Vec<Statement> {
        self.1.lock().unwrap().clone()
    }

    fn take(&self, statement: Statement, fault: Fault) -> bool {
        let mut script = self.0.lock().unwrap();
        let next = script.first() == Some(&(statement, fault));
        if next {
            script.remove(0);
        }
        next
    }

    fn spent(&self) -> bool {
        self.0.lock().unwrap().is_empty()
    }
}

impl StoreLink for ScriptedLink {
    fn cut_before(&self, _: &str, statement: Statement) -> bool {
        self.1.lock().unwrap().push(statement);
        self.take(statement, Fault::Cut)
    }

    fn answer_lost(&self, _: &str, statement: Statement, changed: bool) -> bool {
        changed && self.take(statement, Fault::AnswerLost)
    }
}

fn seqs(store: &MemoryStore) -> Vec<u64> {
    store.inspect(&sid("s")).unwrap().records.iter().map(|r| r.seq).collect()
}

#[test]
fn a_takeover_whose_answer_was_lost_is_found_committed_not_run_again() {
    let (_, mut zombie, b, clock) = two_workers();
    clock.advance_ms(LEASE_MS);
    let link = ScriptedLink::new(&[(Statement::TakeOver, Fault::AnswerLost)]);
    let b = b.with_link(link.clone());
    // Run again, the takeover would meet the lease its own first attempt took.
    let taken = b.open(&sid("s"), Takeover::IfDead).unwrap();
    assert!(link.spent(), "the takeover's answer was lost");
    assert_eq!(taken.log.token(), 2, "the first attempt's epoch, not a second takeover's");
    assert_fenced(&mut zombie);
    // The lease found is held: renewed, it stays this worker's.
    clock.advance_ms(LEASE_MS / 2);
    b.renew_leases();
    clock.advance_ms(LEASE_MS / 2 + 1);
    assert!(b.inspect(&sid("s")).unwrap().owner.is_some_and(|o| o.instance == "worker-b"));
}

/// A leased store whose statements cross `link`, and its first writer of session `s`.
fn writer_on(link: Arc<ScriptedLink>) -> (MemoryStore, Box<dyn SessionLog>) {
    let (store, writer, _) = writer_and_clock_on(link);
    (store, writer)
}

fn writer_and_clock_on(link: Arc<ScriptedLink>) -> (MemoryStore, Box<dyn SessionLog>, Arc<StepClock>) {
    let clock = Arc::new(StepClock::default());
    let process = TestProcess::new("worker-a", &TestProcess::world());
    let store = MemoryStore::leased(process, clock.clone(), LEASE_MS).unwrap().with_link(link);
    let writer = store.create(&sid("s"), T0).unwrap();
    (store, writer, clock)
}

/// Only a lost answer is looked up: a takeover refused by a live lease, and an append
/// refused as fenced, are answers, sent once and never followed by a lookup or a resend.
#[test]
fn a_refused_takeover_and_a_fenced_append_are_answers_not_looked_up() {
    let link = ScriptedLink::new(&[]);
    let (a, mut zombie, clock) = writer_and_clock_on(link.clone());
    let mut log = Log::default();
    log.tool_turn(1);
    zombie.append(&log.records).unwrap();
    let b = a.as_process(TestProcess::new("worker-b", &TestProcess::world()));
    let before = link.sent().len();
    assert!(matches!(b.open(&sid("s"), Takeover::IfDead), Err(Error::SessionLocked { .. })));
    assert_eq!(link.sent()[before..], [Statement::TakeOver], "one takeover, no lookup");
    clock.advance_ms(LEASE_MS);
    let _taken = b.open(&sid("s"), Takeover::IfDead).unwrap();
    let before = link.sent().len();
    let refused = zombie.append(&[next_turn(zombie.as_ref())]).unwrap_err();
    assert!(matches!(refused, Error::Fenced { .. }), "{refused}");
    assert_eq!(link.sent()[before..], [Statement::Append], "one append, no lookup, no resend");
    let before = link.sent().len();
    assert!(matches!(b.create(&sid("s"), T0), Err(Error::SessionExists(_))));
    assert_eq!(link.sent()[before..], [Statement::Create], "one create, not sent again");
}

#[test]
fn an_append_whose_answer_was_lost_or_that_was_cut_lands_once() {
    for fault in [Fault::AnswerLost, Fault::Cut] {
        let link = ScriptedLink::new(&[(Statement::Append, fault)]);
        let (store, mut writer) = writer_on(link.clone());
        let mut log = Log::default();
        log.tool_turn(1);
        writer.append(&log.records).unwrap();
        assert!(link.spent(), "{fault:?} happened");
        let want: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs(&store), want, "{fault:?}: the batch landed once");
    }
}

#[test]
fn a_batch_sent_again_after_a_lost_answer_and_a_failed_lookup_is_found_stored() {
    let link = ScriptedLink::new(&[(Statement::Append, Fault::AnswerLost), (Statement::Read, Fault::Cut)]);
    let (a, mut writer) = writer_on(link.clone());
    let mut log = Log::default();
    log.tool_turn(1);
    let batch = log.records;
    let lost = writer.append(&batch).unwrap_err();
    assert!(lost.to_string().contains("connection to the store was lost during a statement (read)"), "{lost}");
    assert!(link.spent());
    // The caller sends the same batch again: its seqs are taken by its own first copy.
    writer.append(&batch).unwrap();
    let want: Vec<u64> = batch.iter().map(|r| r.seq).collect();
    assert_eq!(seqs(&a), want, "the batch once, no seq twice");
}

/// The write-behind sends a failed batch again with the records queued behind it since: what
/// the first attempt landed is found, and only the rest is written.
#[test]
fn a_batch_sent_again_with_more_records_lands_only_the_rest() {
    let link = ScriptedLink::new(&[(Statement::Append, Fault::AnswerLost), (Statement::Read, Fault::Cut)]);
    let (a, mut writer) = writer_on(link.clone());
    let mut log = Log::default();
    log.tool_turn(1);
    let first = log.records.clone();
    writer.append(&first).unwrap_err();
    log.tool_turn(2);
    writer.append(&log.records).unwrap();
    let want: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs(&a), want, "every record once");
    assert_eq!(a.inspect(&sid("s")).unwrap().records, log.records);
}

/// The rule lives in one place (`store/lost_answer.rs`): planted there, a takeover sent
/// again blind is refused by its own lease.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_lost_answer_rerun_is_refused_by_its_own_lease() {
    let (_, _zombie, b, clock) = two_workers();
    clock.advance_ms(LEASE_MS);
    let b = b.with_link(ScriptedLink::new(&[(Statement::TakeOver, Fault::AnswerLost)]));
    faultline_runtime::testing::bugs::plant(&["lost-answer-rerun"]);
    let refused = b.open(&sid("s"), Takeover::IfDead).map(|_| ());
    faultline_runtime::testing::bugs::plant(&[]);
    assert!(matches!(&refused, Err(Error::SessionLocked { holder, .. }) if holder.contains("worker-b")), "{refused:?}");
}
