//! The measurements: one file per bench group, the figures and the run here.

mod adapter;
mod append;
mod figure;
mod memory;
mod parse;
mod postgres;
mod recovery;
mod simulator;
mod write_behind;

use std::path::Path;

use append::{durable_append, fsync_latency};
use memory::inspect_memory;
use recovery::{recovery, recovery_mix};
use simulator::simulator;

use figure::tempfile_dir;
pub use figure::BenchReport;

/// The groups of figures, in the order they run (`faultline bench --only GROUP`).
pub const GROUPS: [&str; 8] =
    ["memory", "append", "write-behind", "recovery", "adapter", "parse", "simulator", "postgres"];

/// Runs every figure (`quick`: smaller sizes, same shapes), only the group `only` if given,
/// calling `phase(name)` as each group starts; `exe` is the `faultline` binary whose
/// `transcript inspect` the memory figure measures (skipped without one).
pub fn run_all_with(quick: bool, only: Option<&str>, exe: Option<&Path>, phase: impl Fn(&str)) -> BenchReport {
    let dir = tempfile_dir();
    let wanted = |group: &str| only.is_none_or(|o| o == group);
    phase("fsync latency");
    let fsync_ms_p50 = fsync_latency(&dir);
    let mut figures = Vec::new();
    let scale = if quick { 1 } else { 4 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    // Memory first: the kernel starts a spawned child's peak RSS from its parent's peak at
    // the spawn (the child shares the parent's pages until it execs), so the figure is only
    // the child's own while this process is still small.
    if let (true, Some(exe)) = (wanted("memory"), exe) {
        phase("memory of transcript inspect");
        figures.extend(inspect_memory(&dir, exe, if quick { 256 } else { 1024 } << 20));
    }
    if wanted("append") {
        phase("durable append");
        for (batch, batches) in [(1, 500 * scale), (16, 300 * scale), (256, 100 * scale)] {
            figures.extend(durable_append(&dir, batch, batches, &runtime));
        }
    }
    if wanted("write-behind") {
        phase("write-behind");
        figures.extend(runtime.block_on(write_behind::write_behind(&dir, 20_000 * scale)));
    }
    if wanted("recovery") {
        phase("recovery");
        figures.extend(recovery(&dir, if quick { 100_000 } else { 200_000 }));
        figures.extend(recovery_mix(&dir, 100_000 / crate::bench::mix::EVENTS_PER_TURN));
    }
    if wanted("adapter") {
        phase("adapter");
        figures.extend(runtime.block_on(adapter::adapter(&dir, 20_000 * scale)));
    }
    if wanted("parse") {
        phase("parse cost per wire format");
        figures.extend(parse::parse_cost(20_000 * scale));
    }
    if wanted("simulator") {
        phase("simulator");
        figures.extend(simulator(if quick { 8 } else { 40 }));
    }
    if wanted("postgres") {
        phase("postgres");
        figures.extend(postgres::postgres(&dir, scale));
    }
    let _ = std::fs::remove_dir_all(&dir);
    BenchReport { cores: std::thread::available_parallelism().map_or(1, |n| n.get()), fsync_ms_p50, figures }
}
