//! The one exit-code table of the `faultline` command (README "Exit codes", docs/cli.md).
//!
//! Every subcommand exits with one of these; none invents its own. A script can tell "I
//! called it wrong" (1) from "it ran and failed" (2) from "the transcript needs attention"
//! (3, 4, 5) from "the answer was not kept" (6) from "a person must decide" (7).

use std::process::ExitCode;

/// Success: the turn completed and is durable, the sweep found no failure, the transcript is
/// clean.
pub const OK: u8 = 0;
/// Bad arguments, a bad config or unreadable input, an MCP server that cannot be started or
/// listed: nothing was run and nothing created.
/// (clap's own default for a usage error is 2, which this table gives to "ran and failed".)
pub const USAGE: u8 = 1;
/// Ran and failed: the turn ended in error or out of budget, the sweep found failures, the
/// endpoint disagreed with the conformance suite, the agent's database could not be reached.
pub const FAILED: u8 = 2;
/// The turn was aborted (SIGTERM) or interrupted, or the transcript needs repair (an open
/// turn that `transcript repair` closes).
pub const NEEDS_ATTENTION: u8 = 3;
/// The transcript is corrupt (a damaged record before its end).
pub const CORRUPT: u8 = 4;
/// The transcript's format is one this build cannot read (built without its cargo feature).
pub const UNSUPPORTED: u8 = 5;
/// Not kept: what the turn or the session's closing reached could not be made durable (a
/// full disk, EIO, SQLITE_FULL), whatever was printed (FAILURE-OUTCOME-DURABLE).
pub const NOT_KEPT: u8 = 6;
/// The turn is paused: a tool call waits for a person's decision (`faultline approval`), and
/// `agent run --resume` continues it once decided. Nothing is lost or repeated.
pub const AWAITING_APPROVAL: u8 = 7;
/// Ctrl-C: the turn was cancelled gracefully (drained, flushed, `turn/end {aborted}`).
pub const CTRL_C: u8 = 130;
/// The reader of standard output went away (128 + SIGPIPE, what a shell reports for tools
/// killed by the signal).
pub const BROKEN_PIPE: u8 = 141;

/// `code` as a process exit status.
pub fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// Prints `message` after `who: ` on stderr and exits [`USAGE`].
pub fn usage(who: &str, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("{who}: {message}");
    ExitCode::from(USAGE)
}
