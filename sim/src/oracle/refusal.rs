//! Refusals: a refusal is the right answer to bit rot, and only to bit rot. Crashes, torn
//! writes and power-loss holes are always recoverable; a refused file is left exactly as it
//! was found; rot inside the durable prefix is never recovered from.

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let (world, end_ms) = (evidence.world, evidence.end_ms);
    match (&world.refused, &world.rotted) {
        (Some(_), Some(rotted)) => {
            let now = world.disk.iter().find(|(path, _)| *path == rotted.path).map(|(_, bytes)| bytes);
            if now != Some(&rotted.bytes) {
                found.fail(
                    Invariant::RefusalLeftFileUntouched,
                    format!("{} changed after the recovery refused it as corrupt", rotted.path),
                    end_ms,
                );
            }
        }
        (Some(reason), None) => found.fail(
            Invariant::FalseCorrupt,
            format!("recovery refused a log that only crashes, torn writes or power loss touched: {reason}"),
            end_ms,
        ),
        (None, Some(rotted)) => found.fail(
            Invariant::RotRefused,
            format!(
                "bit rot ({}) at byte {} of {} (inside the durable prefix) was not refused: recovery went on with a log it cannot vouch for",
                rotted.kind.name(),
                rotted.offset,
                rotted.path
            ),
            end_ms,
        ),
        (None, None) => {}
    }
}
