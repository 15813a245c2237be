//! The runtime's error type.

use crate::event::{HeaderError, RecordError, Violation};

/// Everything that can go wrong in the runtime, one variant per kind of cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation through a seam failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (never includes a credential).
        context: String,
        /// The OS or simulated error.
        source: std::io::Error,
    },
    /// A record could not be decoded.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A session header could not be decoded or is unsupported.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// A log invariant is broken.
    #[error("log invariant violated: {0}")]
    Invariant(#[from] Violation),
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
