//! Parity: the transcript a real run recovered against the simulator's for the same scenario
//! and seed, record by record, after normalising what legitimately differs between the two
//! worlds — event times (each world's clock), and the names of things (the real servers'
//! `127.0.0.1:PORT` are the simulator's `model:80` and `gateway:80`; the real working
//! directory's `DIR/data` is the simulated host's `/data`). Nothing else is forgiven: a
//! difference in any other field is a finding — the simulator is not faithful, or the
//! production seams behave differently.

use faultline_runtime::event::Record;
use serde::Serialize;
use serde_json::Value;

use crate::verdict::RunResult;

/// The first record where the two transcripts differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// 0-based position in the transcripts.
    pub index: usize,
    /// The simulator's record there, normalised (none: its transcript ended).
    pub sim: Option<String>,
    /// The real run's record there, normalised.
    pub real: Option<String>,
}

/// The verdict of one comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Parity {
    /// Whether the normalised transcripts (and their refusals) are equal.
    pub equal: bool,
    /// Records recovered by the simulator.
    pub sim_records: usize,
    /// Records recovered for real.
    pub real_records: usize,
    /// Whether each world refused its files as corrupt (`[sim, real]`).
    pub refused: [bool; 2],
    /// The first differing record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<Difference>,
}

impl Parity {
    /// The difference as an oracle violation (`parity`), if there is one.
    pub fn violation(&self, at_ms: u64) -> Option<crate::Violation> {
        if self.equal {
            return None;
        }
        let detail = match &self.first_difference {
            Some(d) => format!(
                "record {} differs from the simulator's: sim {} / real {}",
                d.index,
                d.sim.as_deref().unwrap_or("(none)"),
                d.real.as_deref().unwrap_or("(none)")
            ),
            None => format!("refused as corrupt (sim, real) = {:?}", self.refused),
        };
        Some(crate::Violation::new(crate::Invariant::Parity, detail, at_ms))
    }
}

/// What the real run's text says that the simulator says differently: `(real, sim)`.
fn renames(real: &RealRun) -> Vec<(String, String)> {
    let data = real.dir.join("data").display().to_string();
    vec![
        (real.model_addr.clone(), "model:80".to_owned()),
        (real.gateway_addr.clone(), "gateway:80".to_owned()),
        (data, "/data".to_owned()),
    ]
}

fn rename_strings(value: &mut Value, renames: &[(String, String)]) {
    match value {
        Value::String(text) => {
            for (from, to) in renames {
                if text.contains(from.as_str()) {
                    *text = text.replace(from.as_str(), to);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_strings(v, renames)),
        Value::Object(fields) => fields.values_mut().for_each(|v| rename_strings(v, renames)),
        _ => {}
    }
}

/// A record as parity compares it: its line with the clock's readings zeroed (`time`, and an
/// approval request's `deadline_ms`, read from the clock as it was written) and names renamed.
pub fn normalise(record: &Record, renames: &[(String, String)]) -> String {
    let mut value: Value = serde_json::from_str(&record.encode()).expect("records encode to JSON");
    value["time"] = Value::from(0);
    if let Some(deadline) = value.get_mut("data").and_then(|d| d.get_mut("deadline_ms")) {
        *deadline = Value::from(0);
    }
    rename_strings(&mut value, renames);
    value.to_string()
}

/// Compares the simulator's run with the real run of the same scenario and seed.
pub fn compare(sim: &RunResult, real: &RealRun) -> Parity {
    let renames = renames(real);
    let sim_lines: Vec<String> = sim.transcript.iter().map(|r| normalise(r, &[])).collect();
    let real_lines: Vec<String> = real.result.transcript.iter().map(|r| normalise(r, &renames)).collect();
    let refused = [sim.refused.is_some(), real.result.refused.is_some()];
    let first_difference = (0..sim_lines.len().max(real_lines.len()))
        .find(|&i| sim_lines.get(i) != real_lines.get(i))
        .map(|index| Difference { index, sim: sim_lines.get(index).cloned(), real: real_lines.get(index).cloned() });
    Parity {
        equal: first_difference.is_none() && refused[0] == refused[1],
        sim_records: sim_lines.len(),
        real_records: real_lines.len(),
        refused,
        first_difference,
    }
}

/// A real run: its result (judged by the oracle) and what parity needs to normalise it.
#[derive(Debug, Clone)]
pub struct RealRun {
    /// Verdict, trace, recovered transcript, receipts, as for a simulated run.
    pub result: RunResult,
    /// The model server's and the gateway's real addresses (`127.0.0.1:PORT`).
    pub model_addr: String,
    /// See `model_addr`.
    pub gateway_addr: String,
    /// The agent's working directory (kept only with `--keep`).
    pub dir: std::path::PathBuf,
    /// Wall time of the run, ms.
    pub wall_ms: u64,
}
