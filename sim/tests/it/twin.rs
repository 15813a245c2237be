//! The bench's bare turmoil twin replays what a run did at the seams: the recording is
//! faithful (it sees every connection and disk operation, and does not change the run), and
//! the replay of every built-in scenario finishes.

use faultline_sim::run;
use faultline_sim::twin::{replay, run_recorded, DiskOp, Replayed, Twin};
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
    // Every mutating operation the fault layer above numbered reached the disk, once, and was
    // recorded: the recording's count is the fault layer's own, exactly.
    let mutating = io
        .disk
        .iter()
        .filter(|op| match op {
            DiskOp::Open { options, .. } => options.create || options.create_new,
            DiskOp::CreateDir { .. }
            | DiskOp::HardLink { .. }
            | DiskOp::Rename { .. }
            | DiskOp::RemoveFile { .. }
            | DiskOp::SyncDir { .. }
            | DiskOp::Write { .. }
            | DiskOp::Sync { .. }
            | DiskOp::SetLen { .. } => true,
            _ => false,
        })
        .count();
    assert_eq!(mutating as u64, recorded.fs_ops, "recorded against admitted by the fault layer");
    // The bytes written to the session (its temp file, then the file itself) are the header
    // line and every recovered record's line, nothing more: what the agent wrote, whole.
    let mut files = std::collections::BTreeMap::new();
    for op in &io.disk {
        if let DiskOp::Open { path, file: Some(file), .. } = op {
            files.insert(*file, path.clone());
        }
    }
    let session_bytes: usize = io
        .disk
        .iter()
        .filter_map(|op| match op {
            DiskOp::Write { file, bytes } if files[file].to_string_lossy().contains("sim/session.jsonl") => {
                Some(*bytes)
            }
            _ => None,
        })
        .sum();
    let header =
        faultline_runtime::event::SessionHeader::new("sim", faultline_sim::seams::SIM_EPOCH_MS).encode().len() + 1;
    let lines: usize = recorded.transcript.iter().map(|r| r.encode().len() + 1).sum();
    assert_eq!(session_bytes, header + lines, "the session's writes are its header and records, once each");
    // Its names are made durable: every link is followed by a sync of its directory.
    let link_at = io
        .disk
        .iter()
        .position(|op| matches!(op, DiskOp::HardLink { link, .. } if link.ends_with("sim/session.jsonl")));
    let link_at = link_at.expect("the session is published by a link");
    assert!(
        io.disk[link_at..].iter().any(|op| matches!(op, DiskOp::SyncDir { path } if path.ends_with("sim"))),
        "the session's directory is synced after the link"
    );
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
