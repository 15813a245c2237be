//! What a real agent child tells the harness: one JSON object per line on its stdout, written
//! and flushed synchronously, so that everything reported before a SIGKILL is already in the
//! pipe when the process dies.

use serde::{Deserialize, Serialize};

use faultline_runtime::seams::CrashPoint;

/// Longest report line the harness reads, in bytes: a record line at the store's limit plus
/// the envelope.
pub const REPORT_LINE_BYTES_MAX: usize = faultline_runtime::store::RECORD_LINE_BYTES_MAX + 4096;

/// One report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "kebab-case")]
pub enum HostReport {
    /// Set up, nothing touched yet: waiting for [`GO_COMMAND`].
    Ready,
    /// A line for the run's trace.
    Trace {
        /// The line, without its time.
        line: String,
    },
    /// The agent accepted a record (its encoded line).
    Accepted {
        /// `Record::encode`.
        record: String,
    },
    /// Every record below `through` is acknowledged durable, at `at_ms` of the run's clock.
    Durable {
        /// First seq not yet durable.
        through: u64,
        /// When the acknowledgement was observed (ms since the run's origin).
        at_ms: u64,
    },
    /// The disk witness saw a record become durable.
    Synced {
        /// `Record::encode` of the durable record.
        record: String,
        /// `CLOCK_MONOTONIC` ns when the fsync returned: the run's order of events.
        stamp: u64,
        /// ms of the run's clock.
        at_ms: u64,
    },
    /// The host produced a world catalog entry.
    Reached {
        /// The entry's id.
        entry: String,
    },
    /// A local tool returned its answer (its own record, outside the runtime).
    Answered {
        /// The call's execution id.
        execution_id: String,
        /// ms of the run's clock.
        at_ms: u64,
    },
    /// A local tool's body ran (its own record of an effect, outside the runtime).
    Ran {
        /// The call's execution id.
        execution_id: String,
        /// The arguments it ran with (JSON text).
        arguments: String,
        /// `CLOCK_MONOTONIC` ns when it ran: the run's order of events.
        stamp: u64,
        /// ms of the run's clock.
        at_ms: u64,
    },
    /// The simulated user was given a turn's outcome.
    Outcome {
        /// The turn.
        turn: u32,
        /// Its reason, as reported.
        reason: faultline_runtime::event::TurnEndReason,
        /// Whether it was reported kept.
        kept: bool,
        /// `CLOCK_MONOTONIC` ns when the user had it.
        stamp: u64,
        /// ms of the run's clock.
        at_ms: u64,
    },
    /// The agent reported a persistence failure.
    PersistFailure {
        /// ms of the run's clock.
        at_ms: u64,
    },
    /// A fault family fired inside the host.
    Fault {
        /// `cancel`, `config-applied`, `config-rejected`.
        family: String,
    },
    /// The message sent with a late cancel was refused.
    ExtraRefused,
    /// A crash point was reached.
    Hit {
        /// Which.
        point: CrashPoint,
    },
    /// The host is about to SIGKILL itself at its planned crash.
    Crash {
        /// The crash point, or `None` for a crash before a disk operation.
        point: Option<CrashPoint>,
        /// The disk operation it stopped before (for a crash before a disk operation).
        fs_op: Option<u64>,
        /// Mutating disk operations it made.
        fs_ops: u64,
    },
    /// The incarnation ended on its own.
    End {
        /// How.
        outcome: EndOutcome,
        /// Why it stopped, for `refused` and `stopped`.
        error: Option<String>,
        /// Mutating disk operations it made.
        fs_ops: u64,
    },
}

/// How an incarnation ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndOutcome {
    /// The workload ran to its end.
    Done,
    /// The log was refused as corrupt (an operator must look: no restart).
    Refused,
    /// It could not start (ENOSPC, EIO): a supervisor restarts it.
    Stopped,
}

/// What the harness writes on the child's stdin: the fault window is over.
pub const HEAL_COMMAND: &str = "heal";
/// What the harness writes on the child's stdin to start it: `go ORIGIN_NS`, the run's clock
/// origin (`CLOCK_MONOTONIC` ns).
pub const GO_COMMAND: &str = "go";
