//! Session files a simulated power loss left, byte for byte (`tests/fixtures/power-loss/`,
//! provenance in its README), read by the real binary: `transcript inspect` and `repair`,
//! judged against an independent reading of the same bytes with the `zstd` crate.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // copies real fixture files

use std::path::{Path, PathBuf};

use faultline_e2e::{faultline, stdout};
use serde_json::Value;

/// The fixtures whose names start with `prefix`.
fn fixtures(prefix: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/power-loss");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no fixture starts with {prefix} in {}", dir.display());
    found
}

/// One frame as the `zstd` crate reads it: where it lies, and its text when it decodes with
/// its checksum.
struct Frame {
    start: usize,
    end: usize,
    text: Option<Vec<u8>>,
}

/// The file's frames as the `zstd` crate walks them, up to the first it cannot size.
fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok(size) = zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]) {
        let text = zstd::stream::decode_all(&bytes[at..at + size]).ok();
        out.push(Frame { start: at, end: at + size, text });
        at += size;
        if at >= bytes.len() {
            break;
        }
    }
    out
}

/// A copy of `fixture` in a fresh directory, as a session file.
fn copy(fixture: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl.zst");
    std::fs::copy(fixture, &path).unwrap();
    (dir, path)
}

fn run_json(args: &[&str]) -> (i32, Value) {
    let output = faultline(args);
    (output.status.code().unwrap(), serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null))
}

/// A durable frame rotted in front of the last frame's power-loss hole (seven sweeps' seeds):
/// the rotted frame fails its checksum and is not the last one, so no power loss explains it.
/// The scanner once took the hole's zeros further on as its excuse and dropped acknowledged
/// records; it must refuse at the rotted frame and leave the file byte-identical.
#[test]
fn a_frame_rotted_in_front_of_a_power_loss_hole_is_corrupt_and_left_untouched() {
    for fixture in fixtures("rot-before-hole-") {
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        let (_dir, path) = copy(&fixture);
        let before = std::fs::read(&path).unwrap();
        let walked = frames(&before);
        let rotted = walked.iter().position(|f| f.text.is_none()).unwrap_or_else(|| panic!("{name}: no bad frame"));
        let after = &before[walked[rotted].end..];
        assert!(
            rotted > 0 && (after.ends_with(&[0, 0, 0, 0]) || after.windows(64).any(|w| w.iter().all(|&b| b == 0))),
            "{name}: the rotted frame is a durable one, with the last write's hole after it"
        );
        assert!(
            !before[walked[rotted].start..walked[rotted].end].windows(64).any(|w| w.iter().all(|&b| b == 0)),
            "{name}: the rotted frame holds no run of zeros a hole could have left"
        );
        let (code, inspection) = run_json(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
        assert_eq!((code, inspection["status"].as_str()), (4, Some("corrupt")), "{name}: {inspection}");
        assert_eq!(inspection["error"]["offset"], walked[rotted].start, "{name}: refused at the rotted frame");
        let repair = faultline(&["transcript", "repair", path.to_str().unwrap()]);
        assert_eq!(repair.status.code(), Some(4), "{name}: repair refuses too");
        assert_eq!(std::fs::read(&path).unwrap(), before, "{name}: the refusal left the file byte-identical");
    }
}

/// The last frame's write lost its last sector: zeros from a sector boundary to the end of
/// the file, right after a zero byte of the frame's own. The scanner once counted the zeros
/// from that stray zero, found no boundary there and refused the file; it is torn, and repair
/// keeps every frame before the hole (read here by the `zstd` crate) and nothing of it.
#[test]
fn zeros_over_a_sector_boundary_after_a_stray_zero_are_a_lost_last_sector() {
    for fixture in fixtures("lost-sector-after-a-stray-zero-") {
        let (_dir, path) = copy(&fixture);
        let bytes = std::fs::read(&path).unwrap();
        let walked = frames(&bytes);
        let (holed, intact) = walked.split_last().unwrap();
        assert!(holed.text.is_none() && holed.end == bytes.len(), "the last frame holds the hole");
        assert!(intact.iter().all(|f| f.text.is_some()), "every frame before it decodes");
        let zeros_from = bytes.len() - bytes.iter().rev().take_while(|&&b| b == 0).count();
        assert_ne!(zeros_from % 512, 0, "the zeros start at a stray zero, not on the boundary");
        assert!(zeros_from.next_multiple_of(512) < bytes.len(), "and run over a sector boundary to the end");

        let (code, inspection) = run_json(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
        assert_eq!((code, inspection["status"].as_str()), (3, Some("torn")), "{inspection}");
        assert_eq!(inspection["torn_bytes"], (holed.end - holed.start) as u64);
        let repair = faultline(&["transcript", "repair", path.to_str().unwrap()]);
        assert_eq!(repair.status.code(), Some(0), "{}", stdout(&repair));

        // Every record of the intact frames, as the zstd crate decoded them, is kept first.
        let kept: Vec<Value> = intact[1..]
            .iter()
            .flat_map(|f| f.text.clone().unwrap().split(|&b| b == b'\n').map(<[u8]>::to_vec).collect::<Vec<_>>())
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(&line).unwrap())
            .collect();
        let cat = faultline(&["transcript", "cat", path.to_str().unwrap()]);
        assert_eq!(cat.status.code(), Some(0));
        let repaired: Vec<Value> = stdout(&cat).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(repaired[..kept.len()], kept[..], "the records before the hole survive as they were");
        let closers: Vec<&str> = repaired[kept.len()..].iter().map(|r| r["type"].as_str().unwrap()).collect();
        assert_eq!(closers, ["step/end", "turn/end"], "and only the closers follow them");
        let (code, clean) = run_json(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
        assert_eq!((code, clean["status"].as_str()), (0, Some("clean")), "{clean}");
    }
}
