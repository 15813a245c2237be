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

/// Feeds `events` to a format's reader (its `on_data`) until it is done or fails: every chunk
/// it wrote, and its terminal chunk (`None` when the events ran out first) or its failure.
#[cfg(test)]
pub(crate) fn read_events(
    mut on_data: impl FnMut(&str, &mut Vec<Chunk>) -> Result<Step, crate::event::Failure>,
    events: &[&str],
) -> (Vec<Chunk>, Result<Option<Chunk>, crate::event::Failure>) {
    let mut out = Vec::new();
    for data in events {
        match on_data(data, &mut out) {
            Ok(Step::Done(finish)) => return (out, Ok(Some(finish))),
            Ok(_) => {}
            Err(failure) => return (out, Err(failure)),
        }
    }
    (out, Ok(None))
}
