//! The wire formats a provider may speak.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A provider's wire format (FAILURE-WIRE-FORMATS): how a request is shaped and sent, and
/// how its stream and its failures read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireFormat {
    /// OpenAI-compatible chat completions (DeepSeek, OpenAI, and the many compatible APIs).
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API (`streamGenerateContent`).
    Gemini,
}

impl WireFormat {
    /// Every format.
    pub const ALL: [WireFormat; 3] = [WireFormat::Openai, WireFormat::Anthropic, WireFormat::Gemini];

    /// As configs and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            WireFormat::Openai => "openai",
            WireFormat::Anthropic => "anthropic",
            WireFormat::Gemini => "gemini",
        }
    }
}

impl std::str::FromStr for WireFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        WireFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown wire format {s:?} (openai, anthropic or gemini)"))
    }
}

impl fmt::Display for WireFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
