//! Each wire format's reader against a raw `serde_json` parse of the same `data:` payloads
//! (FAILURE-WIRE-FORMATS): what reading a format costs per event beyond parsing its JSON,
//! measured in memory so that neither side pays a transport. Reported, held to no target.

use std::time::Instant;

use faultline_runtime::llm::WireFormat;
use faultline_runtime::testing::{SseDecoder, SseItem, StreamReader};

use super::figure::{figure, median, Figure};
use faultline_sim::model_server::{sse_body, Frame, Response};

/// Interleaved rounds per format (the median round counts).
const PARSE_ROUNDS: usize = 5;

/// Tool calls in the benchmark's answer, after its text.
const PARSE_TOOL_CALLS: u32 = 4;

/// One figure per format: events/s through its reader, beside a `serde_json::Value` parse of
/// the same payloads.
pub(super) fn parse_cost(events: usize) -> Vec<Figure> {
    WireFormat::ALL
        .into_iter()
        .map(|format| {
            let payloads = payloads(format, events);
            let (mut rates, mut raw_rates) = (Vec::new(), Vec::new());
            for _ in 0..PARSE_ROUNDS {
                raw_rates.push(raw_parse(&payloads));
                rates.push(reader_parse(format, &payloads));
            }
            figure(
                &format!("parse: {format} events through its reader"),
                median(rates),
                "events/s",
                Some(median(raw_rates)),
                None,
            )
        })
        .collect()
}

/// The `data:` payloads of an answer of `events` text deltas and a few tool calls in `format`,
/// as the model server writes it.
fn payloads(format: WireFormat, events: usize) -> Vec<String> {
    let mut frames: Vec<Frame> = (0..events).map(|i| Frame::Text(format!("token{i} "))).collect();
    frames.extend((0..PARSE_TOOL_CALLS).map(|i| Frame::ToolCall {
        index: i,
        id: Some(format!("call_{i}")),
        name: Some("send".into()),
        arguments: format!("{{\"to\":\"ops\",\"n\":{i}}}"),
    }));
    let response = Response {
        frames,
        finish: Some("tool_calls".into()),
        usage: Some([10, events as u64, 10 + events as u64]),
        done: true,
        ..Response::default()
    };
    let body = sse_body(format, 0, &response);
    let mut items = Vec::new();
    SseDecoder::new().feed(body.as_bytes(), &mut items).expect("the server writes valid SSE");
    items
        .into_iter()
        .filter_map(|item| match item {
            SseItem::Data(data) => Some(data),
            SseItem::Comment => None,
        })
        .collect()
}

/// Events/s of a generic JSON parse of every payload (`[DONE]` is not JSON: skipped).
fn raw_parse(payloads: &[String]) -> f64 {
    let start = Instant::now();
    for payload in payloads.iter().filter(|p| p.as_str() != "[DONE]") {
        let value: serde_json::Value = serde_json::from_str(payload).expect("json");
        std::hint::black_box(value);
    }
    payloads.len() as f64 / start.elapsed().as_secs_f64()
}

/// Events/s of `format`'s reader over every payload, to its terminal chunk.
fn reader_parse(format: WireFormat, payloads: &[String]) -> f64 {
    let start = Instant::now();
    let mut reader = StreamReader::new(format);
    let mut out = Vec::new();
    let mut done = false;
    for payload in payloads {
        done = reader.read(payload, &mut out).expect("the server's stream reads");
        std::hint::black_box(&out);
        out.clear();
    }
    assert!(done, "the {format} stream reached its end");
    payloads.len() as f64 / start.elapsed().as_secs_f64()
}
