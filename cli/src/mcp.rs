//! `faultline mcp`: one MCP server by hand, through the runtime's own client — `call` lists a
//! server's tools and calls one; `conformance-client` is the client the official MCP
//! conformance kit drives (it appends the server's URL to the command and names its scenario
//! in `MCP_CONFORMANCE_SCENARIO`; docs/mcp.md lists the scenarios and what is not supported).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use faultline_runtime::config::McpServerConfig;
use faultline_runtime::mcp::{exposed_name, McpServer, McpTool};
use faultline_runtime::production;
use faultline_runtime::tool::{ToolInvocation, ToolOutput};
use tokio_util::sync::CancellationToken;

use crate::exit;

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Call one tool of a streamable-HTTP MCP server and print its result (exit 0 on an
    /// answer, 2 on a failure or an unknown outcome).
    Call(CallArgs),
    /// The client the official conformance kit runs: `npx @modelcontextprotocol/conformance
    /// client --command "faultline mcp conformance-client"` (the kit appends the URL).
    ConformanceClient(ConformanceArgs),
}

#[derive(Debug, Args)]
struct CallArgs {
    /// The server's streamable-HTTP endpoint (`http://` or `https://`).
    #[arg(long)]
    url: String,
    /// The tool, by its name on the server.
    #[arg(long)]
    tool: String,
    /// The call's arguments, a JSON object.
    #[arg(long, default_value = "{}")]
    arguments: String,
    /// A header sent with every request (`NAME=VALUE`, repeatable); its value is held as a
    /// secret and never printed.
    #[arg(long = "header")]
    headers: Vec<String>,
    /// The call's deadline, in ms.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

#[derive(Debug, Args)]
struct ConformanceArgs {
    /// The scenario's server, as the kit passes it.
    url: String,
}

/// The environment variable the conformance kit names its scenario in.
const SCENARIO_ENV: &str = "MCP_CONFORMANCE_SCENARIO";
/// The name the server is known by here (its tools are `conformance__TOOL`).
const SERVER_NAME: &str = "conformance";

pub fn run(args: &McpArgs) -> ExitCode {
    match &args.command {
        McpCommand::Call(call) => {
            let arguments: serde_json::Value = match serde_json::from_str(&call.arguments) {
                Ok(value @ serde_json::Value::Object(_)) => value,
                _ => return exit::usage("faultline mcp call", "--arguments must be a JSON object"),
            };
            let mut headers = Vec::new();
            for header in &call.headers {
                let Some((name, value)) = header.split_once('=') else {
                    return exit::usage("faultline mcp call", "--header must be NAME=VALUE");
                };
                headers.push((name.trim().to_ascii_lowercase(), value.to_owned()));
            }
            let target = Target { url: call.url.clone(), headers, timeout_ms: call.timeout_ms };
            one_call(&target, Some((&call.tool, arguments)))
        }
        McpCommand::ConformanceClient(conformance) => {
            let scenario = std::env::var(SCENARIO_ENV).unwrap_or_default();
            let target = Target { url: conformance.url.clone(), headers: Vec::new(), timeout_ms: 30_000 };
            match scenario.as_str() {
                // Connecting initialises; listing proves the session works.
                "initialize" => one_call(&target, None),
                "tools_call" => one_call(&target, Some(("add_numbers", serde_json::json!({"a": 2, "b": 3})))),
                "sse-retry" => one_call(&target, Some(("test_reconnection", serde_json::json!({})))),
                other => exit::usage(
                    "faultline mcp conformance-client",
                    format!("scenario {other:?} is not supported (docs/mcp.md lists what is)"),
                ),
            }
        }
    }
}

/// A server to call.
struct Target {
    url: String,
    headers: Vec<(String, String)>,
    timeout_ms: u64,
}

/// Connects to `target` and lists its tools; calls `call`'s tool when given. Prints what the
/// server said, scrubbed of the headers' values.
fn one_call(target: &Target, call: Option<(&str, serde_json::Value)>) -> ExitCode {
    let who = "faultline mcp";
    let entry = format!("name = {SERVER_NAME:?}\nurl = {:?}\ntimeout_ms = {}\n", target.url, target.timeout_ms);
    let config: McpServerConfig = match faultline_runtime::llm::from_toml(&entry) {
        Ok(config) => config,
        Err(e) => return exit::usage(who, e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return exit::usage(who, e),
    };
    let seams = production::seams();
    let server = McpServer::new(config, seams.clone(), target.headers.clone(), Vec::new());
    runtime.block_on(async {
        let (listed, _refused) = match server.list_tools().await {
            Ok(listing) => listing,
            Err(e) => {
                eprintln!("{who}: {}", seams.secrets.scrub(&e.to_string()));
                return exit::code(exit::FAILED);
            }
        };
        let Some((tool, arguments)) = call else {
            for tool in &listed {
                println!("{}", seams.secrets.scrub_held(&tool.name));
            }
            return ExitCode::SUCCESS;
        };
        let wanted = exposed_name(SERVER_NAME, tool);
        let Some(tool) = McpTool::all(&server, listed).into_iter().find(|t| t.schema().name == wanted) else {
            eprintln!("{who}: the server offers no tool {tool:?}");
            return exit::code(exit::FAILED);
        };
        let invocation = ToolInvocation {
            session: "mcp-call".into(),
            turn: 1,
            step: 1,
            call_id: "call".into(),
            arguments,
            execution_id: "mcp-call:1:1:call".into(),
            session_epoch: 0,
        };
        let cancel = CancellationToken::new();
        let deadline = Duration::from_millis(target.timeout_ms);
        let calling = tool.call(invocation, cancel.clone());
        tokio::pin!(calling);
        let output = tokio::select! {
            output = &mut calling => output,
            () = tokio::time::sleep(deadline) => {
                // Never abandon the call: cancel it, and hear what it says within its grace.
                cancel.cancel();
                calling.await
            }
        };
        print_output(&seams, output)
    })
}

fn print_output(seams: &faultline_runtime::seams::Seams, output: ToolOutput) -> ExitCode {
    let (text, code) = match output {
        ToolOutput::Ok(text) => (text, exit::OK),
        ToolOutput::Failed(text) => (format!("TOOL_FAILED: {text}"), exit::FAILED),
        ToolOutput::Aborted(text) => (format!("ABORTED: {text}"), exit::FAILED),
        ToolOutput::Unknown(text) => (format!("TOOL_OUTCOME_UNKNOWN: {text}"), exit::FAILED),
    };
    println!("{}", seams.secrets.scrub_held(&text));
    exit::code(code)
}
