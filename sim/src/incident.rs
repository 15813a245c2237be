//! From an incident to a scenario (FAILURE-INCIDENT-SCENARIO): a recorded session becomes a
//! scenario whose model script is what the model said (each committed message's own chunks:
//! text, reasoning, refusals, tool calls, usage, finish), whose user messages are the
//! session's, and whose tools answer each call with what it returned. Its fault-free run must
//! reproduce the recording record by record (times and the model's name aside); its faults
//! are the seed's swarm, so a sweep puts every fault family and crash point at every step of
//! the real conversation.

use std::collections::BTreeMap;

use faultline_runtime::event::{Chunk, Event, FinishReason, Record};
use serde_json::Value;

use crate::model_server::{Frame, Response};
use crate::scenario::{FaultPlan, ModelPlan, RecordedResult, Scenario, ScenarioTool, ToolKind};
use crate::verdict::RunResult;

/// The swarm's provider settings (as the `generated` scenario's): a recorded session does not
/// say what policy it ran with.
const PROVIDER: &str = "idle_timeout_ms = 1000\n[provider.retry_policy]\nmax_retries = 6\n\
                        [provider.retry_policy.backoff]\ninitial_delay_ms = 100\nmax_delay_ms = 2000\njitter_ratio = 0.1\n";

/// What a recorded session holds for a scenario: the user's messages, the model's committed
/// answers, and the tools it called with how each call was answered.
#[derive(Default)]
struct Recording {
    messages: Vec<String>,
    responses: Vec<crate::model_server::Response>,
    tools: BTreeMap<String, ScenarioTool>,
}

impl Recording {
    fn of(records: &[Record]) -> Recording {
        let by_seq: BTreeMap<u64, &Record> = records.iter().map(|r| (r.seq, r)).collect();
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        let mut recording = Recording::default();
        recording.read(records, &by_seq, &mut names);
        recording
    }

    fn read(&mut self, records: &[Record], by_seq: &BTreeMap<u64, &Record>, names: &mut BTreeMap<String, String>) {
        for record in records {
            match &record.event {
                Event::UserMessage(m) => {
                    self.messages.push(text_of(&serde_json::to_value(&m.message).unwrap_or_default()))
                }
                Event::RequestHeader(h) => note_schemas(&serde_json::to_value(h).unwrap_or_default(), &mut self.tools),
                Event::AssistantMessage(_) => {
                    let chunks: Vec<&Chunk> = record
                        .source_seqs
                        .iter()
                        .flatten()
                        .filter_map(|seq| by_seq.get(seq))
                        .filter_map(|r| if let Event::AssistantChunk(c) = &r.event { Some(&c.chunk) } else { None })
                        .collect();
                    self.responses.push(response_of(&chunks));
                }
                Event::ToolCall(call) => {
                    names.insert(call.call_id.clone(), call.name.clone());
                    self.tools.entry(call.name.clone()).or_insert_with(|| recorded_tool(&call.name));
                }
                Event::ToolResult(result) => {
                    let Some(tool) = names.get(&result.call_id).and_then(|n| self.tools.get_mut(n)) else { continue };
                    let value = serde_json::to_value(result).unwrap_or_default();
                    tool.results.push(RecordedResult {
                        call_id: result.call_id.clone(),
                        text: text_of(&value),
                        error: result.error.as_ref().map(|e| e.code.to_string()),
                    });
                }
                _ => {}
            }
        }
    }
}

/// The scenario of a recorded session's committed `records`, called `name`.
pub fn scenario_from_records(name: &str, records: &[Record]) -> Result<Scenario, String> {
    let Recording { messages, responses, tools } = Recording::of(records);
    if messages.is_empty() {
        return Err("the session holds no user message: nothing to replay".into());
    }
    if responses.len() > crate::scenario::RESPONSES_MAX {
        return Err(format!(
            "{} model responses, above the {} a scenario holds",
            responses.len(),
            crate::scenario::RESPONSES_MAX
        ));
    }
    let calls: usize = tools.values().map(|t| t.results.len()).sum();
    let scenario = Scenario {
        name: name.to_owned(),
        description: format!(
            "Recorded session: {} user message(s), {} model response(s), {calls} tool call(s), under the seed's swarm of faults.",
            messages.len(),
            responses.len()
        ),
        requirement: Some("FAILURE-INCIDENT-SCENARIO".into()),
        tick_ms: 10,
        budget_ms: 120_000,
        messages,
        provider: PROVIDER.into(),
        tools: tools.into_values().collect(),
        tool_concurrency: None,
        store: Default::default(),
        formats: faultline_runtime::llm::WireFormat::ALL.to_vec(),
        model: ModelPlan { refuse_until_ms: 0, responses, repeat_last: true, from_seed: false },
        faults: FaultPlan { from_seed: true, ..FaultPlan::default() },
        expect: Default::default(),
        heal_at_ms: None,
        agent: None,
        generated: false,
        real: crate::scenario::RealPlan {
            sim_only: Some(
                "its swarm draws torn writes and power-loss holes and millisecond windows a real run cannot hold".into(),
            ),
            time_scale: 1,
        },
        regression: None,
    };
    scenario.check()?;
    Ok(scenario)
}

fn recorded_tool(name: &str) -> ScenarioTool {
    ScenarioTool { name: name.to_owned(), kind: ToolKind::Recorded, ..ScenarioTool::default() }
}

/// The text blocks of a message or result (`content: [{type: text, text}]`), joined.
fn text_of(value: &Value) -> String {
    let blocks = value.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect()
}

/// The tools' descriptions and schemas as the session advertised them.
fn note_schemas(header: &Value, tools: &mut BTreeMap<String, ScenarioTool>) {
    let advertised = header.pointer("/header/tools").and_then(Value::as_array).cloned().unwrap_or_default();
    for schema in advertised {
        let Some(name) = schema.get("name").and_then(Value::as_str) else { continue };
        let tool = tools.entry(name.to_owned()).or_insert_with(|| recorded_tool(name));
        tool.description = schema.get("description").and_then(Value::as_str).map(str::to_owned);
        tool.parameters = schema.get("parameters").map(Value::to_string);
    }
}

/// The scripted response that streams `chunks` again.
fn response_of(chunks: &[&Chunk]) -> Response {
    let mut frames = Vec::new();
    let mut calls: BTreeMap<u32, u32> = BTreeMap::new();
    let mut response = Response { done: true, ..Response::default() };
    for chunk in chunks {
        match chunk {
            Chunk::TextDelta { text, .. } => frames.push(Frame::Text(text.clone())),
            Chunk::ReasoningDelta { text, .. } => frames.push(Frame::Reasoning(text.clone())),
            Chunk::RefusalDelta { text, .. } => frames.push(Frame::Refusal(text.clone())),
            Chunk::ToolCallDelta { index, id, name, arguments_delta } => {
                let next = calls.len() as u32;
                let provider_index = *calls.entry(*index).or_insert(next);
                frames.push(Frame::ToolCall {
                    index: provider_index,
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments_delta.clone(),
                });
            }
            Chunk::Usage { usage } => {
                response.usage = Some([usage.prompt_tokens, usage.completion_tokens, usage.total_tokens]);
            }
            // The server signs what it streams itself.
            Chunk::SignatureDelta { .. } => {}
            Chunk::Finish { reason, inferred } => {
                response.finish = match (reason, inferred) {
                    (_, true) => None,
                    (FinishReason::Stop, _) => Some("stop".into()),
                    (FinishReason::ToolCalls, _) => Some("tool_calls".into()),
                    (FinishReason::MaxTokens, _) => Some("length".into()),
                    _ => None,
                };
            }
            Chunk::BlockStart { .. } | Chunk::BlockEnd { .. } => {}
        }
    }
    response.frames = frames;
    response
}

/// How a fault-free run of a recorded session's scenario compares with the recording.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reproduction {
    /// Records compared.
    pub compared: usize,
    /// Whether every record matched (and neither side had more).
    pub equal: bool,
    /// The first difference: position, recorded, replayed.
    pub first_difference: Option<(usize, Option<String>, Option<String>)>,
    /// What was compared: every record, or (when the recording holds retries, which a
    /// fault-free run does not repeat) the conversation without attempts and retries.
    pub compared_what: &'static str,
}

/// The scenario without its faults.
pub fn fault_free(scenario: &Scenario) -> Scenario {
    let mut quiet = scenario.clone();
    quiet.faults = FaultPlan::default();
    quiet
}

/// Compares the transcript of `run` (a fault-free run) with the `recorded` records.
pub fn compare(recorded: &[Record], run: &RunResult) -> Reproduction {
    let retried = recorded.iter().any(|r| matches!(r.event, Event::LlmRetry(_)));
    let keep = |r: &&Record| {
        !retried || !matches!(r.event, Event::AssistantChunk(_) | Event::LlmRetry(_) | Event::LlmRetryStarted(_))
    };
    let lines = |records: &[Record]| -> Vec<String> { records.iter().filter(keep).map(normalise).collect() };
    let (recorded, replayed) = (lines(recorded), lines(&run.transcript));
    let first = (0..recorded.len().max(replayed.len())).find(|&i| recorded.get(i) != replayed.get(i));
    Reproduction {
        compared: recorded.len(),
        equal: first.is_none(),
        first_difference: first.map(|i| (i, recorded.get(i).cloned(), replayed.get(i).cloned())),
        compared_what: if retried {
            "the conversation (the recording's retried attempts left out)"
        } else {
            "every record"
        },
    }
}

/// A record as the comparison sees it: without its time, its seq when attempts were left
/// out, the derived record's sources, and the model's name (the recording's provider is not
/// the simulator's).
fn normalise(record: &Record) -> String {
    let mut value: Value = serde_json::from_str(&record.encode()).expect("records encode to JSON");
    value["time"] = Value::from(0);
    if let Some(object) = value.as_object_mut() {
        object.remove("seq");
        object.remove("source_seqs");
    }
    if let Some(model) = value.pointer_mut("/data/header/model") {
        *model = Value::from("");
    }
    value.to_string()
}
