//! `faultline agent run`: a real agent from the command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use faultline_runtime::agent::{Agent, AgentConfig, Open, TurnOutcome};
use faultline_runtime::approval::{DecisionRequest, NeedsApproval};
use faultline_runtime::config::{AgentFile, ResolvedAgentFile, StoreKindConfig};
use faultline_runtime::event::{Chunk, Decision, Event, TurnEndReason};
use faultline_runtime::llm::LiveProvider;
use faultline_runtime::outbox::{Outbox, OutboxTool, QueueEvidence};
use faultline_runtime::production::{self, CommandDeliverer, CommandTool, EnvCredentials, SqliteOutbox};
use faultline_runtime::seams::EntropyExt;
use faultline_runtime::store::OutcomeEvidence;
use faultline_runtime::store::SessionId;
use faultline_runtime::tool::{Tool, ToolSet};
use serde_json::json;

use super::database::DatabaseArgs;
use super::exit;
use super::transcript::{open_store, StoreKind};

/// `faultline agent ...`
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Run one turn. Exit 0 completed, 1 bad arguments or config (nothing created), 2 error, 3
    /// aborted (SIGTERM) or interrupted, 6 not kept (the turn or the session's closing could not
    /// be made durable), 7 paused for a person's approval, 130 after Ctrl-C.
    Run(AgentRunArgs),
    /// An interactive session: one turn per input line, streamed; Ctrl-C cancels the turn, not
    /// the program; the config file is watched (a valid edit applies to the next request, an
    /// invalid one is reported loudly and the last good config stays).
    Chat(ChatArgs),
}

/// Where a session lives and how it is configured: what `run` and `chat` share.
#[derive(Debug, Args)]
struct SessionArgs {
    /// TOML config: [provider], optional [agent], [[tools]], [outbox] (docs/cli.md).
    #[arg(long)]
    config: PathBuf,
    /// Where sessions live.
    #[arg(long)]
    session_dir: PathBuf,
    /// Session id (default: a new one, printed on stderr).
    #[arg(long)]
    session: Option<String>,
    /// Transcript store (default: the config's `[store]`, else jsonl).
    #[arg(long, value_enum)]
    store: Option<StoreKind>,
    #[command(flatten)]
    database: DatabaseArgs,
}

#[derive(Debug, Args)]
struct ChatArgs {
    #[command(flatten)]
    session: SessionArgs,
}

#[derive(Debug, Args)]
struct AgentRunArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// Continue an existing session: crash repair first, then a turn paused for approval (if
    /// its calls are decided), then the next turn.
    #[arg(long, requires = "session")]
    resume: bool,
    /// The user message (optional with --resume: continuing a paused turn needs none).
    #[arg(long, required_unless_present = "resume")]
    prompt: Option<String>,
    /// Print one JSON summary object instead of streaming text.
    #[arg(long)]
    json: bool,
}

fn bad(message: impl std::fmt::Display) -> ExitCode {
    exit::usage("faultline agent", message)
}

/// The agent file's `[telemetry] otlp_endpoint`, if the file parses and names one (a file
/// that does not parse is reported by the command itself).
pub fn telemetry_endpoint(args: &AgentArgs) -> Option<String> {
    let config = match &args.command {
        AgentCommand::Run(args) => &args.session.config,
        AgentCommand::Chat(args) => &args.session.config,
    };
    let text = std::fs::read_to_string(config).ok()?;
    AgentFile::parse(&text).ok()?.telemetry?.otlp_endpoint
}

/// Runs `faultline agent ...`.
pub fn run(args: &AgentArgs) -> ExitCode {
    match &args.command {
        AgentCommand::Run(args) => run_turn(args),
        AgentCommand::Chat(args) => chat(args),
    }
}

/// Reads and validates the config file, and the credential it names: a missing key is a
/// config problem found before anything is created, not a turn that fails after a session
/// was made for it.
fn read_config(path: &Path) -> Result<ResolvedAgentFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let config = AgentFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    // The simulator's tables are the simulator's to read; a wrong one is still refused here,
    // before anything runs, not first found by `sweep --agent`.
    faultline_sim::check_stand_ins(&config).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(var) = &config.provider.api_key_env {
        if std::env::var(var).map_or(true, |value| value.is_empty()) {
            return Err(format!(
                "{}: [provider] api_key_env names {var}, which is not set (MISSING_CREDENTIAL): export {var}, \
                 or remove api_key_env for a server that needs no key",
                path.display()
            ));
        }
    }
    Ok(config)
}

/// The tools a config declares; `via_outbox` tools deliver through `outbox`.
fn tools_of(config: &ResolvedAgentFile, outbox: &Option<Arc<dyn Outbox>>, mcp: &[Arc<dyn Tool>]) -> ToolSet {
    let served = mcp.iter().fold(ToolSet::new(), |set, tool| set.with(tool.clone()));
    config.tools.iter().cloned().fold(served, |set, tool| {
        let policy = tool.approval_policy();
        let runs: Arc<dyn Tool> = match (outbox, tool.via_outbox) {
            (Some(queue), true) => {
                let schema = CommandTool::new(tool.clone()).schema();
                let deliverer = Arc::new(CommandDeliverer::new(tool.command.clone()).with_env(tool.env()));
                Arc::new(OutboxTool::new(schema, queue.clone(), deliverer))
            }
            _ => Arc::new(CommandTool::new(tool)),
        };
        match policy {
            Some(policy) => set.with(Arc::new(NeedsApproval::new(runs, policy))),
            None => set.with(runs),
        }
    })
}

/// Why the agent did not start, and the exit code that says so: a database that cannot be
/// reached ran and failed (2, `DATABASE_UNREACHABLE`: try again later), anything else is
/// a usage error (1: nothing was run).
struct StartFailure {
    message: String,
    exit: u8,
}

impl From<String> for StartFailure {
    fn from(message: String) -> Self {
        Self { message, exit: exit::USAGE }
    }
}

impl StartFailure {
    /// `e`, said as `message`: a lost connection to the database is the environment's
    /// failure, not the caller's.
    fn of(e: &faultline_runtime::Error, message: String) -> Self {
        Self::said(message, super::transcript::database_unreachable(e))
    }

    /// `message`, the database's failure when `unreachable`.
    fn said(message: String, unreachable: bool) -> Self {
        match unreachable {
            true => Self { message: format!("DATABASE_UNREACHABLE: {message}"), exit: exit::FAILED },
            false => Self::from(message),
        }
    }

    /// Prints the message, scrubbed of every secret the process holds (the database's
    /// password among them), and exits with its code.
    fn exit(self, secrets: &faultline_runtime::secrets::Scrubber) -> ExitCode {
        eprintln!("faultline agent: {}", secrets.scrub(&self.message));
        exit::code(self.exit)
    }
}

/// A started agent and what a config reload needs.
struct Started {
    agent: Agent,
    live: Arc<LiveProvider>,
    outbox: Option<Arc<dyn Outbox>>,
    /// The MCP servers' tools, listed once at start (a reload keeps them).
    mcp: Vec<Arc<dyn Tool>>,
    id: SessionId,
    /// Every provider key variable this process has used: a reload that switches
    /// `api_key_env` must not hand tools the key the old route sent.
    key_vars: std::sync::Mutex<Vec<String>>,
}

/// The store the command line names, else the config's `[store]`, else JSONL files; and
/// where its database is (the flags first, then the config's variable and lease).
fn store_of(at: &SessionArgs, config: &ResolvedAgentFile) -> (StoreKind, DatabaseArgs) {
    let section = config.store.as_ref();
    let from_config = section.map(|s| match s.kind {
        StoreKindConfig::Zstd => StoreKind::Zstd,
        StoreKindConfig::Sqlite => StoreKind::Sqlite,
        StoreKindConfig::Postgres => StoreKind::Postgres,
        _ => StoreKind::Jsonl,
    });
    let kind = at.store.or(from_config).unwrap_or(StoreKind::Jsonl);
    let mut database = at.database.clone();
    database.lease_ms = database.lease_ms.or(section.and_then(|s| s.lease_ms));
    database.url_env = section.and_then(|s| s.database_url_env.clone());
    (kind, database)
}

/// `outbox` once its abandoned claims are `unknown` (said on stderr), so crash repair reads
/// settled evidence.
fn recovered(outbox: Arc<dyn Outbox>, named: &str) -> Result<Arc<dyn Outbox>, StartFailure> {
    let abandoned = outbox.recover_abandoned().map_err(|e| StartFailure::of(&e, format!("outbox {named}: {e}")))?;
    for abandoned in abandoned {
        eprintln!("faultline: delivery {abandoned} was abandoned mid-delivery: outcome unknown, not resent");
    }
    Ok(outbox)
}

/// The agent file's `[outbox]`, if any: in the session's PostgreSQL database for a fleet,
/// else a SQLite file in the session directory; abandoned claims recovered first.
fn open_outbox(
    seams: &faultline_runtime::seams::Seams,
    config: &ResolvedAgentFile,
    session_dir: &Path,
    (store_kind, database): (StoreKind, &DatabaseArgs),
) -> Result<Option<Arc<dyn Outbox>>, StartFailure> {
    Ok(match &config.outbox {
        None => None,
        // A fleet's sessions and queue live in one database: whichever worker resumes a
        // session reads the same evidence.
        Some(_) if store_kind == StoreKind::Postgres => {
            let url = database.url(seams)?;
            let (process, clock, entropy) = (seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref());
            let outbox = production::PgOutbox::connect(&url, process, clock, entropy)
                .map_err(|e| StartFailure::of(&e, format!("outbox: {e}")))?
                .with_scrubber(seams.secrets.clone());
            Some(recovered(Arc::new(outbox), "the PostgreSQL queue")?)
        }
        Some(section) => {
            // A relative `db` lives in the session directory, wherever the command runs from.
            let db = session_dir.join(section.db.as_deref().unwrap_or(Path::new("outbox.sqlite")));
            let outbox = SqliteOutbox::open(&db, seams.process.clone(), seams.clock.clone(), seams.entropy.as_ref())
                .map_err(|e| format!("outbox {}: {e}", db.display()))?
                .with_scrubber(seams.secrets.clone());
            Some(recovered(Arc::new(outbox), &db.display().to_string())?)
        }
    })
}

/// Opens the store (and the outbox, recovering abandoned claims first so crash repair reads
/// settled evidence) and starts the agent on the session.
async fn start_agent(
    seams: &faultline_runtime::seams::Seams,
    config: &ResolvedAgentFile,
    at: &SessionArgs,
    resume: bool,
) -> Result<Started, StartFailure> {
    let (session_dir, session) = (at.session_dir.as_path(), at.session.as_deref());
    let mcp = super::agent_mcp::mcp_tools(seams, config).await?;
    let (store_kind, database) = store_of(at, config);
    let id = match session {
        Some(id) => SessionId::new(id),
        None => SessionId::new(format!("s-{}", seams.entropy.hex_id(12))),
    }
    .map_err(|e| format!("--session: {e}"))?;
    std::fs::create_dir_all(session_dir).map_err(|e| format!("--session-dir {}: {e}", session_dir.display()))?;
    // Every key the process could send is a secret from the start, so even a delivery row
    // written before the first request is scrubbed of it.
    for var in faultline_runtime::config::provider_key_vars(&config.provider) {
        if let Ok(value) = std::env::var(&var) {
            seams.secrets.register(&value);
        }
    }
    let outbox = open_outbox(seams, config, session_dir, (store_kind, &database))?;
    let evidence = outbox.clone().map(|q| Arc::new(QueueEvidence::new(q)) as Arc<dyn OutcomeEvidence>);
    let store = super::transcript::open_store_or_why(store_kind, session_dir, &database, seams, evidence)
        .map_err(|(message, unreachable)| StartFailure::said(message, unreachable))?;
    let mut agent_config = AgentConfig::default();
    agent_config.max_steps = config.agent.max_steps.unwrap_or(faultline_runtime::agent::MAX_STEPS_DEFAULT);
    agent_config.tool_concurrency =
        config.agent.tool_concurrency.unwrap_or(faultline_runtime::agent::TOOL_CONCURRENCY_DEFAULT);
    agent_config.system = config.agent.system.clone();
    agent_config.proxy_env = faultline_runtime::production::proxy_env();
    agent_config.platform_roots = faultline_runtime::production::platform_roots();
    let live = Arc::new(LiveProvider::new(config.provider.clone()));
    let open = if resume { Open::Resume } else { Open::Create };
    let agent = Agent::builder(live.clone(), Arc::new(EnvCredentials))
        .seams(seams.clone())
        .open(open)
        .tools(tools_of(config, &outbox, &mcp))
        .config(agent_config)
        .start(store.as_ref(), &id)
        .map_err(|e| match e {
            faultline_runtime::Error::SessionExists(_) => {
                format!("session {id} already exists: continue it with `--session {id} --resume`").into()
            }
            e => StartFailure::of(&e, format!("session {id}: {e}")),
        })?;
    eprintln!("faultline: session {id}");
    if let Some(repair) = agent.startup_repair() {
        eprintln!(
            "faultline: crash repair: appended {} closers, salvaged {} records",
            repair.closers.len(),
            repair.recovered.len()
        );
        if let Some(drop) = repair.dropped() {
            eprintln!("faultline: crash repair {drop}");
        }
    }
    let key_vars = std::sync::Mutex::new(faultline_runtime::config::hidden_vars(&config.provider, &config.mcp_servers));
    Ok(Started { agent, live, outbox, mcp, id, key_vars })
}

/// The validated config and the runtime both agent commands run on.
fn prepare(config: &Path) -> Result<(ResolvedAgentFile, tokio::runtime::Runtime), ExitCode> {
    let config = read_config(config).map_err(bad)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(bad)?;
    Ok((config, runtime))
}

fn run_turn(args: &AgentRunArgs) -> ExitCode {
    let (config, runtime) = match prepare(&args.session.config) {
        Ok(prepared) => prepared,
        Err(code) => return code,
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
        let at = &args.session;
        let Started { agent, id, .. } = match start_agent(&seams, &config, at, args.resume).await {
            Ok(started) => started,
            Err(failure) => return failure.exit(&seams.secrets),
        };
        let printer = (!args.json).then(|| tokio::spawn(print_stream(agent.clone())));
        let paused = !agent.awaiting_approval().is_empty();
        let started = match (paused, &args.prompt) {
            (true, _) => agent.continue_turn(),
            (false, Some(prompt)) => agent.submit(prompt.clone()),
            (false, None) => Err(faultline_runtime::Error::ApprovalRefused(format!(
                "session {id} has no turn paused for approval: give --prompt"
            ))),
        };
        if let Err(e) = started {
            return bad(e);
        }
        let interrupted = tokio::select! {
            () = turns_done(&agent, paused.then_some(args.prompt.as_deref()).flatten()) => false,
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
        let session_usage = agent.session_usage();
        let awaiting = agent.awaiting_approval();
        let closed = agent.dispose().await.map_err(|e| e.to_string());
        if let Some(printer) = printer {
            printer.abort();
        }
        if let Err(e) = &closed {
            eprintln!("faultline agent run: closing the session failed, so not everything it accepted is kept: {e}");
        }
        let ended = RunEnded { outcome, session_usage, interrupted, closed, awaiting };
        report(&id, ended, args.json, &at.session_dir)
    })
}

/// Waits for the agent to go idle; after a paused turn is continued to its end, `then` (a
/// prompt given with `--resume`) is the next turn.
async fn turns_done(agent: &Agent, then: Option<&str>) {
    agent.when_idle().await;
    if let Some(prompt) = then {
        if agent.awaiting_approval().is_empty() && agent.submit(prompt).is_ok() {
            agent.when_idle().await;
        }
    }
}

/// How often the chat looks at its config file, in ms.
const CONFIG_POLL_MS: u64 = 100;

/// What the config file holds now, as far as reloading cares.
#[derive(PartialEq)]
enum Seen {
    Text(String),
    Missing,
}

fn look(path: &Path) -> Seen {
    std::fs::read_to_string(path).map_or(Seen::Missing, Seen::Text)
}

/// Applies a changed config file, or says loudly why not (keeping the last good one).
fn reload(path: &Path, seen: &Seen, started: &Started) -> String {
    match seen {
        Seen::Missing => "[config] the file was removed: keeping the last good config".into(),
        // The simulator's stand-in tables are checked too, as at start.
        Seen::Text(text) => match AgentFile::parse(text).map(|c| {
            let stand_ins = faultline_sim::check_stand_ins(&c);
            (c, stand_ins)
        }) {
            Err(e) if e.is_syntax() => {
                format!("[config] reload FAILED (parse error, last good config kept): {}: {e}", path.display())
            }
            Err(e) => format!("[config] reload FAILED (invalid, last good config kept): {}: {e}", path.display()),
            Ok((_, Err(e))) => {
                format!("[config] reload FAILED (invalid, last good config kept): {}: {e}", path.display())
            }
            Ok((mut config, Ok(()))) => match started.live.update(&config.provider_config, "provider") {
                Err(e) => format!("[config] reload FAILED (invalid, last good config kept): {e}"),
                Ok(()) => {
                    let hidden = {
                        let mut vars = started.key_vars.lock().unwrap_or_else(|p| p.into_inner());
                        for var in faultline_runtime::config::hidden_vars(&config.provider, &config.mcp_servers) {
                            if !vars.contains(&var) {
                                vars.push(var);
                            }
                        }
                        vars.clone()
                    };
                    for tool in &mut config.tools {
                        tool.env_hidden = hidden.clone();
                    }
                    started.agent.set_tools(tools_of(&config, &started.outbox, &started.mcp));
                    format!(
                        "[config] reloaded: model {}, {} tool(s); applies to the next request",
                        config.provider.model,
                        config.tools.len()
                    )
                }
            },
        },
    }
}

fn chat(args: &ChatArgs) -> ExitCode {
    let args = &args.session;
    let (config, runtime) = match prepare(&args.config) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = match signal(SignalKind::interrupt()) {
            Ok(interrupt) => interrupt,
            Err(e) => return bad(format!("installing the Ctrl-C handler: {e}")),
        };
        let seams = production::seams();
        let exists = session_exists(args, &config, &seams);
        let started = match start_agent(&seams, &config, args, exists).await {
            Ok(started) => Arc::new(started),
            Err(failure) => return failure.exit(&seams.secrets),
        };
        let printer = tokio::spawn(print_stream(started.agent.clone()));
        let watcher = watch_config(started.clone(), args.config.clone());
        let unkept = converse(&started, &mut interrupt).await;
        watcher.abort();
        let disposed = started.agent.dispose().await;
        printer.abort();
        chat_exit(disposed, &unkept, &started.id)
    })
}

/// Whether the session `args` names is already in its store (then chat resumes it).
fn session_exists(args: &SessionArgs, config: &ResolvedAgentFile, seams: &faultline_runtime::seams::Seams) -> bool {
    args.session.as_deref().is_some_and(|s| {
        let (kind, database) = store_of(args, config);
        open_store(kind, &args.session_dir, &database, seams, None)
            .ok()
            .and_then(|store| SessionId::new(s).ok().map(|id| (store, id)))
            .is_some_and(|(store, id)| store.list().is_ok_and(|ids| ids.contains(&id)))
    })
}

/// The watcher: polls the agent file and applies changes between requests.
fn watch_config(started: Arc<Started>, path: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = look(&path);
        loop {
            tokio::time::sleep(Duration::from_millis(CONFIG_POLL_MS)).await;
            let now = look(&path);
            if now != last {
                println!("{}", reload(&path, &now, &started));
                let _ = std::io::stdout().flush();
                last = now;
            }
        }
    })
}

/// One turn per line of stdin until it ends; Ctrl-C cancels the turn, not the program.
/// Returns, per turn not kept at its end, whether it was recorded to its end (and so may
/// still be written by closing).
async fn converse(started: &Started, interrupt: &mut tokio::signal::unix::Signal) -> Vec<bool> {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut unkept: Vec<bool> = Vec::new();
    loop {
        // A paused turn is decided here, inline, before any new input.
        if !started.agent.awaiting_approval().is_empty() {
            if !ask_approvals(&started.agent, &mut lines).await {
                break;
            }
            if let Err(e) = started.agent.continue_turn() {
                eprintln!("faultline agent chat: {e}");
                break;
            }
            wait_turn(started, interrupt, &mut unkept).await;
            continue;
        }
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = interrupt.recv() => continue, // Ctrl-C at the prompt cancels nothing
        };
        let Ok(Some(line)) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        if let Err(e) = started.agent.submit(line) {
            eprintln!("faultline agent chat: {e}");
            break;
        }
        wait_turn(started, interrupt, &mut unkept).await;
    }
    unkept
}

/// Asks on the terminal about each call the paused turn waits on: `y` approves, anything else
/// denies (its text the reason). Returns `false` when stdin ended first.
async fn ask_approvals(agent: &Agent, lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>) -> bool {
    let by = std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "chat".to_owned());
    for call in agent.awaiting_approval().into_iter().filter(|c| c.decision.is_none()) {
        println!("[approval] {} ({}) wants to run with {}", call.name, call.call_id, call.arguments);
        println!("[approval] approve? y = yes; anything else denies it (your words are the reason)");
        let _ = std::io::stdout().flush();
        let Ok(Some(answer)) = lines.next_line().await else { return false };
        let answer = answer.trim();
        let request = if answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes") {
            DecisionRequest::new(call.call_id.clone(), Decision::Approved, by.clone())
        } else {
            let reason = if answer.is_empty() { "denied in chat" } else { answer };
            DecisionRequest::new(call.call_id.clone(), Decision::Denied, by.clone()).reason(reason)
        };
        match agent.decide(&request).await {
            Ok(decided) => println!("[approval] {} {}", decided.record.decision.as_str(), call.call_id),
            Err(e) => println!("[approval] {e}"),
        }
    }
    true
}

/// Waits for the running turn (Ctrl-C cancels it) and says how it ended.
async fn wait_turn(started: &Started, interrupt: &mut tokio::signal::unix::Signal, unkept: &mut Vec<bool>) {
    {
        tokio::select! {
            () = started.agent.when_idle() => {}
            _ = interrupt.recv() => {
                started.agent.cancel();
                started.agent.when_idle().await;
            }
        }
        if let Some(outcome) = started.agent.last_outcome() {
            if outcome.kept {
                println!("[turn {}: {}]", outcome.turn, outcome.reason.kind());
            } else {
                println!("[turn {}: NOT KEPT: {}]", outcome.turn, failure_text(&outcome.reason));
                unkept.push(outcome.reached.is_some());
            }
            let usage = started.agent.session_usage();
            println!("[tokens: {} this turn, {} this session]", outcome.usage.total_tokens, usage.total_tokens);
            let _ = std::io::stdout().flush();
        }
    }
}

/// The chat's exit: success when closing flushed everything the agent accepted (a turn not
/// kept at its end but recorded to it is on disk now); not kept otherwise.
fn chat_exit(disposed: faultline_runtime::Result<()>, unkept: &[bool], id: &SessionId) -> ExitCode {
    match disposed {
        Ok(()) if unkept.iter().all(|reached| *reached) => {
            if !unkept.is_empty() {
                eprintln!("faultline agent chat: closing the session wrote the turns that were not kept at their end");
            }
            ExitCode::SUCCESS
        }
        Ok(()) => {
            eprintln!("faultline agent chat: a turn could not be recorded to its end and is not kept");
            exit::code(exit::NOT_KEPT)
        }
        Err(e) => {
            eprintln!("faultline agent chat: closing session {id} failed, so not everything is kept: {e}");
            exit::code(exit::NOT_KEPT)
        }
    }
}

/// A turn end's failure in a line (`CODE: message`), or its kind.
fn failure_text(reason: &TurnEndReason) -> String {
    match reason {
        TurnEndReason::Error { error } => format!("{}: {}", error.code, error.message),
        other => other.kind().to_owned(),
    }
}

/// Streams assistant text and retry notices as they are recorded.
async fn print_stream(agent: Agent) {
    let mut records = agent.subscribe();
    while let Ok(record) = records.recv().await {
        match &record.event {
            Event::AssistantChunk(chunk) => match &chunk.chunk {
                Chunk::TextDelta { text, .. } => {
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
                // The model declined: its words are the answer, marked as a refusal.
                Chunk::BlockStart { kind: faultline_runtime::event::BlockKind::Refusal, .. } => print!("[refusal] "),
                Chunk::RefusalDelta { text, .. } => {
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
                _ => {}
            },
            Event::LlmRetry(retry) => {
                eprintln!("\n[{}: retry {} in {} ms]", retry.failure.code, retry.retry, retry.delay_ms);
            }
            Event::ToolCall(call) => eprintln!("\n[tool {} ({})]", call.name, call.call_id),
            Event::ApprovalRequested(requested) => {
                eprintln!("[approval needed: {} ({})]", requested.name, requested.call_id);
            }
            Event::TurnEnd(_) => println!(),
            _ => {}
        }
    }
}

/// How `agent run` ended: the last outcome, the session's tokens, whether Ctrl-C stopped it,
/// how closing went, and what a paused turn waits on.
struct RunEnded {
    outcome: Option<TurnOutcome>,
    session_usage: faultline_runtime::event::Usage,
    interrupted: bool,
    closed: Result<(), String>,
    awaiting: Vec<faultline_runtime::approval::PendingApproval>,
}

/// Tells a person what a paused turn waits on and how to decide it.
fn say_awaiting(id: &SessionId, awaiting: &[faultline_runtime::approval::PendingApproval], dir: &Path) {
    for call in awaiting {
        let deciders =
            if call.deciders.is_empty() { String::new() } else { format!(" by {}", call.deciders.join(" or ")) };
        eprintln!(
            "faultline agent run: call {} ({}) waits for approval{deciders}: arguments {}",
            call.call_id, call.name, call.arguments
        );
    }
    eprintln!(
        "faultline agent run: decide with `faultline approval approve|deny --session-dir {} --session {id} --call CALL --by NAME`, then continue with `--session {id} --resume`",
        dir.display()
    );
}

fn report(id: &SessionId, ended: RunEnded, as_json: bool, dir: &Path) -> ExitCode {
    let RunEnded { outcome, session_usage, interrupted, closed, awaiting } = ended;
    let Some(mut outcome) = outcome else {
        eprintln!("faultline agent run: the turn did not finish (see the session log)");
        return exit::code(exit::FAILED);
    };
    // What the disk holds now. A turn not kept at its end, but recorded to it, is kept after
    // all when closing the session flushed everything the agent had accepted.
    let (reason, kept, reached) = match (outcome.kept, &outcome.reached, &closed) {
        (true, _, _) => (outcome.reason.clone(), true, None),
        (false, Some(reached), Ok(())) => (reached.clone(), true, None),
        (false, reached, _) => (outcome.reason.clone(), false, reached.clone()),
    };
    if as_json {
        let calls: Vec<_> = outcome
            .tool_calls
            .iter()
            .map(|(name, code)| json!({"name": name, "code": code.map(|c| c.to_string())}))
            .collect();
        let mut summary = json!({
            "session": id.as_str(),
            "turn": outcome.turn,
            "end_reason": reason,
            "kept": kept,
            "assistant_refusal": outcome.refusal,
            "tool_calls": calls,
            "usage": {"turn": outcome.usage, "session": session_usage},
        });
        // Moved in, not copied (`json!` would serialise a copy): a 15 MiB answer is held once.
        summary["assistant_text"] = serde_json::Value::String(std::mem::take(&mut outcome.text));
        if let Some(reached) = &reached {
            summary["reached"] = json!(reached);
        }
        if !awaiting.is_empty() {
            summary["awaiting_approval"] = json!(awaiting);
        }
        if let Err(e) = &closed {
            summary["close_error"] = json!(e);
        }
        println!("{summary}");
    }
    if !kept {
        eprintln!(
            "faultline agent run: turn {} is NOT kept ({}): what was shown is not on disk. Once the disk is \
             fixed, `--session {id} --resume` repairs the session and continues",
            outcome.turn,
            failure_text(&reason)
        );
    } else if let TurnEndReason::Error { error } = &reason {
        eprintln!("faultline agent run: turn {} ended in error: {} ({})", outcome.turn, error.message, error.code);
    }
    if let TurnEndReason::BudgetExhausted { summary, .. } = &reason {
        eprintln!("faultline agent run: {summary}");
    }
    if matches!(reason, TurnEndReason::AwaitingApproval { .. }) {
        say_awaiting(id, &awaiting, dir);
    }
    let code = match reason {
        _ if !kept || closed.is_err() => exit::NOT_KEPT,
        _ if interrupted => exit::CTRL_C,
        TurnEndReason::Completed | TurnEndReason::MaxTokens => exit::OK,
        TurnEndReason::Error { .. } | TurnEndReason::BudgetExhausted { .. } => exit::FAILED,
        TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted => exit::NEEDS_ATTENTION,
        TurnEndReason::AwaitingApproval { .. } => exit::AWAITING_APPROVAL,
    };
    exit::code(code)
}
