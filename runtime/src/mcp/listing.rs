//! A server's `tools/list` pages read into the tools the model may be offered: each named
//! `SERVER__TOOL` within the providers' 64-character rule, its schema checked as every tool's
//! is, its side effects from its annotations unless the agent file says otherwise. What a
//! server lists wrongly is refused by name with the reason, never silently dropped.

use serde_json::Value;

use crate::config::McpServerConfig;
use crate::event::ToolSchema;
use crate::tool::check_parameters;
use crate::tool::cut_marked;

/// Most tools taken from one server.
pub const MCP_TOOLS_MAX: usize = 256;
/// Longest tool description kept, in bytes (cut at a character boundary, and said so).
pub const MCP_DESCRIPTION_BYTES_MAX: usize = 8 * 1024;
/// Longest name a provider accepts for a tool, in characters.
pub const TOOL_NAME_CHARS_MAX: usize = 64;
/// What joins a server's name and its tool's.
pub const MCP_NAME_SEPARATOR: &str = "__";

/// A tool the server listed and the model may be offered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ListedTool {
    /// Its name on the server.
    pub name: String,
    /// What the model sees (`SERVER__TOOL`, the server's description, its input schema).
    pub schema: ToolSchema,
    /// Whether it changes the world: the agent file's word, else `!readOnlyHint`.
    pub side_effects: bool,
    /// Its `idempotentHint`, as listed (informational: the runtime never re-calls).
    pub idempotent: bool,
}

impl ListedTool {
    /// A tool known without listing (the simulator's stand-in of a server it cannot run):
    /// any object as arguments, described by its server and name.
    pub fn declared(server: &str, tool: &str, side_effects: bool) -> Self {
        Self {
            name: tool.to_owned(),
            schema: ToolSchema {
                name: exposed_name(server, tool),
                description: format!("Tool {tool} of MCP server {server}."),
                parameters: serde_json::json!({"type": "object"}),
            },
            side_effects,
            idempotent: false,
        }
    }
}

/// A tool the server listed that is not offered, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedTool {
    /// Its name as listed (cut to 64 characters).
    pub name: String,
    /// Why.
    pub why: String,
}

/// The offered and the refused tools of `pages`.
pub(crate) fn read(config: &McpServerConfig, pages: &[Value]) -> (Vec<ListedTool>, Vec<RefusedTool>) {
    let (mut offered, mut refused) = (Vec::new(), Vec::new());
    let mut beyond = 0usize;
    let listed = pages.iter().flat_map(|page| page.get("tools").and_then(Value::as_array).into_iter().flatten());
    for tool in listed {
        let name: String = tool.get("name").and_then(Value::as_str).unwrap_or_default().chars().take(64).collect();
        if config.tools.as_ref().is_some_and(|allowed| !allowed.contains(&name)) {
            continue;
        }
        if offered.len() == MCP_TOOLS_MAX || refused.len() >= MCP_TOOLS_MAX {
            // Counted, not listed: a hostile listing cannot fill the report either.
            beyond += 1;
            continue;
        }
        match offer(config, &name, tool) {
            Ok(listed) if offered.iter().any(|o: &ListedTool| o.name == listed.name) => {
                refused.push(RefusedTool { name, why: "listed twice".into() });
            }
            Ok(listed) => offered.push(listed),
            Err(why) => refused.push(RefusedTool { name, why }),
        }
    }
    if beyond > 0 {
        let why = format!("{beyond} more listed tools, beyond the first {MCP_TOOLS_MAX} offered or refused");
        refused.push(RefusedTool { name: "...".into(), why });
    }
    if let Some(allowed) = &config.tools {
        for missing in allowed.iter().filter(|a| !offered.iter().any(|o| &o.name == *a)) {
            if !refused.iter().any(|r| &r.name == missing) {
                refused
                    .push(RefusedTool { name: missing.clone(), why: "named in tools = [...] but not listed".into() });
            }
        }
    }
    (offered, refused)
}

/// The model-facing name of `tool` on `server`.
pub fn exposed_name(server: &str, tool: &str) -> String {
    format!("{server}{MCP_NAME_SEPARATOR}{tool}")
}

fn offer(config: &McpServerConfig, name: &str, tool: &Value) -> Result<ListedTool, String> {
    let exposed = exposed_name(&config.name, name);
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid || exposed.chars().count() > TOOL_NAME_CHARS_MAX {
        return Err(format!(
            "{exposed:?} is not 1-{TOOL_NAME_CHARS_MAX} characters of [A-Za-z0-9_-] (providers refuse it)"
        ));
    }
    let parameters = tool.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
    check_parameters(&parameters).map_err(|(path, message)| format!("its inputSchema {path}: {message}"))?;
    let description = tool.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
    let description = cut_marked(description, MCP_DESCRIPTION_BYTES_MAX, " [description truncated]");
    let hint = |key: &str| tool.get("annotations").and_then(|a| a.get(key)).and_then(Value::as_bool);
    let side_effects = config.side_effects.get(name).copied().unwrap_or(!hint("readOnlyHint").unwrap_or(false));
    Ok(ListedTool {
        name: name.to_owned(),
        schema: ToolSchema { name: exposed, description, parameters },
        side_effects,
        idempotent: hint("idempotentHint").unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(extra: &str) -> McpServerConfig {
        toml::from_str(&format!("name = \"billing\"\nurl = \"http://b/mcp\"\n{extra}")).unwrap()
    }

    #[test]
    fn listed_tools_are_named_by_server_and_take_effects_from_annotations_unless_overridden() {
        let page = json!({"tools": [
            {"name": "lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
            {"name": "refund", "description": "Refunds.", "inputSchema": {"type": "object"}},
            {"name": "audit", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        ]});
        let (offered, refused) = read(&server("side_effects = { audit = true }"), &[page]);
        assert!(refused.is_empty(), "{refused:?}");
        let seen: Vec<(&str, bool)> = offered.iter().map(|t| (t.schema.name.as_str(), t.side_effects)).collect();
        assert_eq!(seen, [("billing__lookup", false), ("billing__refund", true), ("billing__audit", true)]);
    }

    #[test]
    fn what_a_server_lists_wrongly_is_refused_by_name_with_its_reason() {
        let page = json!({"tools": [
            {"name": "has space", "inputSchema": {"type": "object"}},
            {"name": "x".repeat(60), "inputSchema": {"type": "object"}},
            {"name": "bad_schema", "inputSchema": {"type": "string"}},
            {"name": "ok", "inputSchema": {"type": "object"}},
            {"name": "ok", "inputSchema": {"type": "object"}},
        ]});
        let (offered, refused) =
            read(&server("tools = [\"has space\", \"bad_schema\", \"ok\", \"gone\", \"x\"]"), &[page]);
        assert_eq!(offered.len(), 1);
        let why: Vec<(&str, &str)> = refused.iter().map(|r| (r.name.as_str(), r.why.as_str())).collect();
        assert!(why[0].1.contains("providers refuse it"), "{why:?}");
        assert_eq!(why[1].0, "bad_schema");
        assert_eq!(why[2], ("ok", "listed twice"));
        assert_eq!(why[3].0, "gone");
        assert_eq!(why[4].0, "x");
        assert_eq!(why.len(), 5, "the 60-character name is not allowed, so not refused: {why:?}");
    }
}
