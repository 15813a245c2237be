//! The `faultline` command: the driver of real processes, real files and terminals, over the
//! runtime (`faultline-runtime`) and the simulator (`faultline-sim`).
//!
//! The one crate of the workspace that is all edge: it reads files, talks to the terminal,
//! spawns and kills processes, so the determinism lint does not apply here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stdout, clippy::print_stderr)]

mod agent;
mod agent_mcp;
mod allocator;
mod approval;
mod bench;
mod conformance;
mod database;
mod demo;
mod exit;
mod from_transcript;
mod llm;
mod mcp;
mod outbox;
mod progress;
mod real_run;
mod regression;
mod report;
mod runs;
mod telemetry;
mod transcript;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Deterministic fault simulation for an LLM agent runtime.
#[derive(Debug, Parser)]
#[command(name = "faultline", version, about, long_about = None)]
struct Cli {
    /// Log the runtime's spans and events to stderr (`-v` info, `-vv` debug, `-vvv` trace);
    /// `RUST_LOG` overrides the filter. Logs carry codes and counts, never message text.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run many seeds of the built-in scenarios and report failures with replay commands.
    Sweep(runs::SweepArgs),
    /// List the built-in scenarios.
    Scenarios,
    /// Run one scenario with one seed: verdict, trace hash, optionally the whole trace.
    Run(runs::RunArgs),
    /// One incarnation of a real run's agent (started by `faultline run --real`).
    #[command(hide = true)]
    RealAgentHost(real_run::AgentHostArgs),
    /// Hunt a planted bug (builds with `--features planted-bugs`): seeds until the sweep
    /// catches it, and the replay command.
    Hunt(runs::HuntArgs),
    /// Cut a failing run down to a small regression scenario file that replays
    /// deterministically (fewer faults, fewer messages, an earlier crash).
    Shrink(regression::ShrinkArgs),
    /// Make scenarios: `from-transcript` turns a recorded session into one.
    Scenario(from_transcript::ScenarioArgs),
    /// Inspect, repair or print a session transcript (after a crash, say).
    Transcript(transcript::TranscriptArgs),
    /// Talk to a model endpoint directly (one attempt, no retries).
    Llm(llm::LlmArgs),
    /// Run the scriptable fake OpenAI-compatible model server.
    ModelServer(llm::ModelServerArgs),
    /// Run the agent against an OpenAI-compatible endpoint.
    Agent(agent::AgentArgs),
    /// Set up a PostgreSQL database for `--store postgres` (`db migrate`).
    Db(database::DbArgs),
    /// Look at and resolve a delivery queue (side effects whose receipt can be lost).
    Outbox(outbox::OutboxArgs),
    /// Call one tool of an MCP server by hand (`call`), or be the official conformance kit's
    /// client (`conformance-client`).
    Mcp(mcp::McpArgs),
    /// List the calls paused sessions wait on; approve or deny one (a person in the loop).
    Approval(approval::ApprovalArgs),
    /// Watch an agent get SIGKILLed at its side effect, recover and resume (no set-up).
    Demo(demo::DemoArgs),
    /// Measure stores, write-behind, recovery, the adapter and the simulator against
    /// baselines run in the same process.
    Bench(bench::BenchArgs),
}

/// `faultline run --trace | head` must end quietly when the reader goes away, as other
/// command-line tools do. Rust ignores SIGPIPE, so a print to a closed pipe panics; this hook
/// turns exactly that panic into a quiet exit (the workspace forbids the `unsafe` it would
/// take to restore the signal's default action).
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(i32::from(exit::BROKEN_PIPE));
        }
        default(info);
    }));
}

/// Parses the process arguments and runs the command.
fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => exit::code(exit::USAGE),
            };
        }
    };
    // Traces leave the process only for the commands that run the real agent: a sweep's
    // simulated runs are not a user's production.
    let endpoint = match &cli.command {
        Command::Agent(args) => telemetry::endpoint(agent::telemetry_endpoint(args)),
        _ => None,
    };
    let telemetry = telemetry::install(cli.verbose, endpoint);
    let code = run(cli.command);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}

fn run(command: Command) -> ExitCode {
    match command {
        Command::Sweep(args) => runs::run(&args),
        Command::Scenarios => runs::list(),
        Command::Scenario(args) => from_transcript::run(&args),
        Command::Run(args) => runs::run_one(&args),
        Command::RealAgentHost(args) => real_run::agent_host(&args),
        Command::Hunt(args) => runs::hunt(&args),
        Command::Shrink(args) => regression::run(&args),
        Command::Transcript(args) => transcript::run(&args),
        Command::Llm(args) => llm::run(&args),
        Command::ModelServer(args) => llm::model_server(&args),
        Command::Agent(args) => {
            allocator::return_freed_memory_promptly();
            agent::run(&args)
        }
        Command::Outbox(args) => outbox::run(&args),
        Command::Mcp(args) => mcp::run(&args),
        Command::Approval(args) => approval::run(&args),
        Command::Db(args) => database::run(&args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(&args),
    }
}
