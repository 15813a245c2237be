//! `faultline llm stream` (curl for the adapter) and `faultline model-server`.

use crate::exit;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use faultline_runtime::event::{Chunk, FinishReason, RequestPrefix, ToolSchema};
use faultline_runtime::llm::{prompt_body, Adapter, ResolvedProvider, WireFormat};
use faultline_runtime::production::{self, EnvCredentials};
use tokio_util::sync::CancellationToken;

use faultline_sim::model_server::{ModelServer, RecordedRequest, RequestObserver, Script};

/// `faultline llm ...`
#[derive(Debug, Args)]
pub struct LlmArgs {
    #[command(subcommand)]
    command: LlmCommand,
}

#[derive(Debug, Subcommand)]
enum LlmCommand {
    /// Stream one answer in --format's wire format and print the normalised chunks as JSON
    /// lines. No retries: one attempt, exactly as the runtime sees it. Exit 0 for stop,
    /// tool-calls or max-tokens; 2 for an error; 130 after Ctrl-C (the stream ends aborted);
    /// 1 for bad arguments.
    Stream(StreamArgs),
    /// Replay every recorded `.sse` body of a directory through faultline's adapter and
    /// through the format's official SDK (`openai`, `anthropic` or `google-genai`: the
    /// referee), and print where they agree. Exit 0 when every file agrees, 2 when one does
    /// not, 1 for bad arguments or no SDK.
    Conform(ConformArgs),
}

#[derive(Debug, Args)]
struct ConformArgs {
    /// A directory of recorded stream bodies (`*.sse`), or one such file.
    path: PathBuf,
    /// A Python with the format's SDK (`pip install openai anthropic google-genai`).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// The recordings' wire format: openai, anthropic or gemini.
    #[arg(long, default_value = "openai")]
    format: WireFormat,
    /// Print one JSON object per file (both readings and the differences).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct StreamArgs {
    /// The provider's wire format: openai (OpenAI-compatible chat completions), anthropic
    /// (Messages API) or gemini (streamGenerateContent).
    #[arg(long, default_value = "openai")]
    format: WireFormat,
    /// The API root the format appends its path to: {base_url}/chat/completions,
    /// {base_url}/v1/messages, {base_url}/v1beta/models/MODEL:streamGenerateContent.
    #[arg(long)]
    base_url: String,
    /// Model name.
    #[arg(long)]
    model: String,
    /// Environment variable holding the API key, read per request. Default: the format's
    /// preset's — ANTHROPIC_API_KEY for anthropic, GEMINI_API_KEY for gemini (a request fails
    /// MISSING_CREDENTIAL while it is unset or empty); none for openai, which then sends no key.
    #[arg(long)]
    api_key_env: Option<String>,
    /// Idle timeout while waiting for bytes, in ms.
    #[arg(long, default_value_t = 300_000)]
    idle_timeout_ms: u64,
    /// JSON file with an array of tools: [{"name", "description", "parameters"}].
    #[arg(long)]
    tools: Option<PathBuf>,
    /// PEM file of extra CAs to trust for an https:// base URL (a private CA).
    #[arg(long)]
    ca_file: Option<String>,
    /// The user message.
    #[arg(long)]
    prompt: String,
    /// Optional system prompt.
    #[arg(long)]
    system: Option<String>,
}

fn bad_arguments(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("faultline llm stream: {message}");
    exit::code(exit::USAGE)
}

/// Runs `faultline llm ...`.
pub fn run(args: &LlmArgs) -> ExitCode {
    match &args.command {
        LlmCommand::Stream(args) => stream(args),
        LlmCommand::Conform(args) => conform(args),
    }
}

fn conform(args: &ConformArgs) -> ExitCode {
    let fail = |message: String| {
        eprintln!("faultline llm conform: {message}");
        exit::code(exit::USAGE)
    };
    let package = crate::conformance::referee(args.format).1;
    let module = if package == "google-genai" { "google.genai" } else { package };
    let has_sdk = std::process::Command::new(&args.python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        return fail(format!(
            "{} has no `{package}` package: pip install {package}, or give --python",
            args.python.display()
        ));
    }
    let files = if args.path.is_dir() {
        match crate::conformance::recordings(&args.path) {
            Ok(files) if files.is_empty() => return fail(format!("{}: no .sse files", args.path.display())),
            Ok(files) => files,
            Err(e) => return fail(e),
        }
    } else {
        vec![args.path.clone()]
    };
    let mut disagree = 0;
    for file in &files {
        let body = match std::fs::read_to_string(file) {
            Ok(body) => body,
            Err(e) => return fail(format!("{}: {e}", file.display())),
        };
        let verdict = match crate::conformance::conform(&args.python, args.format, file, &body) {
            Ok(verdict) => verdict,
            Err(e) => return fail(e),
        };
        disagree += usize::from(!verdict.differences.is_empty());
        if args.json {
            println!("{}", serde_json::to_string(&verdict).expect("verdicts serialise"));
            continue;
        }
        let name = file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
        if verdict.differences.is_empty() {
            println!("agree     {name}");
        } else {
            println!("DIFFER    {name}");
            for difference in &verdict.differences {
                println!("          {difference}");
            }
        }
    }
    if !args.json {
        println!("{} of {} agree with the official `{package}` SDK", files.len() - disagree, files.len());
    }
    exit::code(if disagree == 0 { exit::OK } else { exit::FAILED })
}

/// The route `llm stream`'s flags describe, refused with the flag's name.
fn stream_route(args: &StreamArgs) -> Result<ResolvedProvider, String> {
    let flag = |name: &str, e: faultline_runtime::llm::ConfigError| format!("{name}: {}", e.message);
    let mut route = ResolvedProvider::of_format(args.format, &args.base_url, &args.model)
        .map_err(|e| {
            let name = if e.path.ends_with("model") { "--model" } else { "--base-url" };
            flag(name, e)
        })?
        .with_name("cli")
        .with_idle_timeout(Duration::from_millis(args.idle_timeout_ms))
        .map_err(|e| flag("--idle-timeout-ms", e))?;
    if let Some(var) = &args.api_key_env {
        route = route.with_api_key_env(var).map_err(|e| flag("--api-key-env", e))?;
    }
    if let Some(ca_file) = &args.ca_file {
        route = route.with_ca_file(ca_file.clone());
    }
    Ok(route)
}

fn stream(args: &StreamArgs) -> ExitCode {
    let route = match stream_route(args) {
        Ok(route) => Arc::new(route),
        Err(e) => return bad_arguments(e),
    };
    let tools: Vec<ToolSchema> = match &args.tools {
        None => Vec::new(),
        Some(path) => match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(tools) => tools,
            Err(e) => return bad_arguments(format!("--tools {}: {e}", path.display())),
        },
    };
    let prefix = RequestPrefix { model: args.model.clone(), system: args.system.clone(), tools };
    let body = prompt_body(&route, &prefix, &args.prompt);

    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return bad_arguments(e),
    };
    runtime.block_on(async move {
        let seams = production::seams();
        let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), Arc::new(EnvCredentials))
            .with_scrubber(seams.secrets.clone())
            .with_fs(seams.fs.clone())
            .with_proxy_env(production::proxy_env())
            .with_platform_roots(production::platform_roots());
        let cancel = CancellationToken::new();
        let (on_ctrl_c, interrupted) = (cancel.clone(), cancel.clone());
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let mut stream = adapter.stream(route, body, cancel);
        let mut out = std::io::stdout().lock();
        let mut code = exit::FAILED;
        while let Some(chunk) = stream.next().await {
            if let Chunk::Finish { reason, .. } = &chunk {
                code = match reason {
                    FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens => exit::OK,
                    FinishReason::Error { .. } | FinishReason::Aborted { .. } => exit::FAILED,
                };
            }
            let line = serde_json::to_string(&chunk).expect("chunks serialise");
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                // The reader went away: stop early, which closes the transport.
                return exit::code(exit::BROKEN_PIPE);
            }
        }
        // Ctrl-C ends the stream `aborted`: the table's 130, not a failed request.
        exit::code(if interrupted.is_cancelled() { exit::CTRL_C } else { code })
    })
}

/// `faultline model-server`
#[derive(Debug, Args)]
pub struct ModelServerArgs {
    /// Address to listen on (port 0 picks a free port; the first stdout line names it).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// JSON script of responses (docs/cli.md, "Fake model server scripts").
    #[arg(long)]
    script: PathBuf,
    /// Append every request received as a JSON line to this file.
    #[arg(long)]
    request_log: Option<PathBuf>,
}

/// Runs the fake model server until killed.
pub fn model_server(args: &ModelServerArgs) -> ExitCode {
    let script: Script = match std::fs::read(&args.script)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(script) => script,
        Err(e) => {
            eprintln!("faultline model-server: --script {}: {e}", args.script.display());
            return exit::code(exit::USAGE);
        }
    };
    let log = match &args.request_log {
        None => None,
        Some(path) => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => Some(Mutex::new(file)),
            Err(e) => {
                eprintln!("faultline model-server: --request-log {}: {e}", path.display());
                return exit::code(exit::USAGE);
            }
        },
    };
    let on_request: Option<RequestObserver> = log.map(|file| {
        Box::new(move |request: &RecordedRequest| {
            let line = serde_json::to_string(request).expect("requests serialise");
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(file, "{line}").and_then(|()| file.flush());
        }) as RequestObserver
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("faultline model-server: {e}");
            return exit::code(exit::USAGE);
        }
    };
    runtime.block_on(async move {
        let seams = production::seams();
        let server =
            match ModelServer::start(seams.net.clone(), seams.clock.clone(), &args.listen, script, on_request).await {
                Ok(server) => server,
                Err(e) => {
                    eprintln!("faultline model-server: listen on {}: {e}", args.listen);
                    return exit::code(exit::USAGE);
                }
            };
        println!("listening on {}", server.addr());
        let _ = std::io::stdout().flush();
        let _ = tokio::signal::ctrl_c().await;
        ExitCode::SUCCESS
    })
}
