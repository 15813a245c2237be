//! SSE decoding and normalisation: re-chunking never changes the result (property test), and
//! every size limit turns into an error, never unbounded memory.

use faultline_runtime::event::{Chunk, ErrorCode, FinishReason};
use faultline_runtime::llm::*;
use faultline_runtime::testing::{Normaliser, SseDecoder, SseItem};
use proptest::prelude::*;

/// Decodes `pieces` fed one after another into normalised chunks (terminal chunk included).
fn decode(pieces: &[&[u8]]) -> Result<Vec<Chunk>, String> {
    let mut decoder = SseDecoder::new();
    let mut normaliser = Normaliser::new();
    let mut chunks = Vec::new();
    for piece in pieces {
        let mut items = Vec::new();
        decoder.feed(piece, &mut items).map_err(|e| e.to_string())?;
        for item in items {
            match item {
                SseItem::Comment => {}
                SseItem::Data(data) if data == "[DONE]" => {
                    let finish = normaliser.on_done(&mut chunks);
                    chunks.push(finish);
                }
                SseItem::Data(data) => normaliser.on_data(&data, &mut chunks).map_err(|f| f.message)?,
            }
        }
    }
    Ok(chunks)
}

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Reasoning(String),
    Tool { index: u32, arguments: String },
    Comment,
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        "[a-zé漢🙂 ]{1,12}".prop_map(Piece::Text),
        "[a-z ]{1,8}".prop_map(Piece::Reasoning),
        (0u32..3, "[a-z:{}\"]{0,10}").prop_map(|(index, arguments)| Piece::Tool { index, arguments }),
        Just(Piece::Comment),
    ]
}

/// Serialises a stream with the given line ending; `split_data` spreads each JSON payload
/// over two `data:` lines (multi-line data joined with `\n` is still valid JSON).
fn render(pieces: &[Piece], eol: &str, split_data: bool) -> Vec<u8> {
    let mut out = String::new();
    let mut seen_tools = std::collections::BTreeSet::new();
    for piece in pieces {
        let delta = match piece {
            Piece::Comment => {
                out.push_str(&format!(": keep-alive{eol}{eol}"));
                continue;
            }
            Piece::Text(text) => serde_json::json!({"content": text}),
            Piece::Reasoning(text) => serde_json::json!({"reasoning_content": text}),
            Piece::Tool { index, arguments } => {
                let mut call = serde_json::json!({"index": index, "function": {"arguments": arguments}});
                if seen_tools.insert(*index) {
                    call["id"] = serde_json::json!(format!("call_{index}"));
                    call["function"]["name"] = serde_json::json!("send");
                }
                serde_json::json!({"tool_calls": [call]})
            }
        };
        let json = serde_json::json!({"choices": [{"index": 0, "delta": delta}]}).to_string();
        if split_data {
            let (a, b) = json.split_at(json.find(',').unwrap_or(json.len()));
            out.push_str(&format!("data: {a}{eol}data: {b}{eol}{eol}"));
        } else {
            out.push_str(&format!("data: {json}{eol}{eol}"));
        }
    }
    out.push_str(&format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}{eol}{eol}"
    ));
    out.push_str(&format!("data: [DONE]{eol}{eol}"));
    out.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// FAILURE-DEEPSEEK-STREAM: events split across reads at any byte — inside a line, between
    /// `\r` and `\n`, inside a UTF-8 character — decode to the same chunks.
    #[test]
    fn any_rechunking_of_a_valid_stream_yields_the_same_chunks(
        pieces in prop::collection::vec(piece(), 0..12),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        split_data in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let bytes = render(&pieces, eol, split_data);
        let whole = decode(&[&bytes]).unwrap();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for point in points {
            parts.push(&bytes[at..point]);
            at = point;
        }
        parts.push(&bytes[at..]);
        prop_assert_eq!(decode(&parts).unwrap(), whole.clone());
        // Byte at a time, the worst case.
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode(&bytewise).unwrap(), whole.clone());
        let ends_in_finish = matches!(whole.last(), Some(Chunk::Finish { .. }));
        prop_assert!(ends_in_finish, "the stream must end in a finish chunk");
    }
}

#[test]
fn multi_line_data_and_comments_follow_the_sse_rules() {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    decoder.feed(b": keep-alive\n\ndata: one\ndata:two\nevent: ignored\nid: 7\n\n", &mut items).unwrap();
    assert_eq!(items, vec![SseItem::Comment, SseItem::Data("one\ntwo".into())]);
    items.clear();
    decoder.feed(b"data: incomplete", &mut items).unwrap();
    assert!(items.is_empty(), "an event is dispatched only at its blank line");
}

#[test]
fn an_overlong_line_is_an_error_not_a_buffer() {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    let line = vec![b'x'; SSE_LINE_BYTES_MAX + 1];
    assert_eq!(decoder.feed(&line, &mut items), Err(SseError::LineTooLong));
}

#[test]
fn an_oversized_event_is_an_error() {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    let line = format!("data: {}\n", "x".repeat(SSE_LINE_BYTES_MAX - 10));
    let mut result = Ok(());
    for _ in 0..(SSE_EVENT_BYTES_MAX / SSE_LINE_BYTES_MAX + 1) {
        result = decoder.feed(line.as_bytes(), &mut items);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(SseError::EventTooLarge));
}

#[test]
fn an_oversized_body_is_an_error() {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    let block = vec![b'\n'; 1024 * 1024];
    let mut result = Ok(());
    for _ in 0..=(SSE_BODY_BYTES_MAX / block.len() as u64) {
        result = decoder.feed(&block, &mut items);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(SseError::BodyTooLarge));
}

/// Each limit is exact and of its documented size: a line, an event and a body at their
/// limit decode whole, one byte more is the error. (The sizes are spelled out: a constant
/// that shrank would still equal itself.)
#[test]
fn each_limit_is_exact_at_its_documented_size() {
    assert_eq!((SSE_LINE_BYTES_MAX, SSE_EVENT_BYTES_MAX, SSE_BODY_BYTES_MAX), (1 << 20, 4 << 20, 64 << 20));
    let feed = |bytes: &[u8]| {
        let mut items = Vec::new();
        SseDecoder::new().feed(bytes, &mut items).map(|()| items)
    };
    let line_value = "x".repeat(SSE_LINE_BYTES_MAX - "data: ".len());
    let at_limit = feed(format!("data: {line_value}\n\n").as_bytes()).unwrap();
    assert_eq!(at_limit, [SseItem::Data(line_value.clone())], "a line of exactly the limit");
    assert_eq!(feed(format!("data: {line_value}y\n\n").as_bytes()), Err(SseError::LineTooLong));

    // An event of exactly the limit: full lines, joined by one `\n` each, the last one short.
    let mut values: Vec<String> = Vec::new();
    let mut room = SSE_EVENT_BYTES_MAX;
    while room > 0 {
        room -= usize::from(!values.is_empty());
        let n = room.min(line_value.len());
        values.push("x".repeat(n));
        room -= n;
    }
    let event: String = values.iter().map(|v| format!("data: {v}\n")).collect();
    let at_limit = feed(format!("{event}\n").as_bytes()).unwrap();
    assert_eq!(at_limit, [SseItem::Data(values.join("\n"))], "an event of exactly the limit");
    assert_eq!(values.join("\n").len(), SSE_EVENT_BYTES_MAX);
    // One more (empty) data line adds its joining `\n`: one byte over.
    assert_eq!(feed(format!("{event}data:\n\n").as_bytes()), Err(SseError::EventTooLarge));

    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    let block = vec![b'\n'; 1 << 20];
    for _ in 0..SSE_BODY_BYTES_MAX / block.len() as u64 {
        decoder.feed(&block, &mut items).expect("a body of exactly the limit");
    }
    assert_eq!(decoder.total_bytes(), SSE_BODY_BYTES_MAX);
    assert_eq!(decoder.feed(b"\n", &mut items), Err(SseError::BodyTooLarge), "one byte over");
}

#[test]
fn event_data_must_be_utf8() {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    assert_eq!(decoder.feed(b"data: \xff\xfe\n\n", &mut items), Err(SseError::NotUtf8));
}

#[test]
fn finish_reasons_map_to_terminal_chunks() {
    let finish = |reason: &str, content: bool| {
        let mut n = Normaliser::new();
        let mut out = Vec::new();
        if content {
            n.on_data(r#"{"choices":[{"delta":{"content":"x"}}]}"#, &mut out).unwrap();
        }
        n.on_data(&format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":"{reason}"}}]}}"#), &mut out).unwrap();
        match n.on_done(&mut out) {
            Chunk::Finish { reason, .. } => reason,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(finish("stop", true), FinishReason::Stop);
    assert_eq!(finish("length", true), FinishReason::MaxTokens);
    assert_eq!(finish("tool_calls", true), FinishReason::ToolCalls);
    assert_eq!(finish("content_filter", true).failure().unwrap().code, ErrorCode::InvalidRequest);
    assert_eq!(finish("insufficient_system_resource", true).failure().unwrap().code, ErrorCode::Server);
    assert_eq!(finish("stop", false).failure().unwrap().code, ErrorCode::EmptyResponse);
}

#[test]
fn undecodable_event_json_is_malformed() {
    let mut n = Normaliser::new();
    let failure = n.on_data("{not json", &mut Vec::new()).unwrap_err();
    assert_eq!(failure.code, ErrorCode::MalformedResponse);
}
