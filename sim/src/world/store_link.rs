//! The fleet's connection to its shared store, with the faults a managed database has
//! (FAILURE-DB-TLS item 2 in the simulator): a statement cut before the store sees it, a
//! statement whose answer is lost after it ran, and a failover to a new primary with the
//! same data, which cuts each worker's first statement after it.
//!
//! Every fault is drawn from the seed (one stream per worker host) and written down here, on
//! the harness's side: the oracle reads this record, never the runtime's word, for which
//! answers were lost (`oracle/fencing.rs`, `answer-looked-up`).
//!
//! A worker's statement after a faulted one is never faulted: the connection comes back
//! within the one reconnect the client makes (`lost_answer.rs`). Two cuts in a row surface
//! as `DATABASE_UNREACHABLE`, which the real soak covers with restarted workers.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use faultline_runtime::seams::Entropy;
use faultline_runtime::store::{Statement, StoreLink};

use crate::seams::SimEntropy;

/// Statements a worker sends without a fault after a faulted one (a lookup, a resend, and one
/// to spare).
const CLEAN_AFTER_FAULT: u8 = 3;

/// What happened to one statement on the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkFault {
    pub host: String,
    pub statement: Statement,
    /// Cut after the store ran it and wrote something: its answer was lost.
    pub answer_lost_after_write: bool,
    /// The failover's cut, not a drawn one.
    pub failover: bool,
    pub at_ms: u64,
    /// What the database did, as the postgres catalog names it (sim/catalog/postgres.toml).
    pub entry: &'static str,
}

/// How a statement is cut before the store saw it: the connection refused, reset, or a
/// database that accepts and never answers (the client's connect bound ends the wait).
const CUT_ENTRIES: [&str; 3] =
    ["postgres.link.refused", "postgres.link.reset-before-statement", "postgres.link.silent-at-connect"];
/// How an answer is lost after the statement ran: the connection reset, or a database that
/// stops answering mid-statement (the client's reply bound ends the wait).
const LOST_ENTRIES: [&str; 2] = ["postgres.link.reply-lost", "postgres.link.silent-mid-statement"];

/// One worker host's side of the link.
struct HostLink {
    draws: SimEntropy,
    /// Which kind of cut or loss (a stream of its own: the cuts themselves stay as drawn).
    flavours: SimEntropy,
    /// Statements still to go through after a fault.
    clean: u8,
    /// The statement whose fault began the clean run.
    clean_after: Option<Statement>,
    /// Its first statement after the failover was cut already.
    failed_over: bool,
}

/// The link every worker's store handle crosses.
pub(crate) struct FleetLink {
    seed: u64,
    cut_percent: u8,
    failover_at: Option<Duration>,
    takeover_answer_lost: bool,
    state: Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    hosts: BTreeMap<String, HostLink>,
    /// A host's statement under way that may still fault (outside a clean run): whether
    /// its answer is to be lost, and whether by the failover.
    under_way: BTreeMap<String, (bool, bool)>,
    takeover_lost_once: bool,
    record: Vec<LinkFault>,
}

impl FleetLink {
    pub(crate) fn new(seed: u64, cut_percent: u8, failover_at: Option<Duration>, takeover_answer_lost: bool) -> Self {
        assert!(cut_percent <= crate::scenario::ZOMBIE_CUT_PERCENT_MAX, "cut_percent is checked with the scenario");
        Self { seed, cut_percent, failover_at, takeover_answer_lost, state: Mutex::default() }
    }

    /// Every fault the link made, in order.
    pub(crate) fn record(&self) -> Vec<LinkFault> {
        self.lock().record.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

impl StoreLink for FleetLink {
    fn cut_before(&self, host: &str, statement: Statement) -> bool {
        let mut state = self.lock();
        let seed = self.seed;
        let host_link = state.hosts.entry(host.to_owned()).or_insert_with(|| HostLink {
            draws: crate::seed::Seed::new(seed).fault(&format!("link/{host}")),
            flavours: crate::seed::Seed::new(seed).fault(&format!("link/{host}/flavour")),
            clean: 0,
            clean_after: None,
            failed_over: false,
        });
        if host_link.clean > 0 {
            host_link.clean -= 1;
            return false;
        }
        let failover = self.failover_at.is_some_and(|at| now() >= at) && !host_link.failed_over;
        let roll = host_link.draws.next_u64() % 200;
        let (cut, lose) = if failover {
            host_link.failed_over = true;
            (roll % 2 == 0, roll % 2 == 1)
        } else {
            let percent = u64::from(self.cut_percent);
            (roll < percent, (percent..2 * percent).contains(&roll))
        };
        if cut || lose {
            host_link.clean = CLEAN_AFTER_FAULT;
            host_link.clean_after = Some(statement);
        }
        if cut {
            let at_ms = now().as_millis() as u64;
            let flavour = CUT_ENTRIES[(host_link.flavours.next_u64() % CUT_ENTRIES.len() as u64) as usize];
            let entry = if failover { "postgres.link.failover" } else { flavour };
            let fault =
                LinkFault { host: host.to_owned(), statement, answer_lost_after_write: false, failover, at_ms, entry };
            state.record.push(fault);
            return true;
        }
        state.under_way.insert(host.to_owned(), (lose, failover));
        false
    }

    fn answer_lost(&self, host: &str, statement: Statement, changed: bool) -> bool {
        let mut state = self.lock();
        // A statement of a clean run after a fault never faults, except the one takeover
        // whose answer the scenario loses (the lookup after it is clean again).
        // (Not the takeover sent again after a fault of its own: the client looks up once.)
        let (mut lose, failover) = state.under_way.remove(host).unwrap_or((false, false));
        let forced = self.takeover_answer_lost && statement == Statement::TakeOver && changed;
        if forced && !state.takeover_lost_once {
            if let Some(host_link) = state.hosts.get_mut(host) {
                if host_link.clean == 0 || host_link.clean_after != Some(Statement::TakeOver) {
                    host_link.clean = CLEAN_AFTER_FAULT;
                    host_link.clean_after = Some(Statement::TakeOver);
                    state.takeover_lost_once = true;
                    lose = true;
                }
            }
        }
        if lose {
            let at_ms = now().as_millis() as u64;
            let answer_lost_after_write = changed && statement != Statement::Read;
            let flavour = state.hosts.get(host).map_or(0, |h| h.flavours.next_u64() % LOST_ENTRIES.len() as u64);
            let entry = if failover { "postgres.link.failover" } else { LOST_ENTRIES[flavour as usize] };
            state.record.push(LinkFault {
                host: host.to_owned(),
                statement,
                answer_lost_after_write,
                failover,
                at_ms,
                entry,
            });
        }
        lose
    }
}

/// The postgres catalog entries (`sim/catalog/postgres.toml`) the link's record shows: what
/// the managed database did to the fleet's statements.
pub(crate) fn link_entries(record: &[LinkFault]) -> std::collections::BTreeSet<String> {
    record.iter().map(|fault| fault.entry.to_owned()).collect()
}
