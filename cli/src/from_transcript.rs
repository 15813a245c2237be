//! `faultline scenario from-transcript`: a recorded session (any store) becomes a scenario
//! file, checked before it is handed over: its fault-free run must reproduce the recording
//! record by record (FAILURE-INCIDENT-SCENARIO). It reads the session read-only and writes
//! nothing but `--out`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use faultline_runtime::event::Record;
use faultline_runtime::store::{NoEvidence, ScanStatus};
use faultline_sim::incident::{compare, fault_free, scenario_from_records};

use crate::exit;
use crate::transcript::{inspect_visiting, resolve, Access, Target};

/// Most records read from one session: a scenario holds at most `RESPONSES_MAX` responses,
/// and a session past this many records is no incident to replay whole.
const RECORDS_MAX: usize = 200_000;

/// `faultline scenario ...`
#[derive(Debug, Args)]
pub struct ScenarioArgs {
    #[command(subcommand)]
    command: ScenarioCommand,
}

#[derive(Debug, Subcommand)]
enum ScenarioCommand {
    /// Turn a recorded session into a scenario: its user messages, the model's recorded
    /// responses as the script, its tools answering as they did; the seed's swarm of faults.
    /// Exit 0 when its fault-free run reproduces the recording, 2 when it does not (the file
    /// is still written), 4 corrupt, 1 other error.
    FromTranscript {
        #[command(flatten)]
        target: Target,
        /// Write the scenario here (default: print it).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The scenario's name (default `incident-<session>`).
        #[arg(long)]
        name: Option<String>,
        /// Check the reproduction with your agent file's stand-ins instead of the recorded
        /// tools (as `sweep --scenario FILE --agent FILE` will run it).
        #[arg(long, value_name = "FILE")]
        agent: Option<PathBuf>,
    },
}

/// Runs `faultline scenario`.
pub fn run(args: &ScenarioArgs) -> ExitCode {
    let ScenarioCommand::FromTranscript { target, out, name, agent } = &args.command;
    let fail = |e: String| {
        eprintln!("faultline scenario from-transcript: {e}");
        exit::code(exit::USAGE)
    };
    let seams = faultline_runtime::production::seams();
    let resolved = match resolve(target, &seams, Access::ReadOnly) {
        Ok(resolved) => resolved,
        Err(e) => return fail(e),
    };
    let mut records: Vec<Record> = Vec::new();
    let inspection = inspect_visiting(&resolved, &seams, Arc::new(NoEvidence), &mut |record| {
        if records.len() <= RECORDS_MAX {
            records.push(record.clone());
        }
    });
    let inspection = match inspection {
        Ok(inspection) => inspection,
        Err(e) => return fail(e.to_string()),
    };
    if matches!(inspection.status, ScanStatus::Corrupt | ScanStatus::Unsupported) {
        eprintln!("faultline scenario from-transcript: the session is {:?}: nothing replayed", inspection.status);
        return exit::code(exit::CORRUPT);
    }
    if records.len() > RECORDS_MAX {
        return fail(format!("more than {RECORDS_MAX} records: too long a session to replay whole"));
    }
    let session = target.session_name();
    let name = name.clone().unwrap_or_else(|| format!("incident-{session}"));
    let scenario = match scenario_from_records(&name, &records) {
        Ok(scenario) => scenario,
        Err(e) => return fail(e),
    };
    let agent = match agent.as_deref().map(crate::runs::load_agent).transpose() {
        Ok(agent) => agent,
        Err(e) => return fail(e),
    };
    let quiet = fault_free(&scenario);
    let replayed = match &agent {
        Some(agent) => faultline_sim::run_agent(&quiet, 0, agent),
        None => faultline_sim::run(&quiet, 0),
    };
    let reproduction = compare(&records, &replayed);
    let text = scenario.to_toml();
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                return fail(format!("--out {}: {e}", path.display()));
            }
            println!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    report_reproduction(&reproduction, &replayed, out.as_deref())
}

/// Whether the fault-free run reproduced the recording, for a person; exit 0 only if it did.
fn report_reproduction(
    reproduction: &faultline_sim::incident::Reproduction,
    replayed: &faultline_sim::RunResult,
    out: Option<&std::path::Path>,
) -> ExitCode {
    if reproduction.equal && replayed.passed() {
        eprintln!(
            "the fault-free run reproduces the recording: {} records ({}) match",
            reproduction.compared, reproduction.compared_what
        );
        let file = out.map_or("FILE".to_owned(), |p| p.display().to_string());
        eprintln!("sweep it under every fault family: faultline sweep --scenario {file} --seeds 0..100");
        return exit::code(exit::OK);
    }
    if let Some((index, recorded, replayed)) = &reproduction.first_difference {
        eprintln!(
            "the fault-free run does NOT reproduce the recording ({}): record {index} differs",
            reproduction.compared_what
        );
        eprintln!("  recorded: {}", recorded.as_deref().unwrap_or("(nothing: the recording ended)"));
        eprintln!("  replayed: {}", replayed.as_deref().unwrap_or("(nothing: the replay ended)"));
    }
    for v in &replayed.violations {
        eprintln!("the fault-free run broke {}: {}", v.invariant, v.detail);
    }
    exit::code(exit::FAILED)
}
