//! The streamed delta's line, read without serde when it is exactly as this build writes it.
//!
//! A session is mostly `assistant/chunk` records carrying one text, reasoning or refusal
//! delta each (seven in ten records of the recovery benchmark's mix, one per streamed token
//! in a real one). serde's generic path spends most of a recovery on them: key matching, the
//! tag-first envelope, a visitor per nested object. This reader accepts only the exact bytes
//! [`Record::encode`] writes for such a record — fields in the encoder's order, no
//! whitespace, integers in their shortest form, a text without escapes or control
//! characters — and answers `None` for anything else, which the serde path then reads (and
//! refuses or accepts) as it always did. So it accepts nothing the reference refuses and
//! reads what it accepts into the same record (pinned by the tests below against the
//! reference: random encoder outputs, and lines edited a byte at a time).

use super::{AssistantChunk, Chunk};

/// The three kinds of delta with the fields `{index, text}`, by their wire tag.
const DELTA_TAGS: [(&[u8], DeltaKind); 3] = [
    (b"text-delta", DeltaKind::Text),
    (b"reasoning-delta", DeltaKind::Reasoning),
    (b"refusal-delta", DeltaKind::Refusal),
];

#[derive(Clone, Copy)]
enum DeltaKind {
    Text,
    Reasoning,
    Refusal,
}

/// A canonical delta line's record: its seq, time and chunk (an `assistant/chunk` record with
/// no sources, which `Record::decode` builds: this file names no `Record`).
pub(super) type Delta = (u64, u64, AssistantChunk);

/// The record of a canonical delta line (no trailing newline), or `None` to take serde's path.
pub(super) fn decode(line: &[u8]) -> Option<Delta> {
    read(Cursor { bytes: line, text: None, at: 0 })
}

/// [`decode`] of a line already known to be UTF-8: its text is not checked again.
pub(super) fn decode_str(line: &str) -> Option<Delta> {
    read(Cursor { bytes: line.as_bytes(), text: Some(line), at: 0 })
}

fn read(mut at: Cursor<'_>) -> Option<Delta> {
    let line_len = at.bytes.len();
    at.literal(b"{\"type\":\"assistant/chunk\",\"seq\":")?;
    let seq = at.integer()?;
    at.literal(b",\"time\":")?;
    let time = at.integer()?;
    at.literal(b",\"data\":{\"turn\":")?;
    let turn = u32::try_from(at.integer()?).ok()?;
    at.literal(b",\"step\":")?;
    let step = u32::try_from(at.integer()?).ok()?;
    at.literal(b",\"attempt\":")?;
    let attempt = u32::try_from(at.integer()?).ok()?;
    at.literal(b",\"chunk\":{\"type\":\"")?;
    let kind = DELTA_TAGS.iter().find_map(|&(tag, kind)| at.literal(tag).map(|()| kind))?;
    at.literal(b"\",\"index\":")?;
    let index = u32::try_from(at.integer()?).ok()?;
    at.literal(b",\"text\":\"")?;
    let text = at.plain_string()?;
    at.literal(b"}}}")?;
    if at.at != line_len {
        return None;
    }
    let chunk = match kind {
        DeltaKind::Text => Chunk::TextDelta { index, text },
        DeltaKind::Reasoning => Chunk::ReasoningDelta { index, text },
        DeltaKind::Refusal => Chunk::RefusalDelta { index, text },
    };
    Some((seq, time, AssistantChunk { turn, step, attempt, chunk }))
}

/// A read position in a line.
struct Cursor<'a> {
    bytes: &'a [u8],
    /// The same line as text, when the caller already checked it is UTF-8.
    text: Option<&'a str>,
    at: usize,
}

impl Cursor<'_> {
    /// Steps over `expected` if the line continues with exactly it.
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(expected).then(|| self.at += expected.len())
    }

    /// A JSON integer as serde_json writes an unsigned one: digits, no sign, no leading zero,
    /// no fraction or exponent (the next byte is checked by the literal after it), no `u64`
    /// overflow (a `u32` field narrows it after).
    fn integer(&mut self) -> Option<u64> {
        let digits = self.bytes.get(self.at..)?.iter().take_while(|b| b.is_ascii_digit()).count();
        let text = &self.bytes[self.at..self.at + digits];
        if digits == 0 || (digits > 1 && text[0] == b'0') {
            return None;
        }
        let value = text.iter().try_fold(0u64, |value, &d| value.checked_mul(10)?.checked_add(u64::from(d - b'0')))?;
        self.at += digits;
        Some(value)
    }

    /// The rest of a string whose opening quote was read, up to and over its closing quote,
    /// when it holds no escape and no control character (which serde_json refuses unescaped)
    /// and is UTF-8.
    fn plain_string(&mut self) -> Option<String> {
        let rest = self.bytes.get(self.at..)?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' || rest[..end].iter().any(|&b| b < 0x20) {
            return None;
        }
        let text = match self.text {
            // Both ends border an ASCII quote: character boundaries of a checked line.
            Some(line) => line[self.at..self.at + end].to_owned(),
            None => std::str::from_utf8(&rest[..end]).ok()?.to_owned(),
        };
        self.at += end + 1;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{AssistantChunk, Chunk, Event, Record};

    /// The fast path's reading as the record `Record::decode` makes of it.
    fn decode(line: &[u8]) -> Option<Record> {
        super::decode(line).map(|(seq, time, chunk)| Record::new(seq, time, Event::AssistantChunk(chunk)))
    }

    fn decode_str(line: &str) -> Option<Record> {
        super::decode_str(line).map(|(seq, time, chunk)| Record::new(seq, time, Event::AssistantChunk(chunk)))
    }

    fn delta(kind: u8, index: u32, text: String) -> Chunk {
        match kind % 3 {
            0 => Chunk::TextDelta { index, text },
            1 => Chunk::ReasoningDelta { index, text },
            _ => Chunk::RefusalDelta { index, text },
        }
    }

    fn record(seq: u64, time: u64, ids: (u32, u32, u32), chunk: Chunk) -> Record {
        let (turn, step, attempt) = ids;
        Record::new(seq, time, Event::AssistantChunk(AssistantChunk { turn, step, attempt, chunk }))
    }

    /// What the fast path read must be what the reference reads from the same bytes, whether
    /// it was handed bytes or checked text.
    fn agrees_with_the_reference(line: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(text) = std::str::from_utf8(line) {
            prop_assert_eq!(decode_str(text), decode(line), "{}", text);
        }
        if let Some(fast) = decode(line) {
            let text = std::str::from_utf8(line);
            prop_assert!(text.is_ok(), "read a line that is not UTF-8: {line:?}");
            let reference = Record::decode_two_pass(text.unwrap_or_default());
            prop_assert_eq!(reference.ok(), Some(fast), "{}", String::from_utf8_lossy(line));
        }
        Ok(())
    }

    /// Bytes that make a JSON line mean something else, or nothing.
    const EDITS: &[u8] = b"0019-.eE+ \t\"\\},:{x\x01\x7f\xff";

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Every delta the encoder writes is read back as the reference reads it; the fast
        /// path takes every one whose text needs no escape (and only those).
        #[test]
        fn every_delta_the_encoder_writes_is_read_as_the_reference_reads_it(
            seq in any::<u64>(), time in any::<u64>(), ids in any::<(u32, u32, u32)>(),
            kind in any::<u8>(), index in any::<u32>(), text in any::<String>(),
        ) {
            let plain = !text.chars().any(|c| c == '"' || c == '\\' || c < ' ');
            let record = record(seq, time, ids, delta(kind, index, text));
            let line = record.encode();
            prop_assert_eq!(Record::decode_two_pass(&line).ok(), Some(record.clone()));
            prop_assert_eq!(decode_str(&line), decode(line.as_bytes()));
            prop_assert_eq!(decode(line.as_bytes()), plain.then_some(record));
        }

        /// A canonical line with one byte replaced, inserted or removed is read by the fast
        /// path only into what the reference reads from it (most edits leave it to serde).
        #[test]
        fn an_edited_delta_line_is_read_only_as_the_reference_reads_it(
            seq in any::<u64>(), time in 0u64..10_000, kind in any::<u8>(), text in "[a-z é]{0,12}",
            at in any::<prop::sample::Index>(), edit in 0usize..3, byte in prop::sample::select(EDITS),
        ) {
            let line = record(seq, time, (1, 2, 3), delta(kind, 0, text)).encode().into_bytes();
            let mut edited = line.clone();
            let i = at.index(line.len());
            match edit {
                0 => edited[i] = byte,
                1 => edited.insert(i, byte),
                _ => {
                    edited.remove(i);
                }
            }
            agrees_with_the_reference(&edited)?;
        }
    }

    /// The shapes the fast path leaves to serde, each next to its canonical twin.
    #[test]
    fn anything_but_the_canonical_shape_is_left_to_serde() {
        let canonical = r#"{"type":"assistant/chunk","seq":7,"time":5,"data":{"turn":1,"step":2,"attempt":3,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}"#;
        assert!(decode(canonical.as_bytes()).is_some());
        for (from, to) in [
            (r#""seq":7"#, r#""seq":07"#),                            // a leading zero: not JSON
            (r#""seq":7"#, r#""seq":18446744073709551616"#),          // past u64
            (r#""turn":1"#, r#""turn":4294967296"#),                  // past u32
            (r#""seq":7"#, r#""seq":7.0"#),                           // a fraction
            (r#""seq":7"#, r#""seq":-7"#),                            // a sign
            (r#""seq":7"#, r#""seq": 7"#),                            // whitespace
            (r#""text":"hi""#, r#""text":"h\"i""#),                   // an escape
            (r#""text":"hi""#, "\"text\":\"h\u{1}i\""),               // a control character
            (r#""text-delta""#, r#""tool-call-delta""#),              // another chunk
            (r#""index":0,"text":"hi""#, r#""text":"hi","index":0"#), // another order
            (r#"}}}"#, r#"}},"source_seqs":[1]}"#),                   // a field more
            (r#"}}}"#, r#"}}} "#),                                    // trailing bytes
        ] {
            let line = canonical.replacen(from, to, 1);
            assert_ne!(line, canonical, "{to}");
            assert_eq!(decode(line.as_bytes()), None, "{line}");
        }
        assert_eq!(decode(b"{\"type\":\"assistant/chunk\",\"seq\":7,\"time\":5,\"data\":{\"turn\":1,\"step\":2,\"attempt\":3,\"chunk\":{\"type\":\"text-delta\",\"index\":0,\"text\":\"\xff\"}}}"), None);
    }
}
