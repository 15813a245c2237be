//! Builders for well-formed event sequences, shared by the tests.

use faultline_runtime::event::*;

/// Epoch ms used as the time of every record built here.
pub const T0: u64 = 1_767_225_600_000;

/// Appends records with contiguous seqs.
#[derive(Debug, Default, Clone)]
pub struct Log {
    pub records: Vec<Record>,
}

impl Log {
    pub fn push(&mut self, event: Event) -> u64 {
        let seq = self.records.len() as u64;
        self.records.push(Record::new(seq, T0 + seq, event));
        seq
    }

    pub fn push_cited(&mut self, event: Event, sources: Vec<u64>) -> u64 {
        let seq = self.push(event);
        self.records.last_mut().unwrap().source_seqs = Some(sources);
        seq
    }

    /// A complete turn: a user message, one step whose message calls `send`, its result, and
    /// a second step that answers in text.
    pub fn tool_turn(&mut self, turn: u32) {
        self.push(Event::TurnStart(TurnStart { turn }));
        self.push(Event::StepStart(StepRef { turn, step: 1 }));
        self.push(Event::UserMessage(UserMessage { message: Message::user_text("send hi") }));
        self.push(Event::RequestHeader(request_header()));
        let c1 = self.push(chunk(turn, 1, 1, tool_delta()));
        let c2 = self.push(chunk(turn, 1, 1, Chunk::finish(FinishReason::ToolCalls)));
        self.push_cited(Event::AssistantMessage(tool_message(turn, 1, "c1")), vec![c1, c2]);
        self.push(Event::ToolCall(tool_call(turn, 1, "c1")));
        self.push(Event::ToolResult(ok_result(turn, 1, "c1")));
        self.push(Event::StepEnd(StepRef { turn, step: 1 }));
        self.push(Event::StepStart(StepRef { turn, step: 2 }));
        let c3 = self.push(chunk(turn, 2, 1, Chunk::TextDelta { index: 0, text: "sent".into() }));
        self.push_cited(Event::AssistantMessage(text_message(turn, 2, "sent")), vec![c3]);
        self.push(Event::StepEnd(StepRef { turn, step: 2 }));
        self.push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Completed }));
    }
}

pub fn request_header() -> RequestHeader {
    RequestHeader {
        header: RequestPrefix {
            model: "test-model".into(),
            system: Some("be brief".into()),
            tools: vec![ToolSchema {
                name: "send".into(),
                description: "send a message".into(),
                parameters: serde_json::json!({"type":"object","properties":{"to":{"type":"string"}}}),
            }],
        },
        reason: HeaderReason::Initial,
    }
}

pub fn chunk(turn: u32, step: u32, attempt: u32, chunk: Chunk) -> Event {
    Event::AssistantChunk(AssistantChunk { turn, step, attempt, chunk })
}

pub fn tool_delta() -> Chunk {
    Chunk::ToolCallDelta { index: 0, id: Some("c1".into()), name: Some("send".into()), arguments_delta: "{}".into() }
}

pub fn tool_message(turn: u32, step: u32, call_id: &str) -> AssistantMessage {
    AssistantMessage {
        turn,
        step,
        message: Message { role: Role::Assistant, content: vec![ContentBlock::tool_call(call_id, "send", "{}")] },
        usage: None,
    }
}

pub fn text_message(turn: u32, step: u32, text: &str) -> AssistantMessage {
    AssistantMessage {
        turn,
        step,
        message: Message { role: Role::Assistant, content: vec![ContentBlock::text(text)] },
        usage: None,
    }
}

pub fn tool_call(turn: u32, step: u32, call_id: &str) -> ToolCall {
    ToolCall { turn, step, call_id: call_id.into(), name: "send".into(), arguments: "{}".into() }
}

pub fn ok_result(turn: u32, step: u32, call_id: &str) -> ToolResult {
    ToolResult {
        turn,
        step,
        call_id: call_id.into(),
        content: vec![ContentBlock::text("ok")],
        is_error: false,
        error: None,
    }
}

pub fn error_result(turn: u32, step: u32, call_id: &str, code: ErrorCode) -> ToolResult {
    ToolResult {
        turn,
        step,
        call_id: call_id.into(),
        content: vec![ContentBlock::text("failed")],
        is_error: true,
        error: Some(ToolError { name: "test".into(), code }),
    }
}
