//! One wire format's stream reader, driven payload by payload: what the adapter does with each
//! SSE `data:` payload once the transport and the SSE decoder have delivered it (the parse-cost
//! benchmark's subject).

use crate::event::{Chunk, Failure};
use crate::llm::reading::Reader;
use crate::llm::step::Step;
use crate::llm::WireFormat;

/// The reader of one attempt's stream in `format`.
pub struct StreamReader(Reader);

impl std::fmt::Debug for StreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReader").finish_non_exhaustive()
    }
}

impl StreamReader {
    /// A reader for a new attempt.
    pub fn new(format: WireFormat) -> Self {
        Self(Reader::new(format))
    }

    /// Reads one `data:` payload, appending its chunks to `out`; `Ok(true)` once the answer
    /// ended (its terminal chunk appended too), `Err` for the failure the payload names.
    pub fn read(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<bool, Failure> {
        match self.0.on_data(data, out)? {
            Step::Done(finish) => {
                out.push(finish);
                Ok(true)
            }
            Step::More | Step::Ping => Ok(false),
        }
    }
}
