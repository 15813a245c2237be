//! `[[mcp_servers]]`: tools served by Model Context Protocol servers (FAILURE-MCP-TOOLS),
//! either a program spoken to over stdio or a streamable-HTTP URL.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::llm::ConfigError;

/// Most `[[mcp_servers]]` in one file.
pub const MCP_SERVERS_MAX: usize = 16;
/// Longest server name, in bytes: tool names are `SERVER__TOOL`, and providers take 64.
pub const MCP_SERVER_NAME_BYTES_MAX: usize = 24;
/// Longest `url`, in bytes.
pub const MCP_URL_BYTES_MAX: usize = 2048;
/// Most entries in each of `env`, `headers`, `headers_env`, `tools`, `side_effects`, `sim`.
pub const MCP_TABLE_ENTRIES_MAX: usize = 64;

/// One `[[mcp_servers]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct McpServerConfig {
    /// The server's name: its tools reach the model as `NAME__TOOL`. 1-24 of `[a-z0-9-]`.
    pub name: String,
    /// A program spoken to over stdio (program and arguments). Exactly one of `command` and
    /// `url`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// A streamable-HTTP endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// Variables added to the environment a stdio server gets (this process's own, less the
    /// provider key variables).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Headers sent with every HTTP request. Each value is scrubbed by value from everything
    /// the runtime stores or sends on, like a secret; a credential belongs in `headers_env`
    /// all the same, so it is not written in the file.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from the named environment variables when the agent
    /// starts (`{ authorization = "BILLING_MCP_TOKEN" }`); each value is a secret, scrubbed by
    /// value wherever text leaves.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// When set, only these of the server's tools are offered to the model.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Each call's cooperative deadline, in ms (1..=[`crate::tool::TOOL_TIMEOUT_MS_MAX`]); on expiry
    /// the server is sent `notifications/cancelled`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Whether a tool changes the world, by tool name, over what its annotations say.
    #[serde(default)]
    pub side_effects: BTreeMap<String, bool>,
    /// `[mcp_servers.sim.TOOL]`: the tools of the server's simulated stand-in under the fault
    /// harness (`faultline sweep --agent FILE`), kept as written: the simulator reads and
    /// checks them, and the runtime never does.
    #[serde(default)]
    pub sim: BTreeMap<String, toml::Table>,
    /// The server's tools (as it lists them) each call of which waits for a person's decision
    /// (FAILURE-APPROVAL).
    #[serde(default)]
    pub approval: Vec<String>,
    /// Who may decide those calls (default: anyone who can write the session).
    #[serde(default)]
    pub approvers: Vec<String>,
    /// How long such a call waits before it expires `APPROVAL_EXPIRED`, in ms.
    #[serde(default)]
    pub approval_deadline_ms: Option<u64>,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransportConfig {
    /// A program over stdio.
    Stdio {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A streamable-HTTP URL.
    Http {
        /// The URL.
        url: String,
    },
}

impl McpServerConfig {
    /// The approval rule of the server's tool `tool` (its name on the server), when its calls
    /// wait for a person (`approval` names it).
    pub fn approval_policy(&self, tool: &str) -> Option<crate::approval::ApprovalPolicy> {
        self.approval
            .iter()
            .any(|t| t == tool)
            .then(|| super::approval::policy(&self.approvers, self.approval_deadline_ms))
    }

    /// How the server is reached (valid once the agent file was parsed: `AgentFile::parse`
    /// checks every entry).
    pub fn transport(&self) -> McpTransportConfig {
        match (&self.command, &self.url) {
            (Some(command), _) => McpTransportConfig::Stdio {
                program: command.first().cloned().unwrap_or_default(),
                args: command.iter().skip(1).cloned().collect(),
            },
            (None, url) => McpTransportConfig::Http { url: url.clone().unwrap_or_default() },
        }
    }

    /// Checks the entry; `at` names a field for the error (`mcp_servers[0].url`).
    pub(crate) fn check(&self, at: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let bad = |field: &str, message: &str| Err(ConfigError { path: at(field), message: message.into() });
        let name_ok =
            |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok(&self.name) || self.name.len() > MCP_SERVER_NAME_BYTES_MAX {
            return bad("name", "must be 1-24 characters of [a-z0-9-]");
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) | (None, None) => return bad("command", "give exactly one of command and url"),
            (Some(command), None) if command.first().is_none_or(String::is_empty) => {
                return bad("command", "must name a program");
            }
            (None, Some(url)) => crate::tool::check_http_url(url, MCP_URL_BYTES_MAX, "a token in headers_env")
                .or_else(|message| bad("url", &message))?,
            _ => {}
        }
        let over = [
            ("env", self.env.len()),
            ("headers", self.headers.len()),
            ("headers_env", self.headers_env.len()),
            ("tools", self.tools.as_ref().map_or(0, Vec::len)),
            ("side_effects", self.side_effects.len()),
            ("sim", self.sim.len()),
            ("approval", self.approval.len()),
        ];
        if let Some((field, _)) = over.iter().find(|(_, n)| *n > MCP_TABLE_ENTRIES_MAX) {
            return bad(field, &format!("more than {MCP_TABLE_ENTRIES_MAX} entries"));
        }
        if self.url.is_none() && !(self.headers.is_empty() && self.headers_env.is_empty()) {
            return bad("headers", "applies to url servers only");
        }
        if self.command.is_none() && !self.env.is_empty() {
            return bad("env", "applies to command servers only");
        }
        for (header, _) in self.headers.iter().chain(&self.headers_env) {
            let reserved = ["host", "content-type", "accept", "content-length", crate::tool::EXECUTION_ID_HEADER];
            let lower = header.to_ascii_lowercase();
            if reserved.contains(&lower.as_str()) || lower.starts_with("mcp-") {
                return bad("headers", &format!("{header} is set by the runtime"));
            }
        }
        for var in self.headers_env.values() {
            if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return bad("headers_env", "must name environment variables ([A-Za-z0-9_]+)");
            }
        }
        if let Some(ms) = self.timeout_ms {
            if !(1..=crate::tool::TOOL_TIMEOUT_MS_MAX).contains(&ms) {
                return bad("timeout_ms", &format!("must be within 1..={}", crate::tool::TOOL_TIMEOUT_MS_MAX));
            }
        }
        let required = !self.approval.is_empty();
        super::approval::check_approval_keys(required, &self.approvers, self.approval_deadline_ms, at)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{AgentFile, McpTransportConfig};

    const PROVIDER: &str = "[provider]\npreset = \"deepseek\"\n\n";

    fn parsed(servers: &str) -> Result<crate::config::ResolvedAgentFile, String> {
        AgentFile::parse(&format!("{PROVIDER}{servers}")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_stdio_and_an_http_server_are_read_with_their_tables() {
        let file = parsed(
            "[[mcp_servers]]\nname = \"files\"\ncommand = [\"srv\", \"--stdio\"]\nenv = { ROOT = \"/tmp\" }\n\
             [[mcp_servers]]\nname = \"billing\"\nurl = \"https://b.example/mcp\"\n\
             headers_env = { authorization = \"BILLING_TOKEN\" }\ntools = [\"refund\"]\ntimeout_ms = 5000\n\
             side_effects = { refund = true }\n[mcp_servers.sim.refund]\nretries = 2\ndedup = \"none\"\n",
        )
        .unwrap();
        let [files, billing] = &file.mcp_servers[..] else { panic!("two servers") };
        assert_eq!(
            files.transport(),
            McpTransportConfig::Stdio { program: "srv".into(), args: vec!["--stdio".into()] }
        );
        assert_eq!(billing.transport(), McpTransportConfig::Http { url: "https://b.example/mcp".into() });
        assert_eq!(billing.sim["refund"].get("retries").and_then(toml::Value::as_integer), Some(2));
    }

    #[test]
    fn a_servers_tools_may_wait_for_approval_and_the_keys_are_checked() {
        let file = parsed(
            "[[mcp_servers]]\nname = \"billing\"\nurl = \"https://b.example/mcp\"\napproval = [\"refund\"]\n\
             approvers = [\"alice\"]\napproval_deadline_ms = 60000\n",
        )
        .unwrap();
        let policy = file.mcp_servers[0].approval_policy("refund").unwrap();
        assert_eq!((policy.deciders, policy.deadline_ms), (vec!["alice".to_owned()], Some(60_000)));
        assert!(file.mcp_servers[0].approval_policy("balance").is_none(), "only the tools it names");
        let refused =
            parsed("[[mcp_servers]]\nname = \"b\"\nurl = \"https://b.example/mcp\"\napprovers = [\"alice\"]\n");
        assert!(refused.unwrap_err().contains("mcp_servers[0].approval"));
    }

    #[test]
    fn a_bad_entry_is_refused_with_the_field_that_is_wrong() {
        for (entry, field) in [
            ("name = \"Files\"\ncommand = [\"x\"]", "mcp_servers[0].name"),
            ("name = \"f\"", "mcp_servers[0].command"),
            ("name = \"f\"\ncommand = [\"x\"]\nurl = \"http://h/\"", "mcp_servers[0].command"),
            ("name = \"f\"\ncommand = [\"\"]", "mcp_servers[0].command"),
            ("name = \"f\"\nurl = \"ftp://h/\"", "mcp_servers[0].url"),
            ("name = \"f\"\nurl = \"http://user:pw@h/\"", "mcp_servers[0].url"),
            ("name = \"f\"\nurl = \"http://h/\"\nheaders = { mcp-session-id = \"x\" }", "mcp_servers[0].headers"),
            (
                "name = \"f\"\nurl = \"http://h/\"\nheaders_env = { authorization = \"$X\" }",
                "mcp_servers[0].headers_env",
            ),
            ("name = \"f\"\ncommand = [\"x\"]\nheaders = { a = \"b\" }", "mcp_servers[0].headers"),
            ("name = \"f\"\nurl = \"http://h/\"\nenv = { A = \"b\" }", "mcp_servers[0].env"),
            ("name = \"f\"\nurl = \"http://h/\"\ntimeout_ms = 0", "mcp_servers[0].timeout_ms"),
        ] {
            let error = parsed(&format!("[[mcp_servers]]\n{entry}\n")).unwrap_err();
            assert!(error.contains(field), "{entry}: {error}");
        }
        let twice = "[[mcp_servers]]\nname = \"f\"\nurl = \"http://h/\"\n".repeat(2);
        assert!(parsed(&twice).unwrap_err().contains("duplicate server name"));
    }
}
