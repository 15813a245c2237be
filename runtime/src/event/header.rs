//! The session header record that starts every session file.

use serde::{Deserialize, Serialize};

/// The only header version this build reads and writes.
pub const SESSION_VERSION: u32 = 1;

/// `{"type":"session","version":1,"id":...,"created_at":...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// Format version.
    pub version: u32,
    /// Session id.
    pub id: String,
    /// Creation time, epoch milliseconds.
    pub created_at: u64,
}

/// Why a header line was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// A well-formed header of a version this build does not support: not corruption, and
    /// never "repaired".
    #[error("unsupported session version {found} (this build reads version {SESSION_VERSION})")]
    Unsupported {
        /// The version found.
        found: serde_json::Value,
    },
    /// Not a session header at all.
    #[error("malformed session header: {0}")]
    Malformed(String),
}

/// The wire form. (serde cannot combine an internal `type` tag with `deny_unknown_fields`,
/// and a header with stray fields should be refused, so the tag is an ordinary field here.)
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(rename = "type")]
    type_name: &'a str,
    version: u32,
    id: String,
    created_at: u64,
}

#[derive(Deserialize)]
struct HeaderProbe {
    #[serde(rename = "type")]
    type_name: String,
    version: serde_json::Value,
}

impl SessionHeader {
    /// A version-1 header.
    pub fn new(id: impl Into<String>, created_at: u64) -> Self {
        Self { version: SESSION_VERSION, id: id.into(), created_at }
    }

    /// Parses a header line, telling "unsupported version" apart from "malformed".
    pub fn decode(line: &str) -> Result<SessionHeader, HeaderError> {
        let probe: HeaderProbe = serde_json::from_str(line).map_err(|e| HeaderError::Malformed(e.to_string()))?;
        if probe.type_name != "session" {
            return Err(HeaderError::Malformed(format!(
                "first record has type {:?}, expected \"session\"",
                probe.type_name
            )));
        }
        if probe.version != SESSION_VERSION {
            return Err(HeaderError::Unsupported { found: probe.version });
        }
        let wire: Wire<'_> = serde_json::from_str(line).map_err(|e| HeaderError::Malformed(e.to_string()))?;
        Ok(SessionHeader { version: wire.version, id: wire.id, created_at: wire.created_at })
    }

    /// Encodes as one JSON line, without the trailing newline.
    pub fn encode(&self) -> String {
        let wire =
            Wire { type_name: "session", version: self.version, id: self.id.clone(), created_at: self.created_at };
        serde_json::to_string(&wire).expect("headers always serialise")
    }
}
