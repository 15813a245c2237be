//! Memory: the peak RSS of `transcript inspect` on a large session, in a child process.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::figure::*;

/// Peak memory of `faultline transcript inspect` on a JSONL transcript of about `bytes` bytes
/// (the turn mix, written line by line): measured as the child process's maximum resident set
/// by the kernel, held to 64 MiB plus the largest record.
pub(super) fn inspect_memory(dir: &Path, exe: &Path, bytes: u64) -> Vec<Figure> {
    let session = dir.join("big").join("session.jsonl");
    std::fs::create_dir_all(session.parent().expect("a directory")).expect("dir");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&session).expect("file"));
    let header = faultline_runtime::event::SessionHeader::new("big", 1);
    writeln!(file, "{}", header.encode()).expect("write");
    let (mut written, mut seq, mut t, mut largest) = (0u64, 0u64, 0u64, 0usize);
    while written < bytes {
        for record in crate::bench::mix::turn(t, seq) {
            let line = record.encode();
            largest = largest.max(line.len());
            written += line.len() as u64 + 1;
            writeln!(file, "{line}").expect("write");
        }
        seq += crate::bench::mix::EVENTS_PER_TURN as u64;
        t += 1;
    }
    file.flush().expect("flush");
    drop(file);
    let start = Instant::now();
    let output = std::process::Command::new(exe)
        .args(["transcript", "inspect", "--json"])
        .arg(&session)
        .output()
        .expect("transcript inspect");
    let elapsed = start.elapsed().as_secs_f64();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let verdict: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(verdict["records"], seq, "every record inspected");
    // The largest resident set of any child waited for: this one (the bench starts no other).
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let peak_mib = usage.max_rss() as f64 / 1024.0;
    // An upper bound on how much of that peak the child inherited from this process.
    let own = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let inherited_mib = own.max_rss() as f64 / 1024.0;
    let bound = 64.0 + largest as f64 / (1024.0 * 1024.0);
    let _ = std::fs::remove_file(&session);
    vec![
        figure_at_most(
            &format!("transcript inspect of {} MiB: peak memory", bytes >> 20),
            peak_mib,
            "MiB",
            ("≤ 64 MiB + the largest record", bound),
        ),
        figure("  of which at most inherited from the bench process at spawn", inherited_mib, "MiB", None, None),
        figure(
            &format!("  transcript inspect of {} MiB: events/s, whole process", bytes >> 20),
            seq as f64 / elapsed,
            "events/s",
            None,
            None,
        ),
    ]
}
