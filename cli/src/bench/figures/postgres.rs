//! PostgreSQL: durable append at batch 1/16/256 and recovery against SQLite on the same
//! events; one worker holding 10, 1 000 and 10 000 open sessions (appends spread over them,
//! against SQLite holding as many, and lease renewals of all of them); and the delivery
//! queue's deliveries per second with 1, 4 and 8 workers against one worker, and with 8
//! against SQLite's 8. On a throw-away server with fsync on (SQLite runs `synchronous=FULL`),
//! or the database at `FAULTLINE_DATABASE_URL` when set.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use faultline_runtime::outbox::{Finish, Outbox};
use faultline_runtime::production::{self, PgOutbox, PgStore, SqliteOutbox, SqliteStore};
use faultline_runtime::store::LEASE_MS_DEFAULT;
use faultline_runtime::store::{SessionId, Store};
use faultline_runtime::testing::PgServer;

use super::figure::*;

/// Rounds per figure (median).
const PG_ROUNDS: usize = 3;
/// Open sessions one worker holds in the sessions figures.
const OPEN_SESSIONS: [usize; 3] = [10, 1_000, 10_000];
/// Appends spread over the open sessions, per round (one record each).
const SPREAD_APPENDS: usize = 1_000;
/// Drainers of the queue figure against SQLite.
const DRAINERS: usize = 8;

/// Where the bench's databases come from: the server it started, or the URL it was given
/// (a fresh schema per figure is then a fresh session id or queue prefix).
enum Databases {
    Started(PgServer),
    Given(String),
}

impl Databases {
    fn open() -> Option<Databases> {
        if let Ok(url) = std::env::var("FAULTLINE_DATABASE_URL") {
            return Some(Databases::Given(url));
        }
        PgServer::start_with(true).ok().map(Databases::Started)
    }

    fn fresh(&self) -> String {
        match self {
            Databases::Started(server) => server.fresh_database(),
            Databases::Given(url) => url.clone(),
        }
    }
}

/// The figures, or one saying why there are none.
pub(super) fn postgres(dir: &Path, scale: usize) -> Vec<Figure> {
    let Some(databases) = Databases::open() else {
        return vec![figure(
            "postgres: skipped (no PostgreSQL binaries, no FAULTLINE_DATABASE_URL)",
            0.0,
            "-",
            None,
            None,
        )];
    };
    // The blocking client may not run inside a runtime: every figure runs on a plain thread.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut out = Vec::new();
            for (batch, batches) in [(1, 150 * scale), (16, 60 * scale), (256, 10 * scale)] {
                out.extend(append(dir, &databases, batch, batches));
            }
            out.extend(recovery(dir, &databases, 25_000 * scale));
            for open in OPEN_SESSIONS {
                out.extend(open_sessions(dir, &databases, open, SPREAD_APPENDS * scale));
            }
            out.extend(queue(&databases, 500 * scale));
            out.extend(queue_against_sqlite(dir, &databases, 500 * scale));
            out
        })
        .join()
        .expect("the postgres figures")
    })
}

fn id(name: &str) -> SessionId {
    SessionId::new(name).expect("id")
}

fn append(dir: &Path, databases: &Databases, batch: usize, batches: usize) -> Vec<Figure> {
    let seams = production::seams();
    let records =
        crate::bench::mix::records((batch * batches * PG_ROUNDS).div_ceil(crate::bench::mix::EVENTS_PER_TURN));
    let records = &records[..batch * batches * PG_ROUNDS];
    let pg = PgStore::connect(&databases.fresh(), seams.process.clone(), LEASE_MS_DEFAULT).expect("postgres");
    let sqlite_dir = dir.join(format!("pg-append-sqlite-{batch}"));
    std::fs::create_dir_all(&sqlite_dir).expect("dir");
    let sqlite = SqliteStore::open(sqlite_dir.join("s.sqlite"), seams.process.clone()).expect("sqlite");
    let session = id(&format!("bench-append-{batch}-{}", seams.entropy.as_ref().next_u64() % 1_000_000));
    let mut logs = [pg.create(&session, 1).expect("create"), sqlite.create(&session, 1).expect("create")];
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..PG_ROUNDS {
        let range = &records[round * batch * batches..(round + 1) * batch * batches];
        for turn in 0..2 {
            let side = (turn + round) % 2;
            let start = Instant::now();
            for chunk in range.chunks(batch) {
                logs[side].append(chunk).expect("append");
            }
            rates[side].push(range.len() as f64 / start.elapsed().as_secs_f64());
        }
    }
    let [pg_rate, sqlite_rate] = rates.map(median);
    vec![figure(
        &format!("postgres append, batch {batch} (against sqlite)"),
        pg_rate,
        "events/s",
        Some(sqlite_rate),
        None,
    )]
}

fn recovery(dir: &Path, databases: &Databases, count: usize) -> Vec<Figure> {
    let seams = production::seams();
    let records = crate::bench::mix::records(count.div_ceil(crate::bench::mix::EVENTS_PER_TURN));
    let records = &records[..count.min(records.len())];
    let pg = PgStore::connect(&databases.fresh(), seams.process.clone(), LEASE_MS_DEFAULT).expect("postgres");
    let sqlite_dir = dir.join("pg-recovery-sqlite");
    std::fs::create_dir_all(&sqlite_dir).expect("dir");
    let sqlite = SqliteStore::open(sqlite_dir.join("s.sqlite"), seams.process.clone()).expect("sqlite");
    let session = id(&format!("bench-recovery-{}", seams.entropy.as_ref().next_u64() % 1_000_000));
    let stores: [&dyn Store; 2] = [&pg, &sqlite];
    for store in stores {
        let mut log = store.create(&session, 1).expect("create");
        for chunk in records.chunks(1024) {
            log.append(chunk).expect("append");
        }
        log.close().expect("close");
    }
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..PG_ROUNDS {
        for turn in 0..2 {
            let side = (turn + round) % 2;
            let start = Instant::now();
            let inspection = stores[side].inspect(&session).expect("inspect");
            rates[side].push(records.len() as f64 / start.elapsed().as_secs_f64());
            assert_eq!(inspection.records.len(), records.len());
        }
    }
    let [pg_rate, sqlite_rate] = rates.map(median);
    vec![figure(
        &format!("postgres recovery: load+validate {} events (against sqlite)", records.len()),
        pg_rate,
        "events/s",
        Some(sqlite_rate),
        None,
    )]
}

/// One worker holding `open` sessions on each store: `appends` one-record appends spread
/// over them round-robin (each append renews its own lease on PostgreSQL), against SQLite
/// holding as many; and every lease renewed at once, as the renewal thread does.
fn open_sessions(dir: &Path, databases: &Databases, open: usize, appends: usize) -> Vec<Figure> {
    let seams = production::seams();
    let pg = PgStore::connect(&databases.fresh(), seams.process.clone(), LEASE_MS_DEFAULT).expect("postgres");
    let sqlite_dir = dir.join(format!("pg-open-sqlite-{open}"));
    std::fs::create_dir_all(&sqlite_dir).expect("dir");
    let sqlite = SqliteStore::open(sqlite_dir.join("s.sqlite"), seams.process.clone()).expect("sqlite");
    let prefix = seams.entropy.as_ref().next_u64() % 1_000_000;
    let stores: [&dyn Store; 2] = [&pg, &sqlite];
    let mut logs: [Vec<Box<dyn faultline_runtime::store::SessionLog>>; 2] = [Vec::new(), Vec::new()];
    for (side, store) in stores.iter().enumerate() {
        for n in 0..open {
            logs[side].push(store.create(&id(&format!("open-{prefix}-{n}")), 1).expect("create"));
        }
    }
    let per_session = (appends * PG_ROUNDS).div_ceil(open) + 1;
    let records = crate::bench::mix::records(per_session.div_ceil(crate::bench::mix::EVENTS_PER_TURN));
    let mut rates = [Vec::new(), Vec::new()];
    let mut next = vec![[0usize; 2]; open];
    for round in 0..PG_ROUNDS {
        for turn in 0..2 {
            let side = (turn + round) % 2;
            let start = Instant::now();
            for k in 0..appends {
                let n = (round * appends + k) % open;
                let at = next[n][side];
                logs[side][n].append(&records[at..=at]).expect("append");
                next[n][side] += 1;
            }
            rates[side].push(appends as f64 / start.elapsed().as_secs_f64());
        }
    }
    let [pg_rate, sqlite_rate] = rates.map(median);
    let renewals = median(
        (0..PG_ROUNDS)
            .map(|_| {
                let start = Instant::now();
                let held = pg.renew_leases_now().expect("renew");
                assert_eq!(held, open, "every lease is still held");
                held as f64 / start.elapsed().as_secs_f64()
            })
            .collect(),
    );
    vec![
        figure(
            &format!("postgres {open} open sessions: appends spread over them (against sqlite)"),
            pg_rate,
            "appends/s",
            Some(sqlite_rate),
            None,
        ),
        figure(
            &format!("postgres {open} open sessions: lease renewals (sqlite holds no leases)"),
            renewals,
            "renewals/s",
            None,
            None,
        ),
    ]
}

/// Deliveries per second of `workers` workers (one connection each) claiming and finishing
/// `items` rows of one queue.
fn deliveries_per_s(url: &str, workers: usize, items: usize) -> f64 {
    let seams = production::seams();
    let open = || -> Arc<dyn Outbox> {
        Arc::new(
            PgOutbox::connect(url, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref()).expect("queue"),
        )
    };
    drain_rate(&open, workers, items)
}

/// Deliveries per second of `workers` queues `open` returns (one connection each), claiming
/// and finishing `items` rows enqueued first.
fn drain_rate(open: &dyn Fn() -> Arc<dyn Outbox>, workers: usize, items: usize) -> f64 {
    let seams = production::seams();
    let prefix = seams.entropy.as_ref().next_u64();
    let queue = open();
    for i in 0..items {
        queue.enqueue(&format!("q{prefix}-{i}"), "payload").expect("enqueue");
    }
    let queues: Vec<Arc<dyn Outbox>> = (0..workers).map(|_| open()).collect();
    let start = Instant::now();
    let delivered: usize = std::thread::scope(|s| {
        let handles: Vec<_> = queues
            .iter()
            .map(|queue| {
                s.spawn(move || {
                    let mut n = 0;
                    while let Some(claim) = queue.claim_next().expect("claim") {
                        assert!(queue.finish(&claim.execution_id, Finish::Delivered("ok".into())).expect("finish"));
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker")).sum()
    });
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(delivered, items, "each row delivered once");
    items as f64 / elapsed
}

fn queue(databases: &Databases, items: usize) -> Vec<Figure> {
    let mut out = Vec::new();
    let one = median((0..PG_ROUNDS).map(|_| deliveries_per_s(&databases.fresh(), 1, items)).collect());
    out.push(figure("postgres queue: deliveries, 1 worker", one, "deliveries/s", None, None));
    for workers in [4, 8] {
        let rate = median((0..PG_ROUNDS).map(|_| deliveries_per_s(&databases.fresh(), workers, items)).collect());
        out.push(figure(
            &format!("postgres queue: deliveries, {workers} workers (against 1)"),
            rate,
            "deliveries/s",
            Some(one),
            None,
        ));
    }
    out
}

/// The queue with [`DRAINERS`] workers on PostgreSQL against as many on one SQLite file.
fn queue_against_sqlite(dir: &Path, databases: &Databases, items: usize) -> Vec<Figure> {
    let seams = production::seams();
    let sqlite_path = dir.join("pg-queue-sqlite.sqlite");
    let sqlite = || -> Arc<dyn Outbox> {
        Arc::new(
            SqliteOutbox::open(&sqlite_path, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref())
                .expect("sqlite queue"),
        )
    };
    let (mut pg, mut lite) = (Vec::new(), Vec::new());
    for _ in 0..PG_ROUNDS {
        pg.push(deliveries_per_s(&databases.fresh(), DRAINERS, items));
        lite.push(drain_rate(&sqlite, DRAINERS, items));
    }
    vec![figure(
        &format!("postgres queue: deliveries, {DRAINERS} workers (against sqlite, {DRAINERS} workers)"),
        median(pg),
        "deliveries/s",
        Some(median(lite)),
        None,
    )]
}
