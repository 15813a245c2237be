//! One set of size limits for the writer and the reader (FAILURE-LIMITS-AGREE).
//!
//! The writer never produces what the reader refuses: every store checks a record's encoded
//! line against [`RECORD_LINE_BYTES_MAX`] before it writes, the scanners refuse only lines
//! above it, and the agent ends an attempt whose answer would not fit
//! ([`ANSWER_BYTES_MAX`]) before anything oversize is appended.

/// Longest record line (its JSON, newline excluded), in bytes. Writer and reader both use it.
pub const RECORD_LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Bytes of one durable write unit (one write + fsync; one zstd frame): the records of a batch
/// are cut into units of at most this much text, except that a single record larger than this
/// is a unit of its own. A power loss can damage only the unit being written, so the torn
/// rule accepts a hole of zero bytes only within this bound of the end of the file.
pub const WRITE_UNIT_BYTES_MAX: usize = 1024 * 1024;

/// Room left in a record for everything around an answer's text (envelope, block tags, usage),
/// in bytes. An assistant message holds its text in at most a few blocks; 64 KiB is far above
/// what they add.
pub const RECORD_ENVELOPE_BYTES_MAX: usize = 64 * 1024;

/// Largest answer (the JSON-escaped text of all its deltas: text, reasoning, tool arguments)
/// one assistant message may carry, in bytes. Above it the attempt ends `RESPONSE_TOO_LARGE`.
pub const ANSWER_BYTES_MAX: usize = RECORD_LINE_BYTES_MAX - RECORD_ENVELOPE_BYTES_MAX;

const _: () = assert!(WRITE_UNIT_BYTES_MAX < RECORD_LINE_BYTES_MAX);
const _: () = assert!(RECORD_ENVELOPE_BYTES_MAX < RECORD_LINE_BYTES_MAX / 8);

/// The most bytes, counted back from the end of a file, that one damaged write unit can span:
/// a unit of several records is at most [`WRITE_UNIT_BYTES_MAX`] bytes of text; a unit of one
/// record at most one line and its newline. `single_record` says whether the damaged region
/// could be one record (it holds no newline before its last byte).
pub fn torn_unit_bytes_max(single_record: bool) -> usize {
    if single_record {
        RECORD_LINE_BYTES_MAX + 1
    } else {
        WRITE_UNIT_BYTES_MAX
    }
}

/// Bytes `text` takes as a JSON string body (quotes excluded), as serde_json escapes it.
///
/// Branch-free per byte and summed in chunks into 16-bit lanes, so the compiler vectorises
/// it: the oracle and the turn loop measure texts of hundreds of KiB (a match per byte was
/// ~8 % of a run that stores tool outputs at their limit).
pub fn json_escaped_bytes(text: &str) -> usize {
    /// Bytes summed per 16-bit partial sum: at most 5 extra bytes each stays below 2^16.
    const CHUNK_BYTES: usize = 8 * 1024;
    const _: () = assert!(CHUNK_BYTES * 5 < u16::MAX as usize);
    /// What escaping adds to byte `b`: 5 for a control byte (`\u00XX`), 1 for the seven that
    /// serde_json writes as two bytes (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`), else 0.
    fn extra(b: u8) -> u16 {
        let control = u16::from(b < 0x20);
        let short_control = u16::from(matches!(b, b'\n' | b'\r' | b'\t' | 0x08 | 0x0c));
        let quote_or_backslash = u16::from(b == b'"' || b == b'\\');
        control * 5 - short_control * 4 + quote_or_backslash
    }
    let extra: usize = text
        .as_bytes()
        .chunks(CHUNK_BYTES)
        .map(|chunk| usize::from(chunk.iter().fold(0u16, |sum, &b| sum + extra(b))))
        .sum();
    text.len() + extra
}

/// Refuses a record line longer than [`RECORD_LINE_BYTES_MAX`]: what every writer checks
/// before it writes.
pub(crate) fn check_record_line(seq: u64, line_bytes: usize) -> crate::Result<()> {
    if line_bytes > RECORD_LINE_BYTES_MAX {
        return Err(crate::Error::RecordTooLarge { seq, bytes: line_bytes as u64, max: RECORD_LINE_BYTES_MAX as u64 });
    }
    Ok(())
}
