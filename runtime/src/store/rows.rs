//! A session stored as database rows (a header text and one `(seq, record)` row per record),
//! checked by one set of rules for every database backend (SQLite, PostgreSQL).
//!
//! A database cannot tear a committed row, so every problem in one is corruption: the
//! inspection refuses it at the row, naming its seq as the "offset".

use super::{repair, Inspection, OutcomeEvidence, ScanError, ScanStatus};
use crate::event::{HeaderError, Record, SessionHeader, Validator};
use crate::seams::OwnerIdentity;
use crate::Result;

/// Inspects a session from its stored header text and its rows in seq order. `rows` yields
/// `(seq, record text)`; an error reading a row is returned as it is (a driver's error, not
/// corruption).
pub(crate) fn inspect_rows<E>(
    id: &str,
    header: &str,
    owner: Option<OwnerIdentity>,
    rows: impl IntoIterator<Item = std::result::Result<(i64, String), E>>,
    evidence: &dyn OutcomeEvidence,
) -> Result<Inspection>
where
    crate::Error: From<E>,
{
    let refused = |owner, status, offset, reason: String| Inspection {
        status,
        header: None,
        records: Vec::new(),
        record_count: 0,
        last_seq: None,
        torn_bytes: 0,
        dropped_records: 0,
        torn_from_seq: None,
        recovered: Vec::new(),
        open_turn: false,
        closers: Vec::new(),
        error: Some(ScanError { offset, reason }),
        owner,
        validator: None,
    };
    let header = match SessionHeader::decode(header) {
        Ok(header) => header,
        Err(e @ HeaderError::Unsupported { .. }) => {
            return Ok(refused(owner, ScanStatus::Unsupported, 0, e.to_string()))
        }
        Err(e) => return Ok(refused(owner, ScanStatus::Corrupt, 0, e.to_string())),
    };
    let mut validator = Validator::new();
    let mut records = Vec::new();
    for row in rows {
        let (seq, text) = row?;
        let at = u64::try_from(seq).unwrap_or(0);
        if text.len() > super::RECORD_LINE_BYTES_MAX {
            let reason = format!("row seq {seq} is {} bytes, above the record limit", text.len());
            return Ok(refused(owner, ScanStatus::Corrupt, at, reason));
        }
        let record = match Record::decode(&text) {
            Ok(record) if i64::try_from(record.seq) == Ok(seq) => record,
            Ok(record) => {
                return Ok(refused(owner, ScanStatus::Corrupt, at, format!("row seq {seq} holds seq {}", record.seq)))
            }
            Err(e) => return Ok(refused(owner, ScanStatus::Corrupt, at, format!("row seq {seq}: {e}"))),
        };
        // The scan stops at a violation: no copy per record to keep the validator unchanged.
        if let Err(v) = validator.push_in_place(&record) {
            return Ok(refused(owner, ScanStatus::Corrupt, at, format!("log invariant violated: {v}")));
        }
        records.push(record);
    }
    let closers = repair::closers_with(&records, id, evidence);
    for closer in &closers {
        validator.push_in_place(closer).expect("closers continue the log");
    }
    Ok(Inspection {
        status: ScanStatus::Clean,
        header: Some(header),
        record_count: records.len() as u64,
        last_seq: records.last().map(|r| r.seq),
        records,
        torn_bytes: 0,
        dropped_records: 0,
        torn_from_seq: None,
        recovered: Vec::new(),
        open_turn: !closers.is_empty(),
        closers,
        error: None,
        owner,
        validator: Some(validator),
    })
}

/// Encodes `records` as rows, each checked against the record limit every reader applies
/// (FAILURE-LIMITS-AGREE): an oversized record refuses the whole batch before anything is
/// written.
pub(crate) fn encode_rows(records: &[Record]) -> Result<Vec<(i64, String)>> {
    records
        .iter()
        .map(|record| {
            let line = record.encode();
            super::check_record_line(record.seq, line.len())?;
            Ok((record.seq as i64, line))
        })
        .collect()
}
