//! The sweep engine's reports: shards merge into the verdict of the whole sweep.

use std::collections::BTreeMap;

use faultline_runtime::seams::CRASH_POINTS;
use faultline_sim::sweep::{merge, SweepSummary};
use faultline_sim::SOMETIMES;

fn shard(k: u64, points: &[String], sometimes: &[&str]) -> SweepSummary {
    // Each shard reaches every other catalog entry: only the union reaches them all.
    let catalog = faultline_sim::catalog::ids().enumerate().filter(|(i, _)| i % 2 == (k % 2) as usize);
    SweepSummary {
        runs: 10,
        crash_point_hits: points.iter().map(|p| (p.clone(), 1)).collect(),
        sometimes_reached: sometimes.iter().map(|s| ((*s).to_owned(), 1)).collect::<BTreeMap<_, _>>(),
        catalog_reached: catalog.map(|(_, id)| (id.to_owned(), 1)).collect(),
        shard: format!("{k}/2"),
        // Long enough for the catalog's coverage to be judged.
        seeds: "0..2000".into(),
        scenario_names: vec!["a".into()],
        full: true,
        shards_covered: vec![k],
        shards_total: 2,
        ..SweepSummary::default()
    }
}

/// A crash point counts as reached if any shard reached it; the "every declared site fired"
/// rule is judged on the union, and only once every shard is there.
#[test]
fn coverage_of_merged_shards_is_judged_on_their_union() {
    let points: Vec<String> = CRASH_POINTS.iter().map(ToString::to_string).collect();
    let (first, second) = points.split_at(points.len() / 2);
    let (some_a, some_b) = SOMETIMES.split_at(SOMETIMES.len() / 2);
    let a = shard(1, first, some_a);
    let b = shard(2, second, some_b);
    let merged = merge(&[a.clone(), b.clone()]).unwrap();
    assert!(merged.complete() && merged.never_fired.is_empty(), "{:?}", merged.never_fired);
    assert_eq!(merged.runs, 20);

    let lacking = shard(2, &second[1..], some_b);
    let merged = merge(&[a.clone(), lacking]).unwrap();
    assert_eq!(merged.never_fired, vec![format!("crash point {}", second[0])]);

    let alone = merge(std::slice::from_ref(&a)).unwrap();
    assert!(!alone.complete() && alone.never_fired.is_empty(), "half a sweep is not judged");

    assert!(merge(&[a.clone(), a.clone()]).unwrap_err().contains("overlaps"));
    let mut other_seeds = b.clone();
    other_seeds.seeds = "0..50".into();
    assert!(merge(&[a, other_seeds]).unwrap_err().contains("other seeds"));

    let mut old = b.clone();
    (old.shards_total, old.shards_covered, old.seeds) = (0, vec![], String::new());
    assert!(merge(&[old.clone(), old]).unwrap_err().contains("does not say which slice"));
    let mut out_of_range = b.clone();
    out_of_range.shards_covered = vec![3];
    assert!(merge(&[out_of_range]).unwrap_err().contains("claims shard 3 of 2"));
}

/// A real sweep's shard and a simulated one are different sweeps: merging them is refused.
#[test]
fn a_real_shard_does_not_merge_with_a_simulated_one() {
    let simulated = shard(1, &[], &[]);
    let real = SweepSummary { real: true, ..shard(2, &[], &[]) };
    let refused = merge(&[simulated, real]).unwrap_err();
    assert!(refused.contains("ran for real"), "{refused}");
}
