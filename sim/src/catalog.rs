//! The world's catalogs (FAILURE-WORLD-CATALOG, docs/internals/world-catalog.md): each
//! boundary's behaviours as its specification and its official SDKs' types define them, one
//! data file per boundary (`sim/catalog/*.toml`), each entry citing its source. The world
//! draws every entry; a run reports the entries it reached, and a full sweep that never
//! reaches one fails its coverage — a behaviour the world never produces is one the harness
//! cannot find a defect in.
//!
//! The wire formats' entries carry the response the model server serves for them and the
//! reading a correct client gives it (an answer, or a failure with its code): the oracle's
//! expectation comes from the catalog, not from the adapter. The other boundaries' entries
//! are drawn by the world's own hosts (the MCP server, the store link, the tools, the fault
//! filesystem), which report the entries they produced.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use faultline_runtime::event::ErrorCode;
use faultline_runtime::llm::WireFormat;
use serde::Deserialize;

use crate::model_server::Response;

/// One catalog file: its boundary and its entries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The boundary (`openai`, `anthropic`, `gemini`, `mcp`, `postgres`, `tools`, `filesystem`).
    pub boundary: String,
    /// Its entries.
    #[serde(rename = "entry")]
    pub entries: Vec<Entry>,
}

/// One behaviour of a boundary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// `boundary.what.where`, unique across the catalogs.
    pub id: String,
    /// What the other side does, in one sentence.
    pub behaviour: String,
    /// Where the specification or the official SDK says so.
    pub source: String,
    /// What a correct client does with it. For wire entries: `answer` (kept as the step's
    /// answer, never retried), `final` (kept, ends the turn, none of its calls runs) or
    /// `failure CODE` (the attempt fails with `CODE`).
    pub reading: String,
    /// How the world draws it (the family, the host, the scenario).
    pub draw: String,
    /// Wire entries: text the rendered response must contain (a test renders every entry).
    #[serde(default)]
    pub marker: Option<String>,
    /// Wire entries: the response the model server serves. `@tool` in a tool call's name
    /// becomes the scenario's first tool, `@id` a call id unique to the draw.
    #[serde(default)]
    pub response: Option<Response>,
}

/// What a correct client makes of a wire entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// A complete answer: kept as the step's answer, never requested again; its tool calls run.
    Answer,
    /// An answer that ends its turn (cut by the token limit, or a refusal): kept, never
    /// requested again, and none of its tool calls runs.
    Final,
    /// The attempt fails with this code.
    Failure(ErrorCode),
}

impl Reading {
    /// Whether a client must recover from it (a healed server skips such responses).
    pub fn fails(self) -> bool {
        matches!(self, Reading::Failure(_))
    }

    fn parse(text: &str) -> Result<Reading, String> {
        match text.split_once(' ') {
            None if text == "answer" => Ok(Reading::Answer),
            None if text == "final" => Ok(Reading::Final),
            Some(("failure", code)) => {
                let code: ErrorCode = code.parse().map_err(|e| format!("{code:?} is not an error code: {e:?}"))?;
                Ok(Reading::Failure(code))
            }
            _ => Err(format!("{text:?}: a wire reading is `answer`, `final` or `failure CODE`")),
        }
    }
}

/// The catalog files, in the order the docs list them.
const FILES: [(&str, &str); 7] = [
    ("openai", include_str!("../catalog/openai.toml")),
    ("anthropic", include_str!("../catalog/anthropic.toml")),
    ("gemini", include_str!("../catalog/gemini.toml")),
    ("mcp", include_str!("../catalog/mcp.toml")),
    ("postgres", include_str!("../catalog/postgres.toml")),
    ("tools", include_str!("../catalog/tools.toml")),
    ("filesystem", include_str!("../catalog/filesystem.toml")),
];

/// Every catalog, parsed and checked once.
pub fn catalogs() -> &'static [Catalog] {
    static CATALOGS: OnceLock<Vec<Catalog>> = OnceLock::new();
    CATALOGS.get_or_init(|| {
        let parsed: Vec<Catalog> = FILES
            .iter()
            .map(|(name, text)| match parse(name, text) {
                Ok(catalog) => catalog,
                Err(why) => panic!("sim/catalog/{name}.toml: {why}"),
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for entry in parsed.iter().flat_map(|c| &c.entries) {
            assert!(seen.insert(entry.id.clone()), "catalog entry {} appears twice", entry.id);
        }
        parsed
    })
}

fn parse(name: &str, text: &str) -> Result<Catalog, String> {
    let catalog: Catalog = toml::from_str(text).map_err(|e| e.to_string())?;
    if catalog.boundary != name {
        return Err(format!("boundary {:?} in the file of {name:?}", catalog.boundary));
    }
    for entry in &catalog.entries {
        if !entry.id.starts_with(&format!("{name}.")) {
            return Err(format!("{}: an id starts with its boundary ({name}.)", entry.id));
        }
        if entry.source.trim().is_empty() || entry.behaviour.trim().is_empty() {
            return Err(format!("{}: an entry says what it is and cites its source", entry.id));
        }
        if is_wire(name) {
            Reading::parse(&entry.reading).map_err(|e| format!("{}: {e}", entry.id))?;
            if entry.response.is_none() || entry.marker.is_none() {
                return Err(format!("{}: a wire entry has its response and its marker", entry.id));
            }
        }
    }
    Ok(catalog)
}

fn is_wire(boundary: &str) -> bool {
    matches!(boundary, "openai" | "anthropic" | "gemini")
}

/// Every entry id, in catalog order.
pub fn ids() -> impl Iterator<Item = &'static str> {
    catalogs().iter().flat_map(|c| c.entries.iter().map(|e| e.id.as_str()))
}

/// The entry with `id`.
pub fn entry(id: &str) -> Option<&'static Entry> {
    static BY_ID: OnceLock<BTreeMap<&'static str, &'static Entry>> = OnceLock::new();
    BY_ID
        .get_or_init(|| catalogs().iter().flat_map(|c| &c.entries).map(|e| (e.id.as_str(), e)).collect())
        .get(id)
        .copied()
}

/// The reading of wire entry `id`.
pub fn wire_reading(id: &str) -> Option<Reading> {
    entry(id).and_then(|e| Reading::parse(&e.reading).ok())
}

/// The wire entries of `format`.
pub fn wire_entries(format: WireFormat) -> &'static [Entry] {
    let boundary = match format {
        WireFormat::Openai => "openai",
        WireFormat::Anthropic => "anthropic",
        WireFormat::Gemini => "gemini",
    };
    catalogs().iter().find(|c| c.boundary == boundary).map_or(&[], |c| &c.entries)
}

/// Wire entry `entry` as one draw serves it: the scenario's first tool in its calls, call ids
/// unique to the draw (`draw` numbers it), tagged with its id.
pub fn drawn_response(entry: &Entry, tool: &str, draw: usize) -> Response {
    let mut response = entry.response.clone().unwrap_or_default();
    let fill = |text: &str| text.replace("@id", &format!("cat{draw}")).replace("@tool", tool);
    for frame in &mut response.frames {
        match frame {
            crate::model_server::Frame::ToolCall { id, name, .. } => {
                if let Some(id) = id.as_mut() {
                    *id = fill(id);
                }
                if let Some(name) = name.as_mut() {
                    *name = fill(name);
                }
            }
            crate::model_server::Frame::Event { data, .. } => *data = fill(data),
            _ => {}
        }
    }
    response.entry = Some(entry.id.clone());
    response.entry_fails = Some(wire_reading(&entry.id).is_none_or(Reading::fails));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_server::sse_body;

    #[test]
    fn every_catalog_parses_with_unique_ids_that_name_their_boundary() {
        assert_eq!(catalogs().len(), FILES.len());
        assert!(ids().count() > 150, "the wire catalogs alone list more than 150 behaviours");
    }

    /// What the world serves for an entry is what the entry says: its marker is in the bytes
    /// (the body, for an HTTP error or a raw body), in the entry's own format.
    #[test]
    fn every_wire_entry_renders_its_marker_in_its_format() {
        for format in [WireFormat::Openai, WireFormat::Anthropic, WireFormat::Gemini] {
            for (n, entry) in wire_entries(format).iter().enumerate() {
                let response = drawn_response(entry, "send", n);
                let text = format!("{:?}", response.frames);
                assert!(!text.contains("@tool") && !text.contains("@id"), "{}: placeholders left", entry.id);
                let bytes = match (&response.status, &response.body) {
                    (None, None) => sse_body(format, n, &response),
                    (_, body) => body.clone().unwrap_or_default(),
                };
                let marker = entry.marker.as_deref().unwrap_or_default();
                assert!(bytes.contains(marker), "{} renders without {marker:?}:\n{bytes}", entry.id);
                let reading = wire_reading(&entry.id).expect("checked at load");
                assert_eq!(
                    response.fails(),
                    reading.fails(),
                    "{}: a healed server skips exactly the failures",
                    entry.id
                );
            }
        }
    }
}
