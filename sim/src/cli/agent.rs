//! `faultline agent run`: a real agent from the command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use faultline_runtime::agent::{Agent, AgentConfig, AgentFile, Open, Tool, ToolSet, TurnOutcome};
use faultline_runtime::event::{Chunk, Event, TurnEndReason};
use faultline_runtime::llm::LiveProvider;
use faultline_runtime::outbox::{Outbox, OutboxTool, QueueEvidence};
use faultline_runtime::production::{self, CommandDeliverer, CommandTool, EnvCredentials, SqliteOutbox};
use faultline_runtime::store::OutcomeEvidence;
use faultline_runtime::store::SessionId;
use faultline_runtime::EntropyExt;
use serde_json::json;

use super::transcript::{open_store, StoreKind};

/// Exit: the turn completed.
const EXIT_COMPLETED: u8 = 0;
/// Exit: bad arguments or config.
const EXIT_BAD_ARGUMENTS: u8 = 1;
/// Exit: the turn ended in error (or ran out of budget).
const EXIT_ERROR: u8 = 2;
/// Exit: the turn was aborted or interrupted.
const EXIT_ABORTED: u8 = 3;
/// Exit: Ctrl-C (the turn was cancelled gracefully: drained, flushed, `turn/end {aborted}`).
const EXIT_INTERRUPTED: u8 = 130;

/// `faultline agent ...`
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Run one turn. Exit 0 completed, 2 error, 3 aborted (SIGTERM) or interrupted, 1 bad
    /// arguments or config, 130 after Ctrl-C.
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// TOML config: [provider], optional [agent], [[tools]] (see README).
    #[arg(long)]
    config: PathBuf,
    /// Where sessions live.
    #[arg(long)]
    session_dir: PathBuf,
    /// Session id (default: a new one, printed on stderr).
    #[arg(long)]
    session: Option<String>,
    /// Continue an existing session: crash repair first, then the next turn.
    #[arg(long, requires = "session")]
    resume: bool,
    /// Transcript store.
    #[arg(long, value_enum, default_value_t = StoreKind::Jsonl)]
    store: StoreKind,
    /// The user message.
    #[arg(long)]
    prompt: String,
    /// Print one JSON summary object instead of streaming text.
    #[arg(long)]
    json: bool,
}

fn bad(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("faultline agent run: {message}");
    ExitCode::from(EXIT_BAD_ARGUMENTS)
}

/// Runs `faultline agent ...`.
pub fn run(args: &AgentArgs) -> ExitCode {
    match &args.command {
        AgentCommand::Run(args) => run_turn(args),
    }
}

fn run_turn(args: &RunArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => return bad(format!("--config {}: {e}", args.config.display())),
    };
    let config = match AgentFile::parse(&text) {
        Ok(config) => config,
        Err(e) => return bad(format!("{}: {e}", args.config.display())),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return bad(e),
    };
    runtime.block_on(async move {
        // Signal handlers go in first, before any request can leave: Ctrl-C (a person) exits
        // 130; SIGTERM (a supervisor) aborts the turn the same graceful way and exits 3.
        use tokio::signal::unix::{signal, SignalKind};
        let (mut interrupt, mut terminate) = match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
            (Err(e), _) | (_, Err(e)) => return bad(format!("installing signal handlers: {e}")),
        };
        let seams = production::seams();
        let id = match &args.session {
            Some(id) => SessionId::new(id.as_str()),
            None => SessionId::new(format!("s-{}", seams.entropy.hex_id(12))),
        };
        let id = match id {
            Ok(id) => id,
            Err(e) => return bad(format!("--session: {e}")),
        };
        if let Err(e) = std::fs::create_dir_all(&args.session_dir) {
            return bad(format!("--session-dir {}: {e}", args.session_dir.display()));
        }
        // Tools with `via_outbox` deliver through the queue, which crash repair consults.
        let outbox: Option<Arc<dyn Outbox>> = match &config.outbox {
            None => None,
            Some(section) => {
                let db = section.db.clone().unwrap_or_else(|| args.session_dir.join("outbox.sqlite"));
                match SqliteOutbox::open(&db, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref()) {
                    Ok(outbox) => {
                        // Claims whose owner died become `unknown` before crash repair reads
                        // them, so the closer names the settled evidence (never resent).
                        match outbox.recover_abandoned() {
                            Ok(ids) => {
                                for id in ids {
                                    eprintln!("faultline: delivery {id} was abandoned mid-delivery: outcome unknown, not resent");
                                }
                            }
                            Err(e) => return bad(format!("outbox {}: {e}", db.display())),
                        }
                        Some(Arc::new(outbox))
                    }
                    Err(e) => return bad(format!("outbox {}: {e}", db.display())),
                }
            }
        };
        let evidence = outbox.clone().map(|q| Arc::new(QueueEvidence(q)) as Arc<dyn OutcomeEvidence>);
        let store = match open_store(args.store, &args.session_dir, &seams, evidence) {
            Ok(store) => store,
            Err(e) => return bad(e),
        };
        let tools = config.tools.iter().cloned().fold(ToolSet::new(), |set, tool| match (&outbox, tool.via_outbox) {
            (Some(queue), true) => {
                let schema = CommandTool::new(tool.clone()).schema();
                let deliverer = Arc::new(CommandDeliverer::new(tool.command.clone()));
                set.with(Arc::new(OutboxTool::new(schema, queue.clone(), deliverer)))
            }
            _ => set.with(Arc::new(CommandTool::new(tool))),
        });
        let agent_config = AgentConfig {
            max_steps: config.agent.max_steps.unwrap_or(faultline_runtime::agent::MAX_STEPS_DEFAULT),
            tool_concurrency: config
                .agent
                .tool_concurrency
                .unwrap_or(faultline_runtime::agent::TOOL_CONCURRENCY_DEFAULT),
            system: config.agent.system.clone(),
            ..AgentConfig::default()
        };
        let open = if args.resume { Open::Resume } else { Open::Create };
        let agent = match Agent::start(
            seams.clone(),
            store.as_ref(),
            &id,
            open,
            Arc::new(LiveProvider::new(config.provider.clone())),
            Arc::new(EnvCredentials),
            tools,
            agent_config,
        ) {
            Ok(agent) => agent,
            Err(e) => return bad(format!("session {id}: {e}")),
        };
        eprintln!("faultline: session {id}");
        let printer = (!args.json).then(|| tokio::spawn(print_stream(agent.clone())));
        if let Err(e) = agent.submit(args.prompt.clone()) {
            return bad(e);
        }
        let interrupted = tokio::select! {
            () = agent.when_idle() => false,
            _ = interrupt.recv() => {
                agent.cancel();
                agent.when_idle().await;
                true
            }
            _ = terminate.recv() => {
                agent.cancel();
                agent.when_idle().await;
                false
            }
        };
        let outcome = agent.last_outcome();
        let disposed = agent.dispose().await;
        if let Some(printer) = printer {
            printer.abort();
        }
        if let Err(e) = disposed {
            eprintln!("faultline agent run: closing the session: {e}");
        }
        report(&id, outcome, args.json, interrupted)
    })
}

/// Streams assistant text and retry notices as they are recorded.
async fn print_stream(agent: Agent) {
    use std::io::Write;
    let mut records = agent.subscribe();
    while let Ok(record) = records.recv().await {
        match &record.event {
            Event::AssistantChunk(chunk) => {
                if let Chunk::TextDelta { text, .. } = &chunk.chunk {
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
            }
            Event::LlmRetry(retry) => {
                eprintln!("\n[{}: retry {} in {} ms]", retry.failure.code, retry.retry, retry.delay_ms);
            }
            Event::ToolCall(call) => eprintln!("\n[tool {} ({})]", call.name, call.call_id),
            Event::TurnEnd(_) => println!(),
            _ => {}
        }
    }
}

fn report(id: &SessionId, outcome: Option<TurnOutcome>, as_json: bool, interrupted: bool) -> ExitCode {
    let Some(outcome) = outcome else {
        eprintln!("faultline agent run: the turn did not finish (see the session log)");
        return ExitCode::from(EXIT_ERROR);
    };
    if as_json {
        let calls: Vec<_> = outcome
            .tool_calls
            .iter()
            .map(|(name, code)| json!({"name": name, "code": code.map(|c| c.to_string())}))
            .collect();
        let summary = json!({
            "session": id.as_str(),
            "turn": outcome.turn,
            "end_reason": outcome.reason,
            "assistant_text": outcome.text,
            "tool_calls": calls,
        });
        println!("{summary}");
    }
    if let TurnEndReason::Error { error } = &outcome.reason {
        eprintln!("faultline agent run: turn {} ended in error: {} ({})", outcome.turn, error.message, error.code);
    }
    if let TurnEndReason::BudgetExhausted { summary, .. } = &outcome.reason {
        eprintln!("faultline agent run: {summary}");
    }
    let code = match outcome.reason {
        _ if interrupted => EXIT_INTERRUPTED,
        TurnEndReason::Completed | TurnEndReason::MaxTokens => EXIT_COMPLETED,
        TurnEndReason::Error { .. } | TurnEndReason::BudgetExhausted { .. } => EXIT_ERROR,
        TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => EXIT_ABORTED,
    };
    ExitCode::from(code)
}
