//! faultline runtime: an LLM tool-calling agent runtime with layered failure recovery.
//!
//! The runtime is compiled against four seams ([`Clock`], [`Net`], [`Fs`], [`Entropy`]) so the
//! same code runs in production ([`production::seams`]) and inside the deterministic simulator
//! of the `faultline-sim` crate. See `ARCHITECTURE.md` at the repository root for the map.

pub mod agent;
pub mod bugs;
mod error;
pub mod event;
pub mod llm;
pub mod outbox;
pub mod production;
pub mod report;
mod seams;
mod secrets;
pub mod store;

pub use error::{Error, Result};
pub use seams::{
    crash_point, BoxFuture, ByteStream, Clock, CrashPoint, Entropy, EntropyExt, Fs, FsFile, FsMetadata, Listener,
    Liveness, Monotonic, Net, NoProbe, OpenOptions, OwnerIdentity, Probe, Process, Seams, CRASH_POINTS,
};
pub use secrets::{Scrubber, StreamKey, StreamScrubber, SECRETS_COUNT_MAX, SECRET_BYTES_MAX, SECRET_BYTES_MIN};
