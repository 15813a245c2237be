//! What one event of a provider's stream meant to the reader of its format: the common
//! answer every format's reader gives the adapter.

use crate::event::Chunk;

/// What one `data:` payload meant.
#[derive(Debug)]
pub(crate) enum Step {
    /// Chunks (maybe none), and more to come.
    More,
    /// A keep-alive (Anthropic's `ping`): it proves the connection, not progress, so the
    /// idle watchdog does not re-arm on it.
    Ping,
    /// The end of the answer: the terminal chunk.
    Done(Chunk),
}
