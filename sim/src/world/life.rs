//! One incarnation of the agent host: the runtime under test, its tools, its delivery queue
//! and the simulated user, on whatever seams it is given. The simulator runs it on a turmoil
//! host; `faultline run --real` runs the very same function in a real child process on the
//! production seams (`crate::real`), so the two worlds differ only below the seams.
//!
//! What the incarnation tells the world around it (records accepted, the durable watermark,
//! faults that fired, trace lines) goes through [`LifeReport`]: into the simulator's shared
//! state, or down a pipe to the real harness.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::agent::{Agent, AgentConfig, Open};

use faultline_runtime::event::{Event, Record, ToolSchema};
use faultline_runtime::llm::{from_toml, LiveProvider, ResolvedProvider, StaticCredentials};
use faultline_runtime::outbox::{drain, JournalOutbox, Outbox, OutboxTool, QueueEvidence};
use faultline_runtime::store::{FileStore, Format, SessionId, Store};
use faultline_runtime::tool::{Tool, ToolInvocation, ToolOutput, ToolSet};
use faultline_runtime::{seams::BoxFuture, seams::Clock, seams::Seams};
use tokio_util::sync::CancellationToken;

use super::gateway;
use super::seeded::Plan;
use super::setup::SESSION;
use super::setup::{gateway_token, provider_file, sim_secret, ProviderFile, SIM_KEY_VAR};
use crate::scenario::ToolKind;

/// What the user sends while a cancel is under way (`cancel_then_submit`).
pub(crate) const MESSAGE_DURING_ABORT: &str = "and this, which arrived during the abort";

pub(crate) use super::life_report::{report_outcome, LifeReport};

/// What earlier incarnations left that this one must know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Earlier {
    /// The planned cancel fired in an earlier life.
    pub cancel_fired: bool,
    /// ... and the message sent with it was refused.
    pub extra_refused: bool,
}

/// Everything one incarnation needs.
pub(crate) struct LifeSetup<'a> {
    pub plan: &'a Plan,
    /// The model route (resolved once per run), or why it is invalid.
    pub route: Result<ResolvedProvider, String>,
    pub seed: u64,
    /// 1-based incarnation number.
    pub life: u64,
    /// The host's seams (fault-injecting filesystem and crash probe included).
    pub seams: Seams,
    /// Where sessions live, and the delivery queue's journal.
    pub sessions_dir: PathBuf,
    pub outbox_path: PathBuf,
    /// The model host's root URL (a live config update names it too).
    pub model_url: String,
    /// `host:port` of the gateway.
    pub gateway: String,
    pub earlier: Earlier,
    /// The embedder's agent, when the harness runs one (its tools, config and provider).
    pub user: Option<Arc<super::user::AgentUnderTest>>,
}

/// The session file of `sessions_dir` in `format`.
pub(crate) fn session_file(sessions_dir: &std::path::Path, format: Format) -> PathBuf {
    sessions_dir.join(SESSION).join(format.file_name())
}

/// Puts a disk witness on the incarnation's filesystem (`faults` controls the `FaultFs` that
/// `fs` is): every record of the session that becomes durable is reported with its instant.
/// Its first image is the session file as the incarnation finds it.
pub(crate) fn watch_disk(
    faults: &crate::seams::FsFaults,
    fs: &dyn faultline_runtime::seams::Fs,
    sessions_dir: &std::path::Path,
    format: Format,
    report: Arc<dyn LifeReport>,
) {
    let on_synced: super::witness::OnSynced = Arc::new(move |record| report.synced(record));
    let witness = super::witness::DiskWitness::new(fs, session_file(sessions_dir, format), format, on_synced);
    faults.observe(Arc::new(move |event| witness.observe(event)));
}

/// Runs one incarnation to the end of the workload: drains the delivery queue, opens or
/// resumes the session, submits what the user still owes and disposes the agent. Returns the
/// recovered transcript, or why the incarnation stopped (a refusal names "corrupt").
pub(crate) async fn live(setup: LifeSetup<'_>, report: Arc<dyn LifeReport>) -> Result<Vec<Record>, String> {
    let LifeSetup { plan, route, seed, life, seams, sessions_dir, outbox_path, model_url, gateway, earlier, user } =
        setup;
    let outbox: Arc<dyn Outbox> =
        Arc::new(JournalOutbox::open(seams.clone(), &outbox_path).map_err(|e| e.to_string())?);
    let deliverer = drain_queue(outbox.as_ref(), &seams, (seed, life), gateway, report.as_ref()).await?;
    let store = FileStore::new(seams.clone(), &sessions_dir, plan.store.format())
        .with_evidence(Arc::new(QueueEvidence::new(outbox.clone())));
    let id = SessionId::new(SESSION).expect("valid id");
    let exists = store.list().map_err(|e| e.to_string())?.contains(&id);
    if exists && life > 1 {
        if let Some(person) = plan.faults.person.as_ref().filter(|p| p.while_down) {
            super::person::decide_while_down(person, (&store, &id), &seams, report.as_ref());
        }
    }
    let route = route?;
    // An embedder's tools are built on this incarnation's seams, as production builds them.
    let base = user.as_ref().map_or_else(ToolSet::new, |user| (user.tools)(&seams));
    let tools = tools_of(base, plan, &outbox, &deliverer, &seams, seed, &report);
    let open = if exists { Open::Resume } else { Open::Create };
    let live = Arc::new(LiveProvider::new(route));
    if life == 1 {
        update_config_later(plan, &live, &seams, &model_url, &report);
    }
    let config = agent_config(user.as_deref(), plan);
    let credentials = Arc::new(StaticCredentials([(SIM_KEY_VAR.to_owned(), sim_secret(seed))].into_iter().collect()));
    // The agent's connections go through a witness that reports a refused connect: the
    // evidence that a refusal window was met, not merely planned.
    let mut agent_seams = seams.clone();
    agent_seams.net = Arc::new(RefusalWitness { inner: seams.net.clone(), report: report.clone() });
    let agent = Agent::builder(live, credentials)
        .seams(agent_seams)
        .open(open)
        .tools(tools)
        .config(config)
        .start(&store, &id)
        .map_err(|e| e.to_string())?;
    trace_repair(&agent, life, report.as_ref());
    report_what_the_agent_says(&agent, &report);
    // The user resubmits what a crash lost: the plan's messages not yet in the durable log,
    // and the message sent during a cancel if it never became durable.
    let extra = faultline_runtime::event::Message::user_text(MESSAGE_DURING_ABORT);
    // A session this life created holds no messages yet: skip re-reading it.
    let records = if exists { store.inspect(&id).map_err(|e| e.to_string())?.records } else { Vec::new() };
    let logged: Vec<faultline_runtime::event::Message> = records
        .into_iter()
        .filter_map(|r| if let Event::UserMessage(m) = r.event { Some(m.message) } else { None })
        .collect();
    let extra_logged = logged.contains(&extra);
    let done = logged.len() - usize::from(extra_logged);
    // A message the dead agent refused was never accepted: the user saw the refusal, and
    // resending it would be a second submission the oracle does not owe a turn.
    let extra_owed = earlier.cancel_fired && !earlier.extra_refused;
    let person =
        super::person::ActingPerson::new(plan.faults.person.clone().unwrap_or_default(), &seams, report.as_ref());
    // A session that resumed paused is decided and continued before anything new is said.
    person.settle(&agent, (&store, &id), life).await?;
    if extra_owed && plan.faults.cancel_then_submit && !extra_logged {
        agent.submit(MESSAGE_DURING_ABORT).map_err(|e| e.to_string())?;
        agent.when_idle().await;
        report_outcome(&agent, report.as_ref(), life);
        person.settle(&agent, (&store, &id), life).await?;
    }
    if life == 1 {
        cancel_later(plan, &agent, &seams, &report);
    }
    for message in plan.messages.iter().skip(done) {
        agent.submit(message.clone()).map_err(|e| e.to_string())?;
        agent.when_idle().await;
        report_outcome(&agent, report.as_ref(), life);
        person.settle(&agent, (&store, &id), life).await?;
    }
    agent.when_idle().await;
    agent.dispose().await.map_err(|e| e.to_string())?;
    Ok(store.inspect(&id).map_err(|e| e.to_string())?.records)
}

/// The receiver of the queue's deliveries (its token a secret the agent holds, like the
/// provider key), after the queue was drained of what an earlier incarnation left; the queue
/// as this incarnation found it is traced: the evidence its crash repair will consult.
async fn drain_queue(
    outbox: &dyn Outbox,
    seams: &Seams,
    (seed, life): (u64, u64),
    gateway: String,
    report: &dyn LifeReport,
) -> Result<Arc<gateway::GatewayDeliverer>, String> {
    let token = gateway_token(seed);
    seams.secrets.register(&token);
    let deliverer = Arc::new(gateway::GatewayDeliverer {
        token,
        net: seams.net.clone(),
        clock: seams.clock.clone(),
        authority: gateway,
        probe: seams.probe.clone(),
    });
    let drained = drain(outbox, deliverer.as_ref()).await.map_err(|e| e.to_string())?;
    for id in &drained.recovered_unknown {
        report.trace(format!("agent#{life} outbox: {id} abandoned mid-delivery -> unknown"));
    }
    for row in outbox.list(None).map_err(|e| e.to_string())? {
        report.trace(format!("agent#{life} outbox holds {} {}", row.execution_id, row.status));
    }
    Ok(deliverer)
}

/// The agent's knobs: an embedder's own, or the plan's pool size; the plan's answer limit.
pub(super) fn agent_config(user: Option<&super::user::AgentUnderTest>, plan: &Plan) -> AgentConfig {
    let mut config = match user {
        Some(user) => user.config.clone(),
        None => {
            let mut config = AgentConfig::default();
            config.tool_concurrency = plan.tool_concurrency;
            config
        }
    };
    if let Some(answer_bytes_max) = plan.faults.answer_bytes_max {
        config.answer_bytes_max = answer_bytes_max;
    }
    config
}

/// What opening the session repaired, for the trace.
fn trace_repair(agent: &Agent, life: u64, report: &dyn LifeReport) {
    if let Some(repair) = agent.startup_repair() {
        let dropped = repair.dropped().map(|d| format!(", {d}")).unwrap_or_default();
        report.trace(format!(
            "agent#{life} repaired the session: truncated {} torn bytes, salvaged {} records, appended {} closers{dropped}",
            repair.truncated_bytes,
            repair.recovered.len(),
            repair.closers.len()
        ));
    }
}

/// `tools` and the plan's: gateway tools deliver through the queue, the rest run here.
fn tools_of(
    mut tools: ToolSet,
    plan: &Plan,
    outbox: &Arc<dyn Outbox>,
    deliverer: &Arc<gateway::GatewayDeliverer>,
    seams: &Seams,
    seed: u64,
    report: &Arc<dyn LifeReport>,
) -> ToolSet {
    for tool in &plan.tools {
        // An embedder's own tool of the same name stands in for the scenario's (a recorded
        // incident swept with `--agent`).
        if tools.get(&tool.name).is_some() {
            continue;
        }
        let parameters = tool.parameters.as_deref().and_then(|p| serde_json::from_str(p).ok());
        let schema = ToolSchema {
            name: tool.name.clone(),
            description: tool.description.clone().unwrap_or_else(|| tool.kind.as_str().to_owned()),
            parameters: parameters.unwrap_or_else(|| serde_json::json!({"type": "object"})),
        };
        let built: Arc<dyn Tool> = match tool.kind {
            ToolKind::Gateway => Arc::new(OutboxTool::new(schema, outbox.clone(), deliverer.clone())),
            ToolKind::Recorded => Arc::new(RecordedTool { schema, results: tool.results.clone() }),
            _ => Arc::new(LocalTool {
                schema,
                timeout_ms: tool.timeout_ms,
                work_ms: tool.work_ms,
                ignore_abort: tool.ignore_abort,
                printed: tool.printed_output(),
                // A careless tool prints a secret its process holds (the gateway token).
                leaks: (tool.kind == ToolKind::Leaky).then(|| gateway_token(seed)),
                clock: seams.clock.clone(),
                report: report.clone(),
            }),
        };
        tools = match tool.approval_policy() {
            Some(policy) => tools.with(Arc::new(faultline_runtime::approval::NeedsApproval::new(built, policy))),
            None => tools.with(built),
        };
    }
    tools
}

/// A tool of a recorded session: each call gets what the same call got in the recording.
struct RecordedTool {
    schema: ToolSchema,
    results: Vec<crate::scenario::RecordedResult>,
}

impl Tool for RecordedTool {
    fn schema(&self) -> ToolSchema {
        self.schema.clone()
    }

    fn call(&self, invocation: ToolInvocation, _cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let recorded = self.results.iter().find(|r| r.call_id == invocation.call_id).cloned();
        Box::pin(async move {
            let Some(recorded) = recorded else {
                return ToolOutput::Failed(format!("no recorded result for call {}", invocation.call_id));
            };
            match recorded.error.as_deref() {
                None => ToolOutput::Ok(recorded.text),
                Some("TOOL_OUTCOME_UNKNOWN") => ToolOutput::Unknown(recorded.text),
                Some("ABORTED") => ToolOutput::Aborted(recorded.text),
                Some(_) => ToolOutput::Failed(recorded.text),
            }
        })
    }
}

/// The plan's live config update, applied (or refused, the last good kept) at its instant.
fn update_config_later(
    plan: &Plan,
    live: &Arc<LiveProvider>,
    seams: &Seams,
    model_url: &str,
    report: &Arc<dyn LifeReport>,
) {
    let Some(update) = plan.faults.config_update.clone() else { return };
    let (live, clock, report, model_url) = (live.clone(), seams.clock.clone(), report.clone(), model_url.to_owned());
    let format = plan.format;
    tokio::spawn(async move {
        clock.sleep_until(faultline_runtime::seams::Monotonic(Duration::from_millis(update.at_ms))).await;
        let text = provider_file(format, &model_url, &update.provider);
        let applied = from_toml::<ProviderFile>(&text).and_then(|f| live.update(&f.provider, "provider"));
        let (family, line) = match applied {
            Ok(()) => ("config-applied", "config update applied".to_owned()),
            Err(e) => ("config-rejected", format!("config update rejected, last good kept: {e}")),
        };
        report.fault(family);
        report.trace(line);
    });
}

/// Reports, outside the host, every record the agent accepted, every persistence failure it
/// announced and every durable watermark its barrier acknowledged: the agent's word, which
/// the oracle holds against the disk's own record.
fn report_what_the_agent_says(agent: &Agent, report: &Arc<dyn LifeReport>) {
    let mut records = agent.subscribe();
    let report_records = report.clone();
    tokio::spawn(async move {
        while let Ok(record) = records.recv().await {
            report_records.accepted(&record);
        }
    });
    // What the agent says failed to persist, as it says it: a record accepted and never
    // durable must be covered by one of these (or by a crash).
    let mut failures = agent.failures();
    let report_failures = report.clone();
    tokio::spawn(async move {
        while failures.recv().await.is_ok() {
            report_failures.persist_failure();
        }
    });
    // Whatever the barrier acknowledged durable is reported outside the host at once: the
    // oracle checks it survived every later crash byte for byte, and that each effect
    // came after its intent.
    let mut watermark = agent.durable_watermark();
    let report_durable = report.clone();
    tokio::spawn(async move {
        while watermark.changed().await.is_ok() {
            let through = *watermark.borrow_and_update();
            report_durable.durable(through);
        }
    });
}

/// The plan's cancel of the first incarnation's turn: at an instant, or a while after the
/// first text arrives.
fn cancel_later(plan: &Plan, agent: &Agent, seams: &Seams, report: &Arc<dyn LifeReport>) {
    let (agent, clock, report, then_submit) =
        (agent.clone(), seams.clock.clone(), report.clone(), plan.faults.cancel_then_submit);
    let (at_ms, after_first_text_ms) = (plan.faults.cancel_at_ms, plan.faults.cancel_after_first_text_ms);
    let mut records = after_first_text_ms.map(|_| agent.subscribe());
    if at_ms.is_some() || after_first_text_ms.is_some() {
        tokio::spawn(async move {
            if let Some(at) = at_ms {
                clock.sleep_until(faultline_runtime::seams::Monotonic(Duration::from_millis(at))).await;
            }
            if let (Some(after), Some(records)) = (after_first_text_ms, records.as_mut()) {
                while let Ok(record) = records.recv().await {
                    if let Event::AssistantChunk(chunk) = &record.event {
                        if matches!(chunk.chunk, faultline_runtime::event::Chunk::TextDelta { .. }) {
                            break;
                        }
                    }
                }
                clock.sleep(Duration::from_millis(after)).await;
            }
            cancel(&agent, report.as_ref(), then_submit);
        });
    }
}

/// The simulated user's cancel: with `then_submit`, keep the inbox and send one more message
/// during the abort (the wake latch).
fn cancel(agent: &Agent, report: &dyn LifeReport, then_submit: bool) {
    report.fault("cancel");
    if then_submit {
        agent.cancel_keep_inbox();
        // A cancel that lands after the workload ended finds the agent disposed: its message
        // was refused, never accepted, and is not owed a turn.
        if agent.submit(MESSAGE_DURING_ABORT).is_err() {
            report.extra_refused();
        }
    } else {
        agent.cancel();
    }
    report.trace("cancel".into());
}

/// A record in a few words, for the trace.
pub(crate) fn describe(record: &Record) -> String {
    match &record.event {
        Event::TurnEnd(end) => format!("turn/end {}", serde_json::to_string(&end.reason).unwrap_or_default()),
        Event::LlmRetry(retry) => format!("llm/retry {} {}ms {}", retry.retry, retry.delay_ms, retry.failure.code),
        Event::ToolResult(result) => format!(
            "tool/result {} {}",
            result.call_id,
            result.error.as_ref().map_or("ok".to_owned(), |e| e.code.to_string())
        ),
        Event::AssistantChunk(chunk) => format!("assistant/chunk attempt {}", chunk.attempt),
        other => other.type_name().to_owned(),
    }
}

/// A tool without side effects: answers at once, or works for `work_ms` (cooperatively
/// unless `ignore_abort`).
struct LocalTool {
    schema: ToolSchema,
    timeout_ms: Option<u64>,
    work_ms: u64,
    ignore_abort: bool,
    /// What the tool prints instead of its usual answer (`output_bytes`).
    printed: Option<String>,
    /// For `leaky`: the secret the tool prints.
    leaks: Option<String>,
    clock: Arc<dyn Clock>,
    report: Arc<dyn LifeReport>,
}

impl Tool for LocalTool {
    fn schema(&self) -> ToolSchema {
        self.schema.clone()
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (clock, work, ignore) = (self.clock.clone(), Duration::from_millis(self.work_ms), self.ignore_abort);
        let deadline = self.timeout_ms.map(Duration::from_millis);
        let (printed, leaks, report) = (self.printed.clone(), self.leaks.clone(), self.report.clone());
        Box::pin(async move {
            // The tool's own record of its effect, outside the runtime's reach.
            report.ran(&invocation.execution_id, &invocation.arguments.to_string());
            if let Some(secret) = leaks {
                return ToolOutput::Ok(format!("config dump: GATEWAY_TOKEN={secret}"));
            }
            if let Some(text) = printed {
                // A tool that prints more than a record should hold (the runtime truncates it):
                // the fault happened only when the output is over the limit.
                if text.len() > faultline_runtime::tool::TOOL_OUTPUT_BYTES_MAX {
                    report.fault("oversize-output");
                }
                return ToolOutput::Ok(text);
            }
            let past_deadline = deadline.is_some_and(|d| work > d);
            let output = if work.is_zero() {
                ToolOutput::Ok(format!("echo {}", invocation.arguments))
            } else if ignore {
                clock.sleep(work).await;
                if past_deadline {
                    report.reached("tools.deadline.answer-after-deadline");
                }
                ToolOutput::Ok("finished after its slow cleanup".into())
            } else {
                let started = clock.now();
                tokio::select! {
                    () = clock.sleep(work) => {
                        if deadline.is_some() {
                            report.reached("tools.deadline.answer-before-deadline");
                        }
                        ToolOutput::Ok("done".into())
                    }
                    () = cancel.cancelled() => {
                        let at_deadline = deadline.is_some_and(|d| clock.now().saturating_duration_since(started) >= d);
                        report.reached(if at_deadline {
                            "tools.deadline.stopped-before-acting"
                        } else {
                            "tools.abort.stopped-on-the-callers-cancel"
                        });
                        ToolOutput::Aborted("stopped on request".into())
                    }
                }
            };
            if matches!(output, ToolOutput::Ok(_)) {
                report.answered(&invocation.execution_id);
            }
            output
        })
    }
}

/// The agent's `Net`, reporting every connect the far side refused (`refused`).
struct RefusalWitness {
    inner: Arc<dyn faultline_runtime::seams::Net>,
    report: Arc<dyn LifeReport>,
}

impl faultline_runtime::seams::Net for RefusalWitness {
    fn connect(&self, addr: &str) -> BoxFuture<'_, std::io::Result<Box<dyn faultline_runtime::seams::ByteStream>>> {
        let connecting = self.inner.connect(addr);
        Box::pin(async move {
            let connected = connecting.await;
            if connected.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused) {
                self.report.fault("refused");
            }
            connected
        })
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, std::io::Result<Box<dyn faultline_runtime::seams::Listener>>> {
        self.inner.bind(addr)
    }
}
