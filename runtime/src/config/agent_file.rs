//! The agent's configuration file (TOML): `[provider]`, optional `[agent]`, `[[tools]]`
//! declared as external commands.

use serde::Deserialize;

use super::approval::ApprovalMode;
use super::mcp::{McpServerConfig, MCP_SERVERS_MAX};
use crate::llm::{from_toml, ConfigError, ProviderConfig, ResolvedProvider};
use crate::tool::TOOL_TIMEOUT_MS_MAX;

/// The whole file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// The model route.
    pub provider: ProviderConfig,
    /// Agent knobs.
    #[serde(default)]
    pub agent: AgentSection,
    /// Tools run as external commands.
    #[serde(default)]
    pub tools: Vec<CommandToolConfig>,
    /// Tools served by MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// The delivery queue for tools with `via_outbox = true`.
    #[serde(default)]
    pub outbox: Option<OutboxSection>,
    /// Where sessions are kept (default: JSONL files in the session directory).
    #[serde(default)]
    pub store: Option<StoreSection>,
    /// Traces to an OpenTelemetry collector.
    #[serde(default)]
    pub telemetry: Option<TelemetrySection>,
}

/// `[telemetry]`: where the `faultline` binary exports the agent's traces (FAILURE-OTEL).
/// Without it, the `OTEL_EXPORTER_OTLP_*` variables decide; without them, traces are off.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`): spans go to
    /// `{otlp_endpoint}/v1/traces`. No credentials in it: a collector's token belongs in
    /// `OTEL_EXPORTER_OTLP_HEADERS`, never in a file.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
}

/// Longest `[telemetry] otlp_endpoint`, in bytes.
pub const OTLP_ENDPOINT_BYTES_MAX: usize = 2048;

impl TelemetrySection {
    fn check(&self) -> Result<(), ConfigError> {
        let Some(url) = &self.otlp_endpoint else { return Ok(()) };
        let hint = "a collector's token in OTEL_EXPORTER_OTLP_HEADERS";
        crate::tool::check_http_url(url, OTLP_ENDPOINT_BYTES_MAX, hint)
            .map_err(|message| ConfigError { path: "telemetry.otlp_endpoint".into(), message })
    }
}

/// `[store]`: the transcript store, for a command line that does not name one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreSection {
    /// `jsonl` (default), `zstd`, `sqlite` or `postgres`.
    #[serde(default)]
    pub kind: StoreKindConfig,
    /// The environment variable holding the PostgreSQL URL (default
    /// `FAULTLINE_DATABASE_URL`): a URL carries a password, so the file names the variable,
    /// never the URL.
    #[serde(default)]
    pub database_url_env: Option<String>,
    /// A writer's lease on a PostgreSQL session, in ms (1 000..=3 600 000; default 30 000).
    #[serde(default)]
    pub lease_ms: Option<u64>,
}

/// The store kinds a `[store]` table names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreKindConfig {
    /// `DIR/<id>/session.jsonl`.
    #[default]
    Jsonl,
    /// `DIR/<id>/session.jsonl.zst`.
    Zstd,
    /// `DIR/sessions.sqlite`.
    Sqlite,
    /// A PostgreSQL database shared by a fleet.
    Postgres,
}

/// Shortest and longest lease a `[store]` table may ask for, in ms (the PostgreSQL store's
/// own bounds).
const STORE_LEASE_MS_RANGE: std::ops::RangeInclusive<u64> = crate::store::LEASE_MS_MIN..=crate::store::LEASE_MS_MAX;

impl StoreSection {
    fn check(&self) -> Result<(), ConfigError> {
        let postgres_only = |field: &str| ConfigError {
            path: format!("store.{field}"),
            message: "applies to kind = \"postgres\" only".into(),
        };
        if let Some(var) = &self.database_url_env {
            if self.kind != StoreKindConfig::Postgres {
                return Err(postgres_only("database_url_env"));
            }
            if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(ConfigError {
                    path: "store.database_url_env".into(),
                    message: "must name an environment variable ([A-Za-z0-9_]+)".into(),
                });
            }
        }
        if let Some(ms) = self.lease_ms {
            if self.kind != StoreKindConfig::Postgres {
                return Err(postgres_only("lease_ms"));
            }
            if !STORE_LEASE_MS_RANGE.contains(&ms) {
                return Err(ConfigError {
                    path: "store.lease_ms".into(),
                    message: format!(
                        "must be within {}..={}",
                        STORE_LEASE_MS_RANGE.start(),
                        STORE_LEASE_MS_RANGE.end()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `[outbox]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxSection {
    /// SQLite file of the queue (default: `outbox.sqlite` in the session directory).
    #[serde(default)]
    pub db: Option<std::path::PathBuf>,
}

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// System prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Steps per turn (default 16).
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Tool calls at once (default 4).
    #[serde(default)]
    pub tool_concurrency: Option<usize>,
}

/// `[[tools]]`: a command that receives the arguments JSON on stdin and
/// `FAULTLINE_SESSION_ID`, `FAULTLINE_CALL_ID`, `FAULTLINE_EXECUTION_ID` in its environment;
/// stdout is the result, a non-zero exit an error result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolConfig {
    /// Tool name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of the arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Cooperative deadline; on expiry: SIGTERM, a grace period, SIGKILL.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Says the command changes the outside world. Informational only (no behaviour hangs on
    /// it): what protects such an effect is `via_outbox`, and crash repair treats every
    /// durably started call as possibly done, side effects declared or not.
    #[serde(default)]
    pub side_effects: bool,
    /// Route the effect through the delivery queue: the command becomes the receiver
    /// (arguments on stdin; exit 0 delivered, 2 refused, other unknown), keyed by the call's
    /// execution id, so it never runs twice for one call and crash repair can tell what
    /// happened.
    #[serde(default)]
    pub via_outbox: bool,
    /// When set, only these environment variables are passed on (plus the `FAULTLINE_*`
    /// ones). The provider key variables never are.
    #[serde(default)]
    pub env_allow: Option<Vec<String>>,
    /// Environment variables removed from what is passed on.
    #[serde(default)]
    pub env_deny: Vec<String>,
    /// Variables holding the runtime's secrets (the provider key): always removed. Not read
    /// from the file; filled in by [`AgentFile::parse`].
    #[serde(skip)]
    pub env_hidden: Vec<String>,
    /// `[tools.sim]`: what stands in for the command under the fault harness (`faultline
    /// sweep --agent FILE`), kept as written: the simulator reads and checks it, and the
    /// runtime never does.
    #[serde(default)]
    pub sim: Option<toml::Table>,
    /// `"required"`: each call waits for a person's decision before it runs
    /// (FAILURE-APPROVAL); `"never"` (the default): it runs at once.
    #[serde(default)]
    pub approval: ApprovalMode,
    /// Who may decide its calls (default: anyone who can write the session).
    #[serde(default)]
    pub approvers: Vec<String>,
    /// How long a call waits for a decision before it expires `APPROVAL_EXPIRED`, in ms
    /// (default: for ever).
    #[serde(default)]
    pub approval_deadline_ms: Option<u64>,
}

impl CommandToolConfig {
    /// The tool's approval rule, when its calls wait for a person.
    pub fn approval_policy(&self) -> Option<crate::approval::ApprovalPolicy> {
        (self.approval == ApprovalMode::Required)
            .then(|| super::approval::policy(&self.approvers, self.approval_deadline_ms))
    }

    /// The command's environment policy.
    pub fn env(&self) -> ToolEnv {
        ToolEnv { env_allow: self.env_allow.clone(), env_deny: self.env_deny.clone(), hidden: self.env_hidden.clone() }
    }
}

/// Provider key variables no tool or receiver ever sees, whatever its `env_allow` says: the
/// presets' defaults. The configured `api_key_env` is added to them at parse time.
pub const PROVIDER_KEY_VARS: [&str; 5] =
    ["DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"];

/// A command's environment (FAILURE-SECRETS): by default the agent's own, less the provider
/// key variables. `env_allow` narrows it to the named variables; `env_deny` removes more.
/// The provider key variables are removed in every case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolEnv {
    /// When set, only these variables are passed on.
    pub env_allow: Option<Vec<String>>,
    /// Variables removed from what is passed on.
    pub env_deny: Vec<String>,
    /// Variables holding the runtime's secrets: always removed.
    pub hidden: Vec<String>,
}

impl ToolEnv {
    /// An environment policy that removes only `hidden` (for a receiver command).
    pub fn hiding(hidden: Vec<String>) -> Self {
        Self { hidden, ..Self::default() }
    }

    /// Whether variable `name` is passed on to the command.
    pub fn passes(&self, name: &str) -> bool {
        // The presets' key variables are hidden even from a policy built by hand (an embedder's
        // `CommandTool`), not only from one `AgentFile::parse` filled in.
        if self.hidden.iter().any(|h| h == name) || PROVIDER_KEY_VARS.contains(&name) {
            return false;
        }
        if self.env_deny.iter().any(|d| d == name) {
            return false;
        }
        self.env_allow.as_ref().is_none_or(|allow| allow.iter().any(|a| a == name))
    }
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

/// The variables that hold the provider's key: the presets' defaults and the configured
/// `api_key_env`. No tool or receiver command ever sees them.
pub fn provider_key_vars(provider: &ResolvedProvider) -> Vec<String> {
    let mut vars: Vec<String> = PROVIDER_KEY_VARS.iter().map(|v| (*v).to_owned()).collect();
    if let Some(var) = &provider.api_key_env {
        if !vars.contains(var) {
            vars.push(var.clone());
        }
    }
    vars
}

/// Each server checked, at most [`MCP_SERVERS_MAX`], names unique.
fn check_mcp_servers(servers: &[McpServerConfig]) -> Result<(), ConfigError> {
    if servers.len() > MCP_SERVERS_MAX {
        return Err(ConfigError {
            path: "mcp_servers".into(),
            message: format!("more than {MCP_SERVERS_MAX} servers"),
        });
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, server) in servers.iter().enumerate() {
        let at = |field: &str| format!("mcp_servers[{i}].{field}");
        server.check(&at)?;
        if !names.insert(server.name.as_str()) {
            return Err(ConfigError { path: at("name"), message: format!("duplicate server name {:?}", server.name) });
        }
    }
    Ok(())
}

/// The variables no tool, receiver or MCP server process ever gets: the provider's key
/// variables and those holding MCP servers' header secrets (`headers_env`).
pub fn hidden_vars(provider: &ResolvedProvider, servers: &[McpServerConfig]) -> Vec<String> {
    let mut vars = provider_key_vars(provider);
    for var in servers.iter().flat_map(|s| s.headers_env.values()) {
        if !vars.contains(var) {
            vars.push(var.clone());
        }
    }
    vars
}

/// A validated agent configuration.
#[derive(Debug, Clone)]
pub struct ResolvedAgentFile {
    /// The route.
    pub provider: ResolvedProvider,
    /// The raw provider table (for live updates).
    pub provider_config: ProviderConfig,
    /// Agent knobs.
    pub agent: AgentSection,
    /// Tools.
    pub tools: Vec<CommandToolConfig>,
    /// MCP servers whose tools are offered too.
    pub mcp_servers: Vec<McpServerConfig>,
    /// The delivery queue, if any tool uses it (or `[outbox]` is present).
    pub outbox: Option<OutboxSection>,
    /// The transcript store, when the file names one.
    pub store: Option<StoreSection>,
    /// Where traces go, when the file says.
    pub telemetry: Option<TelemetrySection>,
}

impl AgentFile {
    /// Parses and validates a config file's text.
    pub fn parse(text: &str) -> Result<ResolvedAgentFile, ConfigError> {
        let file: AgentFile = from_toml(text)?;
        let provider = file.provider.resolve("provider")?;
        if let Some(steps) = file.agent.max_steps {
            if !(1..=1000).contains(&steps) {
                return Err(ConfigError { path: "agent.max_steps".into(), message: "must be within 1..=1000".into() });
            }
        }
        if let Some(n) = file.agent.tool_concurrency {
            if !(1..=64).contains(&n) {
                return Err(ConfigError {
                    path: "agent.tool_concurrency".into(),
                    message: "must be within 1..=64".into(),
                });
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, tool) in file.tools.iter().enumerate() {
            let at = |field: &str| format!("tools[{i}].{field}");
            if tool.name.is_empty() || !tool.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err(ConfigError { path: at("name"), message: "must be 1+ characters of [A-Za-z0-9_-]".into() });
            }
            if !names.insert(tool.name.clone()) {
                return Err(ConfigError { path: at("name"), message: format!("duplicate tool name {:?}", tool.name) });
            }
            if tool.command.is_empty() || tool.command[0].is_empty() {
                return Err(ConfigError { path: at("command"), message: "must name a program".into() });
            }
            if let Err((path, message)) = crate::tool::check_parameters(&tool.parameters) {
                let path = if path.is_empty() { at("parameters") } else { format!("{}.{path}", at("parameters")) };
                return Err(ConfigError { path, message });
            }
            if let Some(ms) = tool.timeout_ms {
                if !(1..=TOOL_TIMEOUT_MS_MAX).contains(&ms) {
                    return Err(ConfigError {
                        path: at("timeout_ms"),
                        message: format!("must be within 1..={TOOL_TIMEOUT_MS_MAX}"),
                    });
                }
            }
            let required = tool.approval == ApprovalMode::Required;
            super::approval::check_approval_keys(required, &tool.approvers, tool.approval_deadline_ms, &at)?;
        }
        check_mcp_servers(&file.mcp_servers)?;
        if let Some(store) = &file.store {
            store.check()?;
        }
        if let Some(telemetry) = &file.telemetry {
            telemetry.check()?;
        }
        let outbox = file.outbox.or_else(|| file.tools.iter().any(|t| t.via_outbox).then(OutboxSection::default));
        let hidden = hidden_vars(&provider, &file.mcp_servers);
        let mut tools = file.tools;
        for tool in &mut tools {
            tool.env_hidden = hidden.clone();
        }
        Ok(ResolvedAgentFile {
            provider,
            provider_config: file.provider,
            agent: file.agent,
            tools,
            mcp_servers: file.mcp_servers,
            outbox,
            store: file.store,
            telemetry: file.telemetry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "[provider]\npreset = \"deepseek\"\n\n[[tools]]\nname = \"send\"\ndescription = \"d\"\n\
                        command = [\"true\"]\nside_effects = true\n";

    #[test]
    fn a_sim_table_is_kept_as_written() {
        // The simulator's knobs are the simulator's to read and check (`faultline-sim`'s
        // `check_stand_ins`): the runtime keeps them as written, whatever they say.
        let file = AgentFile::parse(&format!("{FILE}[tools.sim]\nretries = 99\nwhatever = \"x\"\n")).unwrap();
        let table = file.tools[0].sim.clone().unwrap();
        assert_eq!(table.get("retries").and_then(toml::Value::as_integer), Some(99));
        assert!(AgentFile::parse(FILE).unwrap().tools[0].sim.is_none());
    }

    #[test]
    fn approval_keys_are_read_and_checked() {
        let file = AgentFile::parse(&format!(
            "{FILE}approval = \"required\"\napprovers = [\"alice\"]\napproval_deadline_ms = 60000\n"
        ))
        .unwrap();
        let policy = file.tools[0].approval_policy().unwrap();
        assert_eq!((policy.deciders, policy.deadline_ms), (vec!["alice".to_owned()], Some(60_000)));
        assert!(AgentFile::parse(FILE).unwrap().tools[0].approval_policy().is_none());
        let refused = |extra: &str| AgentFile::parse(&format!("{FILE}{extra}\n")).unwrap_err().to_string();
        assert!(refused("approval = \"maybe\"").contains("maybe"));
        assert!(refused("approvers = [\"alice\"]").contains("tools[0].approval"));
        assert!(refused("approval = \"required\"\napproval_deadline_ms = 0").contains("approval_deadline_ms"));
        assert!(refused("approval = \"required\"\napprovers = [\"\"]").contains("tools[0].approvers"));
    }

    #[test]
    fn a_store_table_names_the_variable_and_the_lease_and_is_checked() {
        let file = AgentFile::parse(&format!(
            "{FILE}[store]\nkind = \"postgres\"\ndatabase_url_env = \"FLEET_DB\"\nlease_ms = 5000\n"
        ))
        .unwrap();
        let store = file.store.unwrap();
        assert_eq!(
            (store.kind, store.database_url_env.as_deref(), store.lease_ms),
            (StoreKindConfig::Postgres, Some("FLEET_DB"), Some(5000))
        );
        let refused = |table: &str| AgentFile::parse(&format!("{FILE}[store]\n{table}\n")).unwrap_err().to_string();
        assert!(refused("kind = \"postgres\"\nlease_ms = 999").contains("store.lease_ms"));
        assert!(refused("kind = \"postgres\"\nlease_ms = 3600001").contains("store.lease_ms"));
        assert!(refused("kind = \"sqlite\"\nlease_ms = 5000").contains("postgres"));
        assert!(refused("kind = \"postgres\"\ndatabase_url_env = \"A-B\"").contains("store.database_url_env"));
        assert!(refused("kind = \"postgres\"\ndatabase_url = \"postgresql://u:p@h/d\"").contains("database_url"));
        assert!(refused("kind = \"mysql\"").contains("mysql"));
        assert!(AgentFile::parse(FILE).unwrap().store.is_none());
    }
}
