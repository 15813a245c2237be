//! The record envelope: `{"type", "seq", "time", "data", "source_seqs"?, "ignorable"?}`.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use super::payload::*;
use super::Usage;

/// An event whose type this build does not know, kept only because it was marked ignorable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEvent {
    /// The unrecognised `type`.
    pub type_name: String,
    /// Its `data`, uninterpreted.
    pub data: serde_json::Value,
}

macro_rules! events {
    ($( $(#[$doc:meta])* $variant:ident($payload:ty) = $name:literal, )*) => {
        /// A session event: the `type` tag plus its payload.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Event {
            $( $(#[$doc])* $variant($payload), )*
            /// An ignorable event of a type this build does not know.
            Unknown(UnknownEvent),
        }

        /// Every event type this build knows, in SPEC order.
        pub const EVENT_TYPES: &[&str] = &[$($name),*];

        impl Event {
            /// The wire `type` string.
            pub fn type_name(&self) -> &str {
                match self {
                    $( Event::$variant(_) => $name, )*
                    Event::Unknown(unknown) => &unknown.type_name,
                }
            }

            /// The seed that decodes `data` of a known `type` in place, or `None` for an
            /// unknown type.
            fn data_seed(type_name: &str) -> Option<DataSeed> {
                EVENT_TYPES.iter().position(|known| *known == type_name).map(DataSeed)
            }

            /// Decodes `data` for a known `type`; `Ok(None)` when the type is unknown.
            fn decode_known(type_name: &str, data: &RawValue) -> Result<Option<Event>, serde_json::Error> {
                Ok(Some(match type_name {
                    $( $name => Event::$variant(serde_json::from_str(data.get())?), )*
                    _ => return Ok(None),
                }))
            }
        }

        struct DataRef<'a>(&'a Event);

        /// Decodes the payload of the event type at this index of [`EVENT_TYPES`] straight
        /// from the line's deserializer (no second pass over the `data` bytes).
        #[derive(Debug, Clone, Copy)]
        struct DataSeed(usize);

        impl<'de> serde::de::DeserializeSeed<'de> for DataSeed {
            type Value = Event;

            fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Event, D::Error> {
                let mut index = 0;
                $(
                    if self.0 == index {
                        return <$payload>::deserialize(deserializer).map(Event::$variant);
                    }
                    index += 1;
                )*
                unreachable!("data seeds come from EVENT_TYPES (index {} of {index})", self.0)
            }
        }

        impl Serialize for DataRef<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self.0 {
                    $( Event::$variant(payload) => payload.serialize(serializer), )*
                    Event::Unknown(unknown) => unknown.data.serialize(serializer),
                }
            }
        }
    };
}

events! {
    /// `turn/start`
    TurnStart(TurnStart) = "turn/start",
    /// `turn/end`
    TurnEnd(TurnEnd) = "turn/end",
    /// `step/start`
    StepStart(StepRef) = "step/start",
    /// `step/end`
    StepEnd(StepRef) = "step/end",
    /// `user/message`
    UserMessage(UserMessage) = "user/message",
    /// `request/header`
    RequestHeader(RequestHeader) = "request/header",
    /// `assistant/chunk`
    AssistantChunk(AssistantChunk) = "assistant/chunk",
    /// `assistant/message`
    AssistantMessage(AssistantMessage) = "assistant/message",
    /// `tool/call`
    ToolCall(ToolCall) = "tool/call",
    /// `tool/result`
    ToolResult(ToolResult) = "tool/result",
    /// `llm/retry` (boxed: the largest payload and a rare one; unboxed it would make every
    /// record as large as it, and recovery moves records by the hundred thousand)
    LlmRetry(Box<LlmRetry>) = "llm/retry",
    /// `llm/retry-started`
    LlmRetryStarted(LlmRetryStarted) = "llm/retry-started",
    /// `approval/requested`
    ApprovalRequested(ApprovalRequested) = "approval/requested",
    /// `approval/decided`
    ApprovalDecided(ApprovalDecided) = "approval/decided",
    /// `approval/dispatched`
    ApprovalDispatched(ApprovalDispatched) = "approval/dispatched",
}

impl Event {
    /// Whether records of this type may carry `source_seqs` (FAILURE-EVENT-LOG).
    pub fn may_cite_sources(&self) -> bool {
        matches!(self, Event::UserMessage(_) | Event::AssistantMessage(_) | Event::ToolResult(_))
    }
}

/// One line of a session log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Position in the session, contiguous from 0.
    pub seq: u64,
    /// Epoch milliseconds from the Clock.
    pub time: u64,
    /// The event.
    pub event: Event,
    /// Events this derived record was built from.
    pub source_seqs: Option<Vec<u64>>,
    /// A reader that does not know this type may skip it.
    pub ignorable: bool,
}

/// The one-pass envelope visitor of [`Record::decode`]: `Some` only for a record it read
/// completely, `None` to defer to the two-pass reference path.
struct OnePass;

impl<'de> serde::de::Visitor<'de> for OnePass {
    type Value = Option<Record>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a record envelope")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<Record>, A::Error> {
        let mut type_name: Option<&'de str> = None;
        let (mut seq, mut time, mut event) = (None, None, None);
        let (mut source_seqs, mut ignorable): (Option<Option<Vec<u64>>>, Option<bool>) = (None, None);
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "type" if type_name.is_none() => type_name = Some(map.next_value()?),
                "seq" if seq.is_none() => seq = Some(map.next_value::<u64>()?),
                "time" if time.is_none() => time = Some(map.next_value::<u64>()?),
                "data" if event.is_none() => match type_name.and_then(Event::data_seed) {
                    Some(seed) => event = Some(map.next_value_seed(seed)?),
                    None => return Ok(None),
                },
                "source_seqs" if source_seqs.is_none() => source_seqs = Some(map.next_value()?),
                "ignorable" if ignorable.is_none() => ignorable = Some(map.next_value()?),
                // Unknown or duplicate fields: the reference path names the error.
                _ => return Ok(None),
            }
        }
        Ok(match (seq, time, event) {
            (Some(seq), Some(time), Some(event)) => Some(Record {
                seq,
                time,
                event,
                source_seqs: source_seqs.flatten(),
                ignorable: ignorable.unwrap_or(false),
            }),
            _ => None,
        })
    }
}

/// Why a line is not a valid record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Not a JSON object of the envelope's shape.
    #[error("invalid record envelope: {0}")]
    Envelope(serde_json::Error),
    /// A `type` this build does not know, without `"ignorable": true`.
    #[error("unknown event type {0:?} (not marked ignorable)")]
    UnknownType(String),
    /// A known `type` whose `data` does not match its payload.
    #[error("invalid data for {type_name}: {source}")]
    Data {
        /// The event type.
        type_name: String,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// Why a line's bytes are not a valid record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeBytesError {
    /// Not UTF-8.
    #[error("line is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    /// UTF-8, but not a record.
    #[error(transparent)]
    Record(RecordError),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    type_name: Cow<'a, str>,
    seq: u64,
    time: u64,
    #[serde(borrow)]
    data: &'a RawValue,
    #[serde(default)]
    source_seqs: Option<Vec<u64>>,
    #[serde(default)]
    ignorable: bool,
}

impl Record {
    /// A record without sources.
    pub fn new(seq: u64, time: u64, event: Event) -> Self {
        Self { seq, time, event, source_seqs: None, ignorable: false }
    }

    /// Decodes one line (without its trailing newline).
    ///
    /// Recovery decodes every line of a session, so the common case reads a line once, not
    /// as a value first: a streamed delta exactly as [`Record::encode`] writes it is read
    /// without serde (`canonical_delta.rs`); otherwise the envelope's fields are read in order
    /// and `data` is decoded in place once `type` is known. Anything else (an error to
    /// classify, `data` before `type`, an escaped key, an unknown type) takes the two-pass
    /// path, which is the reference.
    pub fn decode(line: &str) -> Result<Record, RecordError> {
        if let Some((seq, time, chunk)) = super::canonical_delta::decode_str(line) {
            return Ok(Record::new(seq, time, Event::AssistantChunk(chunk)));
        }
        match Self::decode_one_pass(line) {
            Some(record) => Ok(record),
            None => Self::decode_two_pass(line),
        }
    }

    /// [`Record::decode`] of a line's bytes. The one-pass path reads the bytes as they are (the
    /// JSON reader checks every string it reads is UTF-8, and nothing else may be anything but
    /// ASCII), so a recovery does not validate each line twice; anything it cannot read whole
    /// goes the reference way, which refuses a line that is not UTF-8 by saying so.
    pub fn decode_bytes(line: &[u8]) -> Result<Record, DecodeBytesError> {
        if let Some((seq, time, chunk)) = super::canonical_delta::decode(line) {
            return Ok(Record::new(seq, time, Event::AssistantChunk(chunk)));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(line);
        let one_pass = serde::Deserializer::deserialize_map(&mut deserializer, OnePass).ok().flatten();
        if let Some(record) = one_pass.filter(|_| deserializer.end().is_ok()) {
            return Ok(record);
        }
        let text = std::str::from_utf8(line).map_err(DecodeBytesError::NotUtf8)?;
        Self::decode_two_pass(text).map_err(DecodeBytesError::Record)
    }

    /// The fast path: `Some` only for a record read completely in one pass.
    fn decode_one_pass(line: &str) -> Option<Record> {
        let mut deserializer = serde_json::Deserializer::from_str(line);
        let record = serde::Deserializer::deserialize_map(&mut deserializer, OnePass).ok()??;
        deserializer.end().ok()?;
        Some(record)
    }

    /// The reference decoder: the envelope with `data` kept raw, then `data` by type.
    pub(super) fn decode_two_pass(line: &str) -> Result<Record, RecordError> {
        let envelope: Envelope<'_> = serde_json::from_str(line).map_err(RecordError::Envelope)?;
        let event = match Event::decode_known(&envelope.type_name, envelope.data) {
            Ok(Some(event)) => event,
            Ok(None) if envelope.ignorable => Event::Unknown(UnknownEvent {
                type_name: envelope.type_name.into_owned(),
                data: serde_json::from_str(envelope.data.get()).map_err(RecordError::Envelope)?,
            }),
            Ok(None) => return Err(RecordError::UnknownType(envelope.type_name.into_owned())),
            Err(source) => return Err(RecordError::Data { type_name: envelope.type_name.into_owned(), source }),
        };
        Ok(Record {
            seq: envelope.seq,
            time: envelope.time,
            event,
            source_seqs: envelope.source_seqs,
            ignorable: envelope.ignorable,
        })
    }

    /// Encodes as one JSON line, without the trailing newline.
    pub fn encode(&self) -> String {
        // Serialising plain data structs into a String cannot fail: no maps with non-string
        // keys, no I/O, no fallible Serialize impls.
        // Sized ahead from the strings the record holds (its JSON is a little longer unless
        // escapes grow it): a 15 MiB answer is encoded without doubling its buffer.
        // Only the records that can be large are measured first (the walk is not free).
        // A chunk carries one delta: its text is measured directly (a stream of 64 KiB deltas
        // grown by doubling held twice each delta until written).
        let text_bytes = match &self.event {
            Event::AssistantMessage(_) | Event::ToolResult(_) => super::texts::text_bytes(self),
            Event::AssistantChunk(chunk) => chunk.chunk.text_bytes(),
            _ => return serde_json::to_string(self).expect("records always serialise"),
        };
        // A message cites the seqs of its chunks: at most 20 digits and a comma each.
        let cited = self.source_seqs.as_ref().map_or(0, |seqs| seqs.len().saturating_mul(SEQ_ENCODED_BYTES_MAX));
        let mut line = Vec::with_capacity(text_bytes.saturating_add(cited).saturating_add(RECORD_ENCODE_SLACK_BYTES));
        serde_json::to_writer(&mut line, self).expect("records always serialise");
        String::from_utf8(line).expect("serde_json writes UTF-8")
    }
}

/// Bytes a record's encoding is sized beyond the strings it holds and the seqs it cites
/// (keys, numbers, quotes).
const RECORD_ENCODE_SLACK_BYTES: usize = 512;

/// Bytes one cited seq takes in `source_seqs`: a u64's 20 digits and a comma.
const SEQ_ENCODED_BYTES_MAX: usize = 21;

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let len = 4 + usize::from(self.source_seqs.is_some()) + usize::from(self.ignorable);
        let mut map = serializer.serialize_map(Some(len))?;
        map.serialize_entry("type", self.event.type_name())?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("time", &self.time)?;
        map.serialize_entry("data", &DataRef(&self.event))?;
        if let Some(sources) = &self.source_seqs {
            map.serialize_entry("source_seqs", sources)?;
        }
        if self.ignorable {
            map.serialize_entry("ignorable", &true)?;
        }
        map.end()
    }
}

/// What a log says of the tokens it cost.
impl Usage {
    /// The usage every attempt of every turn in `records` reported (failed attempts were
    /// billed too), per turn and for the whole log.
    pub fn of_records(records: &[Record]) -> (std::collections::BTreeMap<u32, Usage>, Usage) {
        let mut per_turn: std::collections::BTreeMap<u32, Usage> = std::collections::BTreeMap::new();
        let mut total = Usage::default();
        for record in records {
            if let Event::AssistantChunk(chunk) = &record.event {
                if let super::Chunk::Usage { usage } = &chunk.chunk {
                    per_turn.entry(chunk.turn).or_default().add(usage);
                    total.add(usage);
                }
            }
        }
        (per_turn, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long answer's line is sized ahead, not grown by doubling: its buffer holds little
    /// beyond the line (a doubled one would hold up to twice it).
    #[test]
    fn a_long_answer_is_encoded_into_a_buffer_of_its_size() {
        let text = "x".repeat(3 << 20);
        let message = super::super::Message {
            role: super::super::Role::Assistant,
            content: vec![super::super::ContentBlock::Text { text }],
        };
        // Citing its 300 chunks (a kilobyte of seqs the slack alone would not cover).
        let record =
            Record::new(7, 5, Event::AssistantMessage(AssistantMessage { turn: 1, step: 1, message, usage: None }));
        let record = Record { source_seqs: Some((1_000_000..1_000_300).collect()), ..record };
        let line = record.encode();
        assert!(line.capacity() <= line.len() + 300 * SEQ_ENCODED_BYTES_MAX + RECORD_ENCODE_SLACK_BYTES);
        assert!(line.capacity() >= line.len(), "never grown: {} for {}", line.capacity(), line.len());
        assert_eq!(Record::decode(&line).unwrap(), record);
        // A chunk's delta too.
        let chunk = super::super::AssistantChunk {
            turn: 1,
            step: 1,
            attempt: 1,
            chunk: super::super::Chunk::TextDelta { index: 0, text: "x".repeat(64 << 10) },
        };
        let line = Record::new(8, 5, Event::AssistantChunk(chunk)).encode();
        assert!(line.capacity() <= line.len() + RECORD_ENCODE_SLACK_BYTES, "{} for {}", line.capacity(), line.len());
    }

    /// The one-pass decoder agrees with the reference on every shape of line, valid or not.
    #[test]
    fn one_pass_decoding_agrees_with_the_two_pass_reference() {
        let lines = [
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#,
            r#"{"seq":0,"time":5,"data":{"turn":1},"type":"turn/start"}"#,
            r#"{"type":"user/message","seq":2,"time":5,"data":{"message":{"role":"user","content":[{"type":"text","text":"a\"b\u00e9"}]}},"source_seqs":[1]}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1},"source_seqs":null}"#,
            r#"{"type":"future/thing","seq":3,"time":5,"data":{"x":[1,2]},"ignorable":true}"#,
            r#"{"type":"future/thing","seq":3,"time":5,"data":{"x":1}}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":"one"}}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1,"extra":2}}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1},"extra":true}"#,
            r#"{"type":"turn/start","type":"turn/end","seq":0,"time":5,"data":{"turn":1}}"#,
            r#"{"type":"turn/start","seq":0,"data":{"turn":1}}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}} trailing"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1},"ignorable":null}"#,
            r#"{"type":"turn/start","seq":0,"time":5,"data":{"tu"#,
            r#"[1,2]"#,
            "",
        ];
        for line in [lines[0], lines[2], lines[3]] {
            assert!(Record::decode_one_pass(line).is_some(), "the common shape takes one pass: {line}");
        }
        for line in lines {
            let fast = Record::decode(line).map_err(|e| e.to_string());
            let reference = Record::decode_two_pass(line).map_err(|e| e.to_string());
            assert_eq!(fast, reference, "{line}");
            let bytes = Record::decode_bytes(line.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(bytes, reference, "bytes: {line}");
        }
        // Not UTF-8, inside a string or outside one: refused as such by the bytes path.
        for line in
            [&b"{\"type\":\"turn/start\",\"seq\":0,\"time\":5,\"data\":{\"turn\":1},\"x\":\"\xff\"}"[..], b"\xff{}"]
        {
            let error = Record::decode_bytes(line).unwrap_err().to_string();
            assert!(error.starts_with("line is not UTF-8"), "{error}");
        }
    }
}
