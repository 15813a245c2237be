//! The bench's bare turmoil twin replays what a run did at the seams: the recording is
//! faithful (it sees every connection and disk operation, and does not change the run), and
//! the replay of every built-in scenario finishes.

use faultline_sim::bench::twin::{replay, Replayed, Twin};
use faultline_sim::world::io_trace::DiskOp;
use faultline_sim::world::{run, run_recorded};
use faultline_sim::{Scenario, BUILT_IN_SCENARIOS};

#[test]
fn a_recorded_run_is_the_same_run_and_its_io_is_what_the_agent_did() {
    let scenario = Scenario::built_in("happy-tool-turn").expect("built in");
    let (recorded, io) = run_recorded(&scenario, 0);
    assert_eq!(recorded.trace_hash, run(&scenario, 0).trace_hash, "recording does not change the run");
    // Two model requests around one delivery to the gateway, each answered.
    let hosts: Vec<&str> = io.connections.iter().map(|c| c.host.as_str()).collect();
    assert_eq!(hosts, ["model", "gateway", "model"]);
    for connection in &io.connections {
        assert!(connection.established, "{connection:?}");
        let sent: usize = connection.client.writes.iter().sum();
        let served: usize = connection.server.writes.iter().sum();
        assert!(sent > 0 && connection.server.read == sent, "the server read the request whole: {connection:?}");
        assert!(served > 0 && connection.client.read == served, "the agent read the answer whole: {connection:?}");
    }
    // The session file is opened, written and synced; names are made durable in directories.
    let opened_session =
        io.disk.iter().any(|op| matches!(op, DiskOp::Open { path, .. } if path.ends_with("sim/session.jsonl")));
    assert!(opened_session, "{:?}", io.disk);
    let count = |f: fn(&DiskOp) -> bool| io.disk.iter().filter(|op| f(op)).count();
    assert!(count(|op| matches!(op, DiskOp::Write { .. })) > 0);
    assert!(count(|op| matches!(op, DiskOp::Sync { .. })) > 0);
    assert!(count(|op| matches!(op, DiskOp::SyncDir { .. })) > 0);
    // Every mutating operation the fault layer admitted reached the disk, and was recorded.
    assert!(io.disk.len() as u64 >= recorded.fs_ops, "{} recorded, {} admitted", io.disk.len(), recorded.fs_ops);
}

#[test]
fn a_refused_connection_is_recorded_as_refused() {
    let scenario = Scenario::built_in("refused-then-up").expect("built in");
    let (_, io) = run_recorded(&scenario, 0);
    let first = io.connections.first().expect("the agent connected");
    assert_eq!((first.host.as_str(), first.established), ("model", false), "{first:?}");
    assert!(first.client.writes.is_empty() && first.server.writes.is_empty());
    assert!(io.connections.iter().any(|c| c.established), "the model came up");
}

#[test]
fn every_built_in_scenario_has_a_twin_that_replays_to_the_end() {
    for seed in 0..3 {
        for built_in in BUILT_IN_SCENARIOS {
            let scenario = Scenario::parse(built_in.text).expect("parses");
            let (recorded, io) = run_recorded(&scenario, seed);
            // The agent's side reads what it read in the run, connection by connection: each
            // server replays its own side of the right connection.
            let read_by_agent = io.connections.iter().map(|c| c.client.read).sum();
            let disk_ops = io.disk.len();
            let twin = Twin { tick_ms: scenario.tick_ms, sim_ms: recorded.sim_ms, io: io.into() };
            let replayed = replay(seed, &twin);
            assert_eq!(replayed, Replayed { read_by_agent, disk_ops }, "{} seed {seed}", scenario.name);
        }
    }
}
