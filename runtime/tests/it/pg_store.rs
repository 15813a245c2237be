//! What only the PostgreSQL backend has: its schema's migrations, and stores opened for
//! inspection that never write (the shared contracts run in `store_contract.rs` and
//! `outbox_contract.rs`).

use faultline_runtime::outbox::Outbox;
use faultline_runtime::production::{self, PgOutbox, PgStore, SCHEMA_VERSION};
use faultline_runtime::store::LEASE_MS_DEFAULT;
use faultline_runtime::store::{SessionId, Store, Takeover};
use faultline_runtime::testing::PgServer;
use faultline_runtime::Error;

use crate::fixtures::TestProcess;

/// A fresh database, or `None` where PostgreSQL is not installed (the shared server says so).
fn database() -> Option<String> {
    PgServer::shared().map(PgServer::fresh_database)
}

#[test]
fn migrations_apply_once_and_readers_refuse_a_database_without_them() {
    let Some(url) = database() else { return };
    let process = production::seams().process;
    let refused = PgStore::connect_read_only(&url, process.clone()).unwrap_err();
    assert!(matches!(refused, Error::NotFaultlineDatabase { .. }), "{refused}");
    assert!(refused.to_string().contains("no faultline schema"), "{refused}");
    // The refusal created nothing: a second reader is refused the same way.
    assert!(PgStore::connect_read_only(&url, process.clone()).is_err());
    let applied = PgStore::migrate(&url).unwrap();
    assert_eq!(applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert!(PgStore::migrate(&url).unwrap().is_empty(), "a second migration applies nothing");
    PgStore::connect_read_only(&url, process).unwrap();
}

#[test]
fn stores_opened_for_inspection_refuse_every_write_before_sending_it() {
    let Some(url) = database() else { return };
    let seams = production::seams();
    let writer = PgStore::connect(&url, seams.process.clone(), LEASE_MS_DEFAULT).unwrap();
    let id = SessionId::new("s").unwrap();
    writer.create(&id, 1).unwrap().close().unwrap();

    let reader = PgStore::connect_read_only(&url, seams.process.clone()).unwrap();
    let create = reader.create(&SessionId::new("t").unwrap(), 1).unwrap_err();
    assert!(create.to_string().contains("inspection only"), "{create}");
    let open = reader.open(&id, Takeover::IfDead).unwrap_err();
    assert!(open.to_string().contains("inspection only"), "{open}");
    assert_eq!(writer.list().unwrap(), vec![id.clone()], "nothing was created");
    assert!(reader.inspect(&id).unwrap().owner.is_none(), "the released session is still released");

    let queue =
        PgOutbox::connect_read_only(&url, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref()).unwrap();
    assert!(queue.enqueue("x", "payload").unwrap_err().to_string().contains("inspection only"));
    assert!(queue.claim_next().is_err());
    assert!(queue.list(None).unwrap().is_empty(), "reads still work");
}

#[test]
#[allow(clippy::disallowed_methods)] // a real lease runs out on the server's clock: real sleeps
fn a_writers_lease_is_renewed_while_it_idles_and_runs_out_once_it_is_dropped() {
    let Some(url) = database() else { return };
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let id = SessionId::new("leased").unwrap();
    let first = PgStore::connect(&url, a, 1_000).unwrap();
    let held = first.create(&id, 1).unwrap();
    // Two lease lengths without an append: only the renewal keeps the lease live.
    std::thread::sleep(std::time::Duration::from_millis(2_000));
    let second = PgStore::connect(&url, b, 1_000).unwrap();
    let refused = second.open(&id, Takeover::IfDead).unwrap_err();
    assert!(matches!(refused, Error::SessionLocked { .. }), "the idle writer's lease was renewed: {refused}");
    // A writer dropped without release stops renewing: once its lease ran out, another
    // worker takes the session over although the holder's process still runs (a zombie).
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let opened = second.open(&id, Takeover::IfDead).unwrap();
    assert!(opened.log.token() > 1, "the takeover moved the epoch on");
}

/// Cuts every connection to the database but the caller's, as a failover or an operator's
/// `pg_terminate_backend` does.
fn terminate_every_other_connection(url: &str) {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
}

/// A writer whose connection was cut while another worker took its session over and wrote
/// the same seqs: the lost append is looked up, finds the new owner's records, and the writer
/// is told it was fenced (the truth: it lost the session), not that its batch was malformed.
#[test]
fn a_zombie_whose_lost_append_was_overtaken_is_told_it_was_fenced() {
    use faultline_runtime::event::{Event, Record, StepRef, TurnStart};
    let Some(url) = database() else { return };
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let id = SessionId::new("overtaken").unwrap();
    let first = PgStore::connect(&url, a.clone(), LEASE_MS_DEFAULT).unwrap();
    let mut zombie = first.create(&id, 1).unwrap();
    zombie.append(&[Record::new(0, 1, Event::TurnStart(TurnStart { turn: 1 }))]).unwrap();
    // The zombie's connection is cut, and its process is taken for dead: another worker takes
    // the session over, and its crash repair writes seq 1 (the open turn's `turn/end`).
    terminate_every_other_connection(&url);
    a.kill();
    let second = PgStore::connect(&url, b, LEASE_MS_DEFAULT).unwrap();
    let opened = second.open(&id, Takeover::IfDead).unwrap();
    assert_eq!(opened.loaded.repair.map(|r| r.closers.len()), Some(1), "the takeover closed turn 1 at seq 1");
    // The zombie's next append meets its cut connection, is looked up, and finds seq 1 taken.
    let lost = zombie.append(&[Record::new(1, 2, Event::StepStart(StepRef { turn: 1, step: 1 }))]).unwrap_err();
    assert!(matches!(lost, Error::Fenced { token: 1, current: 2, .. }), "{lost}");
}

/// A takeover that waited for the session's row (another transaction held it) stamps its lease
/// from when it took the session, not from when its transaction began: the lease it promises
/// is whole. (Stamped with `now()`, the transaction's start, it came out short by the wait.)
#[test]
#[allow(clippy::disallowed_methods)] // the wait is real: a lock held on the server
fn a_takeover_that_waited_for_the_row_stamps_a_whole_lease() {
    const LEASE_MS: u64 = 30_000;
    const HELD_MS: u64 = 3_000;
    let Some(url) = database() else { return };
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let id = SessionId::new("stamped").unwrap();
    PgStore::connect(&url, a, LEASE_MS).unwrap().create(&id, 1).unwrap().close().unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut holding = admin.transaction().unwrap();
    holding.execute("SELECT id FROM faultline_sessions WHERE id = 'stamped' FOR UPDATE", &[]).unwrap();
    let taker = std::thread::spawn(move || {
        let store = PgStore::connect(&url, b, LEASE_MS).unwrap();
        let opened = store.open(&id, Takeover::IfDead).unwrap();
        (store, opened)
    });
    std::thread::sleep(std::time::Duration::from_millis(HELD_MS));
    holding.commit().unwrap();
    let (_store, _opened) = taker.join().unwrap();
    let left_ms: f64 = admin
        .query_one(
            "SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::float8
             FROM faultline_sessions WHERE id = 'stamped'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        left_ms > (LEASE_MS - HELD_MS / 2) as f64,
        "{left_ms:.0} ms of a {LEASE_MS} ms lease left right after the takeover"
    );
}

/// A worker whose connection is busy — here a job waiting 3 s on a row another transaction
/// holds — keeps its other sessions' leases: renewal runs on a connection of its own. (On
/// the job thread, the renewal waited behind the job, the 1 s lease ran out, and another
/// worker took a live writer's session over.)
#[test]
#[allow(clippy::disallowed_methods)] // the wait is real: a lock held on the server
fn a_busy_connection_does_not_hold_a_lease_renewal_back() {
    const LEASE_MS: u64 = 1_000;
    const HELD_MS: u64 = 3_000;
    let Some(url) = database() else { return };
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let (held, blocked) = (SessionId::new("held").unwrap(), SessionId::new("blocked").unwrap());
    let worker = PgStore::connect(&url, a, LEASE_MS).unwrap();
    let _writer = worker.create(&held, 1).unwrap();
    worker.create(&blocked, 1).unwrap().close().unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut holding = admin.transaction().unwrap();
    holding.execute("SELECT id FROM faultline_sessions WHERE id = 'blocked' FOR UPDATE", &[]).unwrap();
    // The worker's connection waits on the held row, three lease lengths long.
    let busy = std::thread::spawn(move || worker.open(&blocked, Takeover::IfDead).map(|_| worker));
    std::thread::sleep(std::time::Duration::from_millis(HELD_MS));
    let other = PgStore::connect(&url, b, LEASE_MS).unwrap();
    let refused = other.open(&held, Takeover::IfDead).unwrap_err();
    assert!(matches!(refused, Error::SessionLocked { .. }), "the busy worker's lease was renewed: {refused}");
    holding.commit().unwrap();
    busy.join().unwrap().unwrap();
}

/// An enqueue whose connection was cut (a failover, `pg_terminate_backend`) is run once more
/// on a new connection: idempotent (the first payload wins), so a commit whose reply was lost
/// is found, not repeated. (Before, the tool saw `connection closed`, and then no row: an
/// effect the model was told "may have happened" that never could.)
#[test]
fn an_enqueue_that_lost_its_connection_is_run_again_on_a_new_one() {
    let Some(url) = database() else { return };
    let seams = production::seams();
    let queue = PgOutbox::connect(&url, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref()).unwrap();
    queue.enqueue("first", "{}").unwrap();
    terminate_every_other_connection(&url);
    assert_eq!(queue.enqueue("second", "{}").unwrap(), faultline_runtime::outbox::Enqueued::New);
    terminate_every_other_connection(&url);
    assert_eq!(
        queue.enqueue("second", "{}").unwrap(),
        faultline_runtime::outbox::Enqueued::Existing(faultline_runtime::outbox::DeliveryStatus::Pending),
        "run again, it finds its own row"
    );
    assert_eq!(queue.list(None).unwrap().len(), 2);
}

/// A takeover whose connection is cut while it waits for the session's row (a failover, an
/// operator's `pg_terminate_backend`) is looked up — it had not committed — and tried once
/// more on a new connection: the caller gets the session, not `DATABASE_UNREACHABLE`.
#[test]
#[allow(clippy::disallowed_methods, clippy::disallowed_types)] // the wait is real: a lock held on the server
fn a_takeover_that_lost_its_connection_is_looked_up_and_tried_again() {
    let Some(url) = database() else { return };
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    let id = SessionId::new("retaken").unwrap();
    PgStore::connect(&url, a, LEASE_MS_DEFAULT).unwrap().create(&id, 1).unwrap().close().unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut holding = admin.transaction().unwrap();
    holding.execute("SELECT id FROM faultline_sessions WHERE id = 'retaken' FOR UPDATE", &[]).unwrap();
    let taker_url = url.clone();
    let taker = std::thread::spawn(move || {
        let store = PgStore::connect(&taker_url, b, LEASE_MS_DEFAULT).unwrap();
        store.open(&id, Takeover::IfDead).map(|opened| opened.log.token())
    });
    // Cut the takeover's connection while it waits on the row.
    let mut cutter = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let cut = cutter
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap();
        if !cut.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the takeover never waited on the row");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    holding.commit().unwrap();
    let token = taker.join().unwrap().expect("the takeover is tried again on a new connection");
    assert_eq!(token, 3, "created at 1, released at 2, taken over at 3");
}
