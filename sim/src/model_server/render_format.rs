//! A scripted response in the wire format its request came in: each format's renderer, and
//! the whole body a benchmark serves.

use faultline_runtime::llm::WireFormat;

use super::render::{Meta, MODEL_ID};
use super::script::Response;

/// The SSE events of each frame of `response` in `format` (with the delay it asks for), and
/// the tail after them.
pub(super) fn render(
    format: WireFormat,
    meta: &Meta,
    response: &Response,
) -> (Vec<(Option<String>, u64)>, Vec<String>) {
    match format {
        WireFormat::Openai => super::render::openai(meta, response),
        WireFormat::Anthropic => super::render_anthropic::render(meta, response),
        WireFormat::Gemini => super::render_gemini::render(meta, response),
    }
}

/// The whole SSE body request `n` gets for `response` in `format`, ignoring delays and faults:
/// what a benchmark serves from memory so that the transport costs nothing measurable.
pub fn sse_body(format: WireFormat, n: usize, response: &Response) -> String {
    let meta = Meta { n, created: 0, model: MODEL_ID.to_owned(), whole: false, include_usage: true };
    let (events, tail) = render(format, &meta, response);
    events.into_iter().filter_map(|(event, _)| event).chain(tail).collect()
}
