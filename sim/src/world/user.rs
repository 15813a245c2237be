//! An embedder's own agent inside the simulated world (FAILURE-USER-HARNESS): its provider
//! settings, its agent config, its tools (built on the world's seams, so their HTTP calls
//! cross the simulated network) and the services those tools call.

use std::sync::Arc;

use faultline_runtime::agent::AgentConfig;

use faultline_runtime::event::ToolSchema;
use faultline_runtime::seams::Seams;
use faultline_runtime::tool::ToolSet;

use super::service::Service;

/// Builds the agent's tools on the seams of one host incarnation (called once per
/// incarnation, inside the simulation, exactly as production builds them on its own seams).
pub type ToolsFn = Arc<dyn Fn(&Seams) -> ToolSet + Send + Sync>;

/// Most services one agent under test may declare.
pub const SERVICES_MAX: usize = 16;

/// An embedder's agent, as the harness runs it.
#[derive(Clone)]
pub struct AgentUnderTest {
    pub(crate) name: String,
    /// Extra `[provider]` lines (retry policy, timeouts): the route's address, model and key
    /// are the simulated model's.
    pub(crate) provider: String,
    /// The wire format of the file's preset (default OpenAI-compatible): the simulated model
    /// speaks it.
    pub(crate) format: faultline_runtime::llm::WireFormat,
    pub(crate) config: AgentConfig,
    pub(crate) tools: ToolsFn,
    pub(crate) services: Vec<Service>,
    pub(crate) mcp_services: Vec<super::McpService>,
    /// What stands in for each tool, when the tools are stand-ins (`--agent FILE`), for
    /// reports; one line per tool.
    pub(crate) stand_ins: Vec<String>,
    /// Tools whose effect the runtime's delivery queue delivers to the gateway host (a
    /// command tool with `via_outbox = true`).
    pub(crate) outbox_tools: Vec<ToolSchema>,
    /// What in the agent's file would have prevented a finding: (tool, invariant, advice).
    pub(crate) hints: Vec<(String, String, String)>,
    /// Secrets the agent holds besides the world's own (an MCP server's header values), each
    /// with what it is: the secrets oracle looks for them everywhere the agent wrote or sent.
    pub(crate) secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for AgentUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentUnderTest")
            .field("name", &self.name)
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}

impl AgentUnderTest {
    /// An agent called `name` (for reports) whose tools `tools` builds.
    pub fn new(name: impl Into<String>, tools: impl Fn(&Seams) -> ToolSet + Send + Sync + 'static) -> Self {
        Self {
            name: name.into(),
            provider: String::new(),
            format: faultline_runtime::llm::WireFormat::Openai,
            config: AgentConfig::default(),
            tools: Arc::new(tools),
            services: Vec::new(),
            mcp_services: Vec::new(),
            stand_ins: Vec::new(),
            outbox_tools: Vec::new(),
            hints: Vec::new(),
            secrets: Vec::new(),
        }
    }

    /// A secret the agent holds (`what` names it in a finding).
    pub(crate) fn holds_secret(mut self, what: String, value: String) -> Self {
        self.secrets.push((what, value));
        self
    }

    /// A tool whose effect goes through the runtime's delivery queue (keyed by the execution
    /// id) to the world's gateway host.
    pub fn outbox_tool(mut self, schema: ToolSchema) -> Self {
        self.outbox_tools.push(schema);
        self
    }

    /// Advice for a finding of `invariant` naming `tool`.
    pub fn hint(mut self, tool: &str, invariant: &str, advice: String) -> Self {
        self.hints.push((tool.to_owned(), invariant.to_owned(), advice));
        self
    }

    /// The advice for a finding of `invariant` naming `tool`, if any.
    pub fn hint_for(&self, tool: &str, invariant: &str) -> Option<&str> {
        self.hints.iter().find(|(t, i, _)| t == tool && i == invariant).map(|(_, _, advice)| advice.as_str())
    }

    /// The tools delivered through the queue.
    pub fn outbox_tools(&self) -> &[ToolSchema] {
        &self.outbox_tools
    }

    /// The `[provider]` table as production reads it (a whole agent or provider file, or the
    /// table's own lines): its retry policy and timeouts are kept; its `base_url`, `model`,
    /// `preset`, key variable, proxy and CA file are the simulated model's, which speaks the
    /// preset's wire format.
    pub fn provider_toml(mut self, text: &str) -> Result<Self, String> {
        let (lines, format) = provider_lines(text)?;
        self.provider = lines;
        self.format = format;
        Ok(self)
    }

    /// The agent's knobs (step budget, tool concurrency, system prompt, ...).
    pub fn config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// A service the tools call at `http://NAME/...`.
    pub fn service(mut self, service: Service) -> Self {
        self.services.push(service);
        self
    }

    /// A simulated MCP server the tools reach at `http://HOST/mcp` or as the stdio program
    /// `faultline-sim-mcp HOST`.
    pub fn mcp_service(mut self, service: super::McpService) -> Self {
        self.mcp_services.push(service);
        self
    }

    /// Notes what stands in for a tool (shown in reports).
    pub fn stand_in(mut self, line: String) -> Self {
        self.stand_ins.push(line);
        self
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The services it declared.
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// What stands in for each tool (empty for an embedder's own tools).
    pub fn stand_ins(&self) -> &[String] {
        &self.stand_ins
    }

    /// The extra `[provider]` lines the world resolves the route from.
    pub fn provider_lines(&self) -> &str {
        &self.provider
    }

    /// The tools' schemas, as the model sees them (the queue's tools included).
    pub fn schemas(&self) -> Vec<ToolSchema> {
        let mut schemas = (self.tools)(&crate::seams::sim_seams(0, "agent", 0)).schemas();
        schemas.extend(self.outbox_tools.iter().cloned());
        schemas
    }

    /// Whether a tool of its waits for a person's approval (the fleet world has no person).
    pub(crate) fn needs_person(&self) -> bool {
        let tools = (self.tools)(&crate::seams::sim_seams(0, "agent", 0));
        tools.schemas().iter().any(|schema| tools.get(&schema.name).is_some_and(|tool| tool.approval().is_some()))
    }

    /// Checks the declaration: valid, distinct services, and a route that resolves.
    pub fn validate(&self) -> Result<(), String> {
        if self.services.len() > SERVICES_MAX {
            return Err(format!("{} services, at most {SERVICES_MAX}", self.services.len()));
        }
        for (i, service) in self.services.iter().enumerate() {
            service.validate()?;
            if self.services[..i].iter().any(|s| s.name == service.name) {
                return Err(format!("service {} is declared twice", service.name));
            }
        }
        for (i, mcp) in self.mcp_services.iter().enumerate() {
            let clash = self.services.iter().any(|s| s.name == mcp.host)
                || self.mcp_services[..i].iter().any(|m| m.host == mcp.host);
            if clash {
                return Err(format!("host {} is declared twice", mcp.host));
            }
            mcp.validate()?;
        }
        let schemas = self.schemas();
        if schemas.is_empty() {
            return Err(format!("agent {}: no tools", self.name));
        }
        for schema in &schemas {
            if let Err((path, message)) = faultline_runtime::tool::check_parameters(&schema.parameters) {
                let at = if path.is_empty() { String::new() } else { format!(" at {path}") };
                return Err(format!("tool {}: its parameter schema{at}: {message}", schema.name));
            }
        }
        super::setup::resolve_route(self.format, super::setup::SIM_MODEL_ROOT, &self.provider).map(|_| ())
    }
}

/// Keys of `[provider]` the simulated model replaces.
const REPLACED_KEYS: [&str; 7] = ["preset", "base_url", "model", "api_key_env", "proxy", "ca_file", "headers"];

/// The `[provider]` lines of `text` the world keeps (see [`AgentUnderTest::provider_toml`]),
/// and the wire format of its preset.
fn provider_lines(text: &str) -> Result<(String, faultline_runtime::llm::WireFormat), String> {
    let parsed: toml::Table = text.parse().map_err(|e| format!("provider settings: {e}"))?;
    let mut table = match parsed.get("provider") {
        Some(toml::Value::Table(provider)) => provider.clone(),
        Some(_) => return Err("provider settings: [provider] is not a table".into()),
        None => parsed,
    };
    let format = match table.get("preset") {
        None => faultline_runtime::llm::WireFormat::Openai,
        Some(preset) => preset
            .clone()
            .try_into::<faultline_runtime::llm::Preset>()
            .map_err(|e| format!("provider settings: preset: {e}"))?
            .format(),
    };
    for key in REPLACED_KEYS {
        table.remove(key);
    }
    let mut wrapped = toml::Table::new();
    wrapped.insert("provider".into(), toml::Value::Table(table));
    let text = toml::to_string(&wrapped).map_err(|e| format!("provider settings: {e}"))?;
    // The world writes its own `[provider]` header with the model's address first.
    Ok((text.strip_prefix("[provider]\n").unwrap_or(&text).to_owned(), format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_lines_keep_the_policy_and_drop_the_route() {
        let (lines, format) = provider_lines(
            "[provider]\npreset = \"deepseek\"\nmodel = \"x\"\nidle_timeout_ms = 900\n\
             [provider.retry_policy]\nmax_retries = 3\n[agent]\nmax_steps = 4\n",
        )
        .unwrap();
        assert_eq!(format, faultline_runtime::llm::WireFormat::Openai);
        assert!(!lines.contains("preset") && !lines.contains("model"), "{lines}");
        assert!(lines.contains("idle_timeout_ms = 900"), "{lines}");
        assert!(lines.contains("[provider.retry_policy]\nmax_retries = 3"), "{lines}");
    }

    #[test]
    fn the_presets_format_is_the_one_the_simulated_model_speaks() {
        let (_, format) = provider_lines("[provider]\npreset = \"anthropic\"\nmodel = \"claude\"\n").unwrap();
        assert_eq!(format, faultline_runtime::llm::WireFormat::Anthropic);
        let (_, format) = provider_lines("preset = \"gemini\"\n").unwrap();
        assert_eq!(format, faultline_runtime::llm::WireFormat::Gemini);
        assert!(provider_lines("preset = \"claude\"\n").unwrap_err().contains("preset"));
    }
}
