//! One attempt's stream reader, in its route's wire format.

use super::format::WireFormat;
use super::normalise::Normaliser;
use super::step::Step;
use crate::event::Chunk;
use crate::event::{ErrorCode, Failure, FinishReason};

/// The reader of one attempt's stream, in its route's format.
pub(crate) enum Reader {
    Openai(Normaliser),
    Anthropic(super::anthropic::Reader),
    Gemini(super::gemini::Reader),
}

impl Reader {
    pub(crate) fn new(format: WireFormat) -> Self {
        match format {
            WireFormat::Openai => Reader::Openai(Normaliser::new()),
            WireFormat::Anthropic => Reader::Anthropic(super::anthropic::Reader::new()),
            WireFormat::Gemini => Reader::Gemini(super::gemini::Reader::new()),
        }
    }

    /// Reads one `data:` payload into `out`.
    pub(crate) fn on_data(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<Step, Failure> {
        match self {
            Reader::Openai(normaliser) if data.trim() == "[DONE]" => Ok(Step::Done(normaliser.on_done(out))),
            Reader::Openai(normaliser) => normaliser.on_data(data, out).map(|()| Step::More),
            Reader::Anthropic(reader) => reader.on_data(data, out),
            Reader::Gemini(reader) => reader.on_data(data, out),
        }
    }

    /// The body ended before the answer did (`total_bytes` of it arrived).
    pub(crate) fn on_end(&self, total_bytes: u64) -> FinishReason {
        if total_bytes == 0 {
            return FinishReason::Error { failure: Failure::new(ErrorCode::EmptyResponse, "the response had no body") };
        }
        let last = match self {
            Reader::Openai(_) => "[DONE]",
            Reader::Anthropic(_) => "message_stop",
            Reader::Gemini(_) => "a finishReason",
        };
        FinishReason::Error {
            failure: Failure::new(ErrorCode::StreamClosed, format!("the stream ended without {last}")),
        }
    }
}
