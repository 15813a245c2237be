//! The `faultline` command line: the driver of real processes, real files and terminals.
//!
//! This is the one place in `sim` besides the seam module that may touch the OS directly
//! (it reads scenario files, talks to the terminal, and later spawns and kills processes).
#![allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stdout, clippy::print_stderr)]

mod sweep;
mod transcript;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Deterministic fault simulation for an LLM agent runtime.
#[derive(Debug, Parser)]
#[command(name = "faultline", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run many seeds of the built-in scenarios and report failures with replay commands.
    Sweep(sweep::SweepArgs),
    /// List the built-in scenarios.
    Scenarios,
    /// Inspect, repair or print a session transcript (after a crash, say).
    Transcript(transcript::TranscriptArgs),
}

/// Parses the process arguments and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sweep(args) => sweep::run(&args),
        Command::Scenarios => sweep::list(),
        Command::Transcript(args) => transcript::run(&args),
    }
}
