//! The recovery mix of issue 19: what one tool-calling turn writes, repeated. Per turn:
//! `turn/start`, `step/start`, a `user/message` of ~280 bytes of text, 20 `assistant/chunk`
//! text deltas of a few bytes, an `assistant/message` with ~520 bytes of text and one tool
//! call with ~320 bytes of arguments, `tool/call`, `tool/result` with ~160 bytes of text,
//! `step/end`, `turn/end` — about 195 bytes per event on average. Text is English-like prose
//! (words from a small vocabulary, escapes and all), so it compresses as transcripts do, not
//! 80-fold as a rotating alphabet does.

use faultline_runtime::event::*;

/// Events one turn of the mix writes.
pub const EVENTS_PER_TURN: usize = 28;

const WORDS: [&str; 48] = [
    "the",
    "report",
    "is",
    "ready",
    "and",
    "was",
    "sent",
    "to",
    "team",
    "channel",
    "after",
    "checking",
    "three",
    "sources",
    "weather",
    "in",
    "Tokyo",
    "tomorrow",
    "looks",
    "clear",
    "with",
    "light",
    "wind",
    "from",
    "north",
    "please",
    "confirm",
    "budget",
    "for",
    "Q3",
    "\"draft\"",
    "numbers",
    "revised",
    "by",
    "finance",
    "on",
    "Monday",
    "meeting",
    "moved",
    "10:30",
    "room",
    "B",
    "agenda",
    "attached",
    "thanks",
    "—",
    "café",
    "ok",
];

/// About `bytes` of prose, drawn from the vocabulary by a fixed walk from `seed`.
pub fn prose(seed: u64, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 16);
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if !out.is_empty() {
            out.push(if state % 11 == 0 { '\n' } else { ' ' });
        }
        out.push_str(WORDS[(state % WORDS.len() as u64) as usize]);
    }
    out
}

/// `turns` turns of the mix: a valid, closed log from seq 0.
pub fn records(turns: usize) -> Vec<Record> {
    let mut out = Vec::with_capacity(turns * EVENTS_PER_TURN);
    for t in 0..turns as u64 {
        out.extend(turn(t, out.len() as u64));
    }
    out
}

/// Turn `t` (0-based) of the mix, its first record at seq `first_seq`.
pub fn turn(t: u64, first_seq: u64) -> Vec<Record> {
    let mut out = Vec::with_capacity(EVENTS_PER_TURN);
    let mut seq = first_seq;
    let mut push = |out: &mut Vec<Record>, event: Event, sources: Option<Vec<u64>>| {
        let mut record = Record::new(seq, 1_767_225_600_000 + seq * 7, event);
        record.source_seqs = sources;
        out.push(record);
        seq += 1;
    };
    let turn = t as u32 + 1;
    push(&mut out, Event::TurnStart(TurnStart { turn }), None);
    push(&mut out, Event::StepStart(StepRef { turn, step: 1 }), None);
    push(&mut out, Event::UserMessage(UserMessage { message: Message::user_text(prose(t, 280)) }), None);
    let first_chunk = first_seq + 3;
    for i in 0..20u64 {
        let chunk = Chunk::TextDelta { index: 0, text: prose(t * 31 + i, 4) };
        push(&mut out, Event::AssistantChunk(AssistantChunk { turn, step: 1, attempt: 1, chunk }), None);
    }
    let call_id = format!("call_{t:08x}");
    let arguments = serde_json::json!({"to": "team", "text": prose(t + 7, 290)}).to_string();
    let message = Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Text { text: prose(t + 3, 520) },
            ContentBlock::tool_call(call_id.clone(), "send", arguments.clone()),
        ],
    };
    let sources = (first_chunk..first_chunk + 20).collect();
    push(&mut out, Event::AssistantMessage(AssistantMessage { turn, step: 1, message, usage: None }), Some(sources));
    push(
        &mut out,
        Event::ToolCall(ToolCall { turn, step: 1, call_id: call_id.clone(), name: "send".into(), arguments }),
        None,
    );
    let content = vec![ContentBlock::Text { text: prose(t + 11, 160) }];
    push(
        &mut out,
        Event::ToolResult(ToolResult { turn, step: 1, call_id, content, is_error: false, error: None }),
        Some(vec![first_chunk + 21]),
    );
    push(&mut out, Event::StepEnd(StepRef { turn, step: 1 }), None);
    push(&mut out, Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Completed }), None);
    out
}
