//! The agent loop against the fake model server, over real HTTP and inside turmoil on
//! simulated time (FAILURE-REQUEST-LOOP, FAILURE-RETRY-EXECUTOR, FAILURE-RETRY-SEMANTICS-TEST,
//! FAILURE-WIRE-RECOVERY-TEST, FAILURE-TOOL-DRAIN, FAILURE-AGENT-CANCEL,
//! FAILURE-AGENT-DISPOSAL).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // drives a real runtime too

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::agent::{Agent, AgentConfig, Open, TurnOutcome};

use faultline_runtime::event::*;
use faultline_runtime::llm::{from_toml, ProviderConfig, StaticCredentials};
use faultline_runtime::store::{MemoryStore, SessionId, SessionLog, Store};
use faultline_runtime::tool::{Tool, ToolInvocation, ToolOutput, ToolSet};
use faultline_runtime::{seams::BoxFuture, seams::Seams};
use faultline_sim::model_server::{Frame, ModelServer, RecordedRequest, Response, Script};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{sim_builder_with_tick, ScriptedEntropy};

/// Whether appends of batches holding a `tool/call` fail (the tool path's checkpoint flush
/// then fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolCallAppends {
    Succeed,
    /// Every such append fails: nothing of the tool path becomes durable.
    FailAlways,
    /// The first such append fails (a transient EIO); the write-behind's retry succeeds.
    FailOnce,
}

/// Holds the append of the batch carrying one call's `tool/call` open until released, so the
/// tool path's checkpoint flush for that call stays in progress for as long as the test
/// wants. Real runtime only: the writer blocks its worker thread (`block_in_place`).
#[derive(Debug)]
struct HeldAppend {
    call_id: &'static str,
    /// Notified when the held append starts.
    held: tokio::sync::Notify,
    released: Mutex<bool>,
    release: std::sync::Condvar,
}

/// Longest a held append waits for its release before the test gives up on it.
const HELD_APPEND_WAIT_S_MAX: u64 = 30;

impl HeldAppend {
    fn new(call_id: &'static str) -> Arc<Self> {
        Arc::new(Self {
            call_id,
            held: tokio::sync::Notify::new(),
            released: Mutex::new(false),
            release: std::sync::Condvar::new(),
        })
    }

    fn hold_if_it_carries_the_call(&self, batch: &[Record]) {
        if !batch.iter().any(|r| matches!(&r.event, Event::ToolCall(c) if c.call_id == self.call_id)) {
            return;
        }
        self.held.notify_one();
        tokio::task::block_in_place(|| {
            let released = self.released.lock().unwrap();
            let limit = Duration::from_secs(HELD_APPEND_WAIT_S_MAX);
            let (_released, waited) = self.release.wait_timeout_while(released, limit, |released| !*released).unwrap();
            assert!(!waited.timed_out(), "the held append of {} was never released", self.call_id);
        });
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.release.notify_all();
    }
}

/// A memory store whose logs refuse batches holding a `tool/call` as `fail_tool_calls` says,
/// and hold one call's batch open when `hold` is set.
#[derive(Debug)]
struct FailingStore {
    inner: MemoryStore,
    fail_tool_calls: ToolCallAppends,
    /// Every append of a batch holding a record of this type fails (ENOSPC).
    fail_type: Option<&'static str>,
    hold: Option<Arc<HeldAppend>>,
}

#[derive(Debug)]
struct FailingLog {
    inner: Box<dyn SessionLog>,
    fail_tool_calls: ToolCallAppends,
    fail_type: Option<&'static str>,
    hold: Option<Arc<HeldAppend>>,
}

impl SessionLog for FailingLog {
    fn id(&self) -> &SessionId {
        self.inner.id()
    }
    fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }
    fn token(&self) -> u64 {
        self.inner.token()
    }
    fn append(&mut self, batch: &[Record]) -> faultline_runtime::Result<()> {
        if self.fail_tool_calls != ToolCallAppends::Succeed
            && batch.iter().any(|r| matches!(r.event, Event::ToolCall(_)))
        {
            if self.fail_tool_calls == ToolCallAppends::FailOnce {
                self.fail_tool_calls = ToolCallAppends::Succeed;
            }
            return Err(faultline_runtime::Error::io("append", std::io::Error::other("injected EIO")));
        }
        if self.fail_type.is_some_and(|t| batch.iter().any(|r| r.event.type_name() == t)) {
            let full = std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
            return Err(faultline_runtime::Error::io("append", full));
        }
        if let Some(hold) = &self.hold {
            hold.hold_if_it_carries_the_call(batch);
        }
        self.inner.append(batch)
    }
    fn close(self: Box<Self>) -> faultline_runtime::Result<()> {
        self.inner.close()
    }
}

impl Store for FailingStore {
    fn create(&self, id: &SessionId, created_at: u64) -> faultline_runtime::Result<Box<dyn SessionLog>> {
        let inner = self.inner.create(id, created_at)?;
        Ok(Box::new(FailingLog {
            inner,
            fail_tool_calls: self.fail_tool_calls,
            fail_type: self.fail_type,
            hold: self.hold.clone(),
        }))
    }
    fn open(
        &self,
        id: &SessionId,
        takeover: faultline_runtime::store::Takeover,
    ) -> faultline_runtime::Result<faultline_runtime::store::Opened> {
        let mut opened = self.inner.open(id, takeover)?;
        opened.log = Box::new(FailingLog {
            inner: opened.log,
            fail_tool_calls: self.fail_tool_calls,
            fail_type: self.fail_type,
            hold: self.hold.clone(),
        });
        Ok(opened)
    }
    fn inspect(&self, id: &SessionId) -> faultline_runtime::Result<faultline_runtime::store::Inspection> {
        self.inner.inspect(id)
    }
    fn load(&self, id: &SessionId) -> faultline_runtime::Result<faultline_runtime::store::Loaded> {
        self.inner.load(id)
    }
    fn list(&self) -> faultline_runtime::Result<Vec<SessionId>> {
        self.inner.list()
    }
}

/// What a test asks the agent to do.
#[derive(Clone)]
struct Spec {
    script: Script,
    /// Extra `[provider]` TOML (retry policy, idle timeout).
    provider: String,
    prompts: Vec<&'static str>,
    tools: ToolSet,
    tool_concurrency: usize,
    /// Entropy draws (jitter samples); default: OS/seeded.
    entropy: Option<Vec<u64>>,
    /// After this many ms, the action runs.
    action: Option<(u64, Action)>,
    /// Records already in the session, left by a previous (dead) owner: the agent resumes.
    preload: Option<Vec<Record>>,
    /// Appends carrying a `tool/call` fail (the tool checkpoint cannot pass).
    fail_tool_call_appends: ToolCallAppends,
    /// Every append of a batch holding a record of this type fails with ENOSPC.
    fail_type: Option<&'static str>,
    /// The append carrying this call's `tool/call` is held open (real runtime only).
    hold: Option<Arc<HeldAppend>>,
    max_steps: u32,
    /// The agent's answer limit (default: the store's).
    answer_bytes_max: Option<usize>,
    /// The write-behind's queue bound (default: the runtime's).
    pending_events_max: Option<usize>,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Cancel,
    CancelKeepInbox,
    CancelThenSubmit,
    Dispose,
    /// Cancel while the held append is in progress; release it once the turn has answered
    /// the held call.
    CancelWhileHeld,
}

impl Spec {
    fn new(responses: Vec<Response>) -> Self {
        Self {
            script: Script { responses, ..Script::default() },
            provider: String::new(),
            prompts: vec!["hello"],
            tools: ToolSet::new(),
            tool_concurrency: 4,
            entropy: None,
            action: None,
            preload: None,
            fail_tool_call_appends: ToolCallAppends::Succeed,
            fail_type: None,
            hold: None,
            max_steps: 16,
            answer_bytes_max: None,
            pending_events_max: None,
        }
    }
}

struct Run {
    records: Vec<Record>,
    requests: Vec<RecordedRequest>,
    second_dispose: Option<String>,
    submit_after_dispose: bool,
    /// The agent's last outcome, and whether a submit after it was accepted (before disposal).
    last_outcome: Option<TurnOutcome>,
    submit_after_last: bool,
    /// What disposal returned.
    disposed: Result<(), String>,
}

impl Run {
    fn of(side: AgentSide, requests: Vec<RecordedRequest>) -> Self {
        let AgentSide { records, second_dispose, submit_after_dispose, last_outcome, submit_after_last, disposed } =
            side;
        Self { records, requests, second_dispose, submit_after_dispose, last_outcome, submit_after_last, disposed }
    }

    fn events(&self, type_name: &str) -> Vec<&Record> {
        self.records.iter().filter(|r| r.event.type_name() == type_name).collect()
    }

    fn turn_ends(&self) -> Vec<TurnEndReason> {
        self.records
            .iter()
            .filter_map(|r| if let Event::TurnEnd(end) = &r.event { Some(end.reason.clone()) } else { None })
            .collect()
    }

    /// Call ids of the `tool/call` records, or `id:CODE` (`id:ok`) of the `tool/result` ones.
    fn tool_ids(&self, type_name: &str) -> Vec<String> {
        self.events(type_name)
            .iter()
            .map(|r| match &r.event {
                Event::ToolCall(c) => c.call_id.clone(),
                Event::ToolResult(t) => {
                    format!("{}:{}", t.call_id, t.error.as_ref().map_or("ok".into(), |e| e.code.to_string()))
                }
                other => unreachable!("{other:?}"),
            })
            .collect()
    }

    fn retries(&self) -> Vec<LlmRetry> {
        self.records
            .iter()
            .filter_map(|r| if let Event::LlmRetry(retry) = &r.event { Some(retry.as_ref().clone()) } else { None })
            .collect()
    }
}

/// What the agent side of a run reports (everything of [`Run`] but the server's requests).
struct AgentSide {
    records: Vec<Record>,
    second_dispose: Option<String>,
    submit_after_dispose: bool,
    last_outcome: Option<TurnOutcome>,
    submit_after_last: bool,
    disposed: Result<(), String>,
}

async fn run_agent(mut seams: Seams, base_url: String, spec: Spec) -> AgentSide {
    if let Some(draws) = &spec.entropy {
        seams.entropy = Arc::new(ScriptedEntropy(Mutex::new(draws.iter().copied().collect())));
    }
    let id = SessionId::new("s").unwrap();
    let memory = match &spec.preload {
        None => MemoryStore::new(seams.process.clone()),
        Some(records) => {
            // A previous incarnation of this host wrote them and died without closing.
            let earlier = MemoryStore::new(Arc::new(faultline_sim::seams::SimProcess::new("agent", 0)));
            let mut log = earlier.create(&id, 0).unwrap();
            log.append(records).unwrap();
            drop(log);
            earlier.as_process(seams.process.clone())
        }
    };
    let store = FailingStore {
        inner: memory,
        fail_tool_calls: spec.fail_tool_call_appends,
        fail_type: spec.fail_type,
        hold: spec.hold.clone(),
    };
    let text = format!(
        "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\n{}",
        spec.provider
    );
    #[derive(serde::Deserialize)]
    struct File {
        provider: ProviderConfig,
    }
    let route = from_toml::<File>(&text).unwrap().provider.resolve("provider").unwrap();
    let mut config = AgentConfig::default();
    (config.tool_concurrency, config.max_steps) = (spec.tool_concurrency, spec.max_steps);
    if let Some(max) = spec.answer_bytes_max {
        config.answer_bytes_max = max;
    }
    if let Some(max) = spec.pending_events_max {
        config.write_behind.pending_events_max = max;
        config.write_behind.batch_events_max = max;
    }
    let agent = Agent::builder(route, Arc::new(StaticCredentials(BTreeMap::new())))
        .seams(seams.clone())
        .open(if spec.preload.is_some() { Open::Resume } else { Open::Create })
        .tools(spec.tools.clone())
        .config(config)
        .start(&store, &id)
        .unwrap();
    for prompt in &spec.prompts {
        agent.submit(*prompt).unwrap();
    }
    let mut second_dispose = None;
    let mut submit_after_dispose = true;
    if let Some((after_ms, action)) = spec.action {
        seams.clock.sleep(Duration::from_millis(after_ms)).await;
        match action {
            Action::Cancel => agent.cancel(),
            Action::CancelKeepInbox => agent.cancel_keep_inbox(),
            Action::CancelThenSubmit => {
                agent.cancel();
                agent.submit("after the abort").unwrap();
            }
            Action::Dispose => {
                let (a, b) = (agent.clone(), agent.clone());
                let (first, second) = tokio::join!(a.dispose(), b.dispose());
                first.unwrap();
                second_dispose = Some(format!("{second:?}"));
                submit_after_dispose = agent.submit("too late").is_ok();
            }
            Action::CancelWhileHeld => {
                let hold = spec.hold.clone().expect("CancelWhileHeld needs a held append");
                let mut accepted = agent.subscribe();
                hold.held.notified().await;
                agent.cancel();
                // The turn saw the cancel with the flush still open once it answers the call.
                loop {
                    let record = accepted.recv().await.expect("the agent is alive");
                    if matches!(&record.event, Event::ToolResult(r) if r.call_id == hold.call_id) {
                        break;
                    }
                }
                hold.release();
            }
        }
    }
    agent.when_idle().await;
    let last_outcome = agent.last_outcome();
    // Only when nothing else disposed it: a submit now would start another turn.
    let submit_after_last = spec.fail_type.is_some() && agent.submit("one more").is_ok();
    agent.when_idle().await;
    let disposed = agent.dispose().await.map_err(|e| e.to_string());
    if spec.fail_tool_call_appends != ToolCallAppends::FailAlways && spec.fail_type.is_none() {
        disposed.clone().unwrap();
    }
    AgentSide {
        records: store.inner.inspect(&id).unwrap().records,
        second_dispose,
        submit_after_dispose,
        last_outcome,
        submit_after_last,
        disposed,
    }
}

fn run_real(spec: &Spec) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let seams = faultline_runtime::production::seams();
        let server =
            ModelServer::start(seams.net.clone(), seams.clock.clone(), "127.0.0.1:0", spec.script.clone(), None)
                .await
                .unwrap();
        let side = run_agent(seams, format!("http://{}/v1", server.addr()), spec.clone()).await;
        Run::of(side, server.requests())
    })
}

fn run_sim(spec: &Spec) -> Run {
    let mut sim = sim_builder_with_tick(5, Duration::from_millis(1)).build();
    let server_slot: Arc<Mutex<Option<ModelServer>>> = Arc::default();
    {
        let (script, slot) = (spec.script.clone(), server_slot.clone());
        sim.host("model", move || {
            let (script, slot) = (script.clone(), slot.clone());
            async move {
                let server = ModelServer::start(
                    Arc::new(faultline_sim::seams::SimNet),
                    Arc::new(faultline_sim::seams::SimClock),
                    "0.0.0.0:80",
                    script,
                    None,
                )
                .await?;
                *slot.lock().unwrap() = Some(server);
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    let result: Arc<Mutex<Option<AgentSide>>> = Arc::default();
    {
        let (spec, result) = (spec.clone(), result.clone());
        sim.client("agent", async move {
            let seams = faultline_sim::seams::sim_seams(5, "agent", 1);
            *result.lock().unwrap() = Some(run_agent(seams, "http://model:80/v1".into(), spec).await);
            Ok(())
        });
    }
    sim.run().expect("simulation");
    let side = result.lock().unwrap().take().unwrap();
    let requests = server_slot.lock().unwrap().as_ref().unwrap().requests();
    Run::of(side, requests)
}

fn both(spec: Spec, check: impl Fn(&Run, &str)) {
    for (run, world) in [(run_real(&spec), "real HTTP"), (run_sim(&spec), "turmoil")] {
        Validator::validate_all(&run.records).unwrap_or_else(|v| panic!("{world}: invalid log: {v}"));
        check(&run, world);
    }
}

fn policy(codes: &str, jitter: f64) -> String {
    format!("[provider.retry_policy]\nretryable_codes = [{codes}]\n[provider.retry_policy.backoff]\njitter_ratio = {jitter}\n")
}

#[test]
fn rate_limit_is_retried_once_after_exactly_the_backoff_within_one_step() {
    let mut spec = Spec::new(vec![Response::status(429, &[], "slow down"), Response::text(&["ok"])]);
    spec.provider = policy("\"SERVER\", \"RATE_LIMIT\"", 0.0);
    both(spec, |run, world| {
        let retries = run.retries();
        assert_eq!(retries.len(), 1, "{world}");
        assert_eq!(retries[0].delay_ms, 500);
        assert_eq!(retries[0].retry, 1);
        assert_eq!(retries[0].policy_key, json!(["normal", 2, ["RATE_LIMIT", "SERVER"], 500, 10000, 0]));
        assert_eq!(retries[0].failure.code, ErrorCode::RateLimit);
        assert_eq!(run.events("llm/retry-started").len(), 1);
        assert_eq!(run.events("step/start").len(), 1, "{world}: retries stay inside the step");
        assert_eq!(run.requests.len(), 2);
        let gap = run.requests[1].at_ms - run.requests[0].at_ms;
        assert!(gap >= 500, "{world}: second request only {gap} ms after the first");
        if world == "turmoil" {
            // Simulated time is exact: the retry is written at T and nothing is sent before
            // T + 500 ms. The request then needs a fresh connection (SYN, SYN-ACK: one round
            // trip of 1 ms hops) and one hop for its bytes, so it lands at T + 502 — not at
            // T + 499, and not late.
            let retry_at = run.events("llm/retry")[0].time - faultline_sim::seams::SIM_EPOCH_MS;
            let arrived_at = run.requests[1].at_ms;
            assert_eq!(arrived_at - retry_at, 502, "turmoil: dispatched at exactly 500 ms after llm/retry");
        }
        assert_eq!(run.requests[0].body, run.requests[1].body, "{world}: the re-sent body is identical");
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
    });
}

#[test]
fn jitter_samples_zero_then_one_give_450_then_1100() {
    let mut spec =
        Spec::new(vec![Response::status(500, &[], ""), Response::status(500, &[], ""), Response::text(&["ok"])]);
    spec.provider = policy("\"SERVER\"", 0.1);
    spec.entropy = Some(vec![0, u64::MAX]);
    both(spec, |run, world| {
        let delays: Vec<u64> = run.retries().iter().map(|r| r.delay_ms).collect();
        assert_eq!(delays, vec![450, 1100], "{world}");
        let ids: Vec<String> = run.retries().into_iter().map(|r| r.retry_id).collect();
        assert_eq!(ids[0], ids[1], "{world}: one retry id per step");
    });
}

#[test]
fn three_server_failures_end_the_turn_after_two_retries() {
    let spec =
        Spec::new(vec![Response::status(500, &[], ""), Response::status(502, &[], ""), Response::status(503, &[], "")]);
    both(spec, |run, world| {
        assert_eq!(run.retries().len(), 2, "{world}");
        assert_eq!(run.requests.len(), 3);
        match &run.turn_ends()[..] {
            [TurnEndReason::Error { error }] => assert_eq!(error.code, ErrorCode::Server, "{world}"),
            other => panic!("{world}: {other:?}"),
        }
    });
}

#[test]
fn retry_after_is_used_verbatim_up_to_the_cap() {
    let spec = Spec::new(vec![Response::status(429, &[("retry-after", "2")], ""), Response::text(&["ok"])]);
    both(spec, |run, world| {
        assert_eq!(run.retries()[0].delay_ms, 2000, "{world}");
        assert!(run.requests[1].at_ms - run.requests[0].at_ms >= 2000);
    });
    let over = Spec::new(vec![Response::status(429, &[("retry-after-ms", "10001")], ""), Response::text(&["ok"])]);
    both(over, |run, world| {
        assert!(run.retries().is_empty(), "{world}: advice above the cap ends a normal policy");
        assert_eq!(run.requests.len(), 1);
        assert!(matches!(&run.turn_ends()[..], [TurnEndReason::Error { error }] if error.code == ErrorCode::RateLimit));
    });
}

/// A tool that counts its executions.
struct Counting(Arc<AtomicUsize>);

impl Tool for Counting {
    fn schema(&self) -> ToolSchema {
        ToolSchema { name: "send".into(), description: "send".into(), parameters: json!({"type": "object"}) }
    }
    fn call(&self, _: ToolInvocation, _: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { ToolOutput::Ok("sent".into()) })
    }
}

#[test]
fn failed_attempt_chunks_are_logged_but_never_committed_or_executed() {
    let partial = Response {
        frames: vec![Frame::ToolCall {
            index: 0,
            id: Some("c1".into()),
            name: Some("send".into()),
            arguments: "{\"to\":".into(),
        }],
        disconnect_after_frames: Some(1),
        ..Response::default()
    };
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![partial, Response::text(&["never mind"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    both(spec, |run, world| {
        assert!(run.events("tool/call").is_empty(), "{world}: no tool/call from a failed attempt");
        let messages = run.events("assistant/message");
        assert_eq!(messages.len(), 1);
        let attempts: Vec<u32> = messages[0]
            .source_seqs
            .as_ref()
            .unwrap()
            .iter()
            .map(|seq| match &run.records[*seq as usize].event {
                Event::AssistantChunk(chunk) => chunk.attempt,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(!attempts.is_empty(), "{world}: the answer cites its chunks");
        assert!(attempts.iter().all(|a| *a == 2), "{world}: cites only the successful attempt");
        let failed_chunks = run
            .events("assistant/chunk")
            .iter()
            .filter(|r| matches!(&r.event, Event::AssistantChunk(c) if c.attempt == 1))
            .count();
        assert!(failed_chunks >= 2, "{world}: the failed attempt's chunks stay in the log");
    });
    assert_eq!(executions.load(Ordering::SeqCst), 0, "the tool never ran");
}

#[test]
fn a_clean_eof_without_done_is_not_retried() {
    let mut eof = Response::text(&["half"]);
    eof.done = false;
    both(Spec::new(vec![eof, Response::text(&["ok"])]), |run, world| {
        assert_eq!(run.requests.len(), 1, "{world}");
        assert!(
            matches!(&run.turn_ends()[..], [TurnEndReason::Error { error }] if error.code == ErrorCode::StreamClosed)
        );
    });
}

#[test]
fn a_stalled_body_times_out_and_the_retry_succeeds() {
    let mut stall = Response::text(&["a", "b"]);
    stall.stall_after_frames = Some(1);
    let mut spec = Spec::new(vec![stall, Response::text(&["ok"])]);
    spec.provider = "idle_timeout_ms = 400\n".into();
    both(spec, |run, world| {
        assert_eq!(run.retries()[0].failure.code, ErrorCode::Timeout, "{world}");
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
    });
}

#[test]
fn a_refused_then_available_endpoint_recovers() {
    let mut spec = Spec::new(vec![Response::text(&["ok"])]);
    spec.script.refuse_until_ms = 300;
    spec.provider = policy("\"TRANSPORT\"", 0.0);
    both(spec, |run, world| {
        assert!(!run.retries().is_empty(), "{world}");
        assert!(run.retries().iter().all(|r| r.failure.code == ErrorCode::Transport));
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
    });
}

#[test]
fn cancel_during_backoff_aborts_without_retry_started() {
    let mut spec = Spec::new(vec![Response::status(500, &[], ""), Response::text(&["ok"])]);
    spec.provider = policy("\"SERVER\"", 0.0);
    spec.action = Some((200, Action::Cancel));
    both(spec, |run, world| {
        assert_eq!(run.requests.len(), 1, "{world}");
        assert_eq!(run.retries().len(), 1);
        assert!(run.events("llm/retry-started").is_empty(), "{world}");
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Aborted { cause: AbortCause::User }]);
    });
}

/// A tool that runs until its signal fires, then reports the abort.
struct Blocking;

impl Tool for Blocking {
    fn schema(&self) -> ToolSchema {
        ToolSchema { name: "wait".into(), description: "wait".into(), parameters: json!({"type": "object"}) }
    }
    fn call(&self, _: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            cancel.cancelled().await;
            ToolOutput::Aborted("stopped on request".into())
        })
    }
}

#[test]
fn a_cancelled_parallel_pool_drains_and_writes_ordered_synthetic_results() {
    let calls: Vec<Frame> = (0..4)
        .map(|i| Frame::ToolCall {
            index: i,
            id: Some(format!("c{i}")),
            name: Some("wait".into()),
            arguments: "{}".into(),
        })
        .collect();
    let response = Response { frames: calls, finish: Some("tool_calls".into()), ..Response::default() };
    let mut spec = Spec::new(vec![response]);
    spec.script.responses[0].done = true;
    spec.tools = ToolSet::new().with(Arc::new(Blocking));
    spec.tool_concurrency = 2;
    spec.action = Some((300, Action::Cancel));
    let run = run_sim(&spec);
    Validator::validate_all(&run.records).unwrap();
    let tail: Vec<(String, String, Option<ErrorCode>)> = run
        .records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolCall(c) => Some(("call".to_owned(), c.call_id.clone(), None)),
            Event::ToolResult(t) => Some(("result".to_owned(), t.call_id.clone(), t.error.as_ref().map(|e| e.code))),
            _ => None,
        })
        .collect();
    let expected: Vec<(String, String, Option<ErrorCode>)> = vec![
        ("call".into(), "c0".into(), None),
        ("call".into(), "c1".into(), None),
        ("result".into(), "c0".into(), Some(ErrorCode::Aborted)),
        ("result".into(), "c1".into(), Some(ErrorCode::Aborted)),
        ("call".into(), "c2".into(), None),
        ("result".into(), "c2".into(), Some(ErrorCode::AbortedBeforeDispatch)),
        ("call".into(), "c3".into(), None),
        ("result".into(), "c3".into(), Some(ErrorCode::AbortedBeforeDispatch)),
    ];
    assert_eq!(tail, expected);
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Aborted { cause: AbortCause::User }]);
}

fn slow_text() -> Response {
    let mut response = Response::text(&["a", "b", "c", "d"]);
    response.frame_delay_ms = 100;
    response
}

#[test]
fn input_arriving_after_an_abort_starts_the_next_turn() {
    let mut spec = Spec::new(vec![slow_text(), Response::text(&["second"])]);
    spec.action = Some((150, Action::CancelThenSubmit));
    both(spec, |run, world| {
        assert_eq!(
            run.turn_ends(),
            vec![TurnEndReason::Aborted { cause: AbortCause::User }, TurnEndReason::Completed],
            "{world}"
        );
    });
}

#[test]
fn default_cancel_drops_queued_input_but_keep_inbox_runs_it() {
    let mut spec = Spec::new(vec![slow_text(), Response::text(&["queued"])]);
    spec.prompts = vec!["first", "queued"];
    spec.action = Some((150, Action::Cancel));
    both(spec.clone(), |run, world| {
        assert_eq!(
            run.turn_ends(),
            vec![TurnEndReason::Aborted { cause: AbortCause::User }],
            "{world}: the queue was cleared"
        );
    });
    spec.action = Some((150, Action::CancelKeepInbox));
    both(spec, |run, world| {
        assert_eq!(
            run.turn_ends(),
            vec![TurnEndReason::Aborted { cause: AbortCause::User }, TurnEndReason::Completed],
            "{world}"
        );
    });
}

#[test]
fn disposal_is_memoised_cancels_with_cause_disposed_and_refuses_new_input() {
    let mut spec = Spec::new(vec![slow_text()]);
    spec.action = Some((150, Action::Dispose));
    both(spec, |run, world| {
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Aborted { cause: AbortCause::Disposed }], "{world}");
        assert_eq!(run.second_dispose.as_deref(), Some("Ok(())"), "{world}: both callers see the same completion");
        assert!(!run.submit_after_dispose, "{world}: disposal never latches new work");
    });
}

#[test]
fn tool_results_feed_the_next_step_and_the_turn_completes() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![Response::tool_call("c1", "send", "{\"to\":\"team\"}"), Response::text(&["done"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    both(spec, |run, world| {
        assert_eq!(run.events("step/start").len(), 2, "{world}");
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
        let second: serde_json::Value = serde_json::from_str(&run.requests[1].body).unwrap();
        let messages = second["messages"].as_array().unwrap();
        assert_eq!(
            messages.last().unwrap(),
            &json!({"role": "tool", "tool_call_id": "c1", "content": "sent"}),
            "{world}"
        );
        // The tool/call was durable (flushed) before the body ran: it precedes the result.
        let call = run.events("tool/call")[0].seq;
        let result = run.events("tool/result")[0].seq;
        assert!(call < result);
    });
    assert_eq!(executions.load(Ordering::SeqCst), 2, "once per world");
}

#[test]
fn a_failing_tool_checkpoint_fails_closed() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![Response::tool_call("c1", "send", "{}"), Response::text(&["never"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    spec.fail_tool_call_appends = ToolCallAppends::FailAlways;
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 0, "no tool body runs without its durable intent");
    assert_eq!(run.requests.len(), 1, "and no further model request");
    // The failed batch held the assistant/message and the tool/call (one checkpoint flush):
    // neither is durable, so the durable log ends at the model-path checkpoint.
    assert!(run.events("tool/call").is_empty());
    assert!(run.events("assistant/message").is_empty());
    assert_eq!(run.records.last().map(|r| r.event.type_name()), Some("request/header"));
}

/// FAILURE-OUTCOME-DURABLE: the end of a turn is a flush barrier. A turn whose `turn/end`
/// cannot be made durable (the disk is full from there on) is reported as a `PERSIST` failure
/// naming ENOSPC, not kept, with what it reached in memory beside it; disposal, which flushes
/// again, fails too. Never "completed".
#[test]
fn a_turn_whose_end_is_not_durable_is_reported_as_a_persist_failure_not_completed() {
    let mut spec = Spec::new(vec![Response::text(&["Hello", " there."])]);
    spec.fail_type = Some("turn/end");
    both(spec, |run, world| {
        let outcome = run.last_outcome.clone().expect("the turn ended");
        assert!(!outcome.kept, "{world}: {outcome:?}");
        match &outcome.reason {
            TurnEndReason::Error { error } => {
                assert_eq!(error.code, ErrorCode::Persist, "{world}: {error:?}");
                assert!(error.message.starts_with("ENOSPC: "), "{world}: the disk error first: {}", error.message);
            }
            other => panic!("{world}: reported {other:?} for a turn that is not on disk"),
        }
        assert_eq!(outcome.reached, Some(TurnEndReason::Completed), "{world}: what it reached in memory");
        assert_eq!(outcome.text, "Hello there.", "{world}: what was shown is still handed back");
        assert!(run.disposed.is_err(), "{world}: disposal's flush fails on the same disk");
        assert!(run.turn_ends().is_empty(), "{world}: nothing of the turn's end is durable");
    });
}

/// A turn that cannot even be recorded to its end (the write-behind refuses its records: the
/// queue is full behind a failed batch) leaves its turn open in memory: the agent reports it
/// not kept, with no end reached, and refuses new input rather than start a turn inside it.
#[test]
fn a_turn_that_cannot_be_recorded_to_its_end_is_not_kept_and_the_agent_refuses_new_input() {
    let mut spec = Spec::new(vec![Response::text(&["x"; 64])]);
    // Every batch from the first chunk on fails, and the queue holds 8 records: the turn's
    // appends are refused with the paused batch's failure.
    spec.fail_type = Some("assistant/chunk");
    spec.pending_events_max = Some(8);
    let run = run_sim(&spec);
    let outcome = run.last_outcome.clone().expect("the turn ended");
    assert!(!outcome.kept, "{outcome:?}");
    assert_eq!(outcome.reached, None, "it never reached its end: {outcome:?}");
    assert!(
        matches!(&outcome.reason, TurnEndReason::Error { error } if error.code == ErrorCode::Persist),
        "{outcome:?}"
    );
    assert!(!run.submit_after_last, "a broken agent refuses new input");
    Validator::validate_all(&run.records).unwrap();
}

/// A checkpoint that fails once (a transient EIO the write-behind's retry gets past) stops
/// the step before any body runs, and still answers each call exactly once: the call whose
/// checkpoint failed, and every call after it, with ABORTED_BEFORE_DISPATCH.
#[test]
fn a_checkpoint_that_fails_once_answers_each_call_once_and_runs_none() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![two_calls(), Response::text(&["never"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    spec.fail_tool_call_appends = ToolCallAppends::FailOnce;
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 0, "no body ran after the failed checkpoint");
    Validator::validate_all(&run.records).unwrap();
    assert_eq!(run.tool_ids("tool/call"), ["c1", "c2"], "one durable intent per call");
    assert_eq!(run.tool_ids("tool/result"), ["c1:ABORTED_BEFORE_DISPATCH", "c2:ABORTED_BEFORE_DISPATCH"]);
    assert_eq!(run.requests.len(), 1, "the turn stopped: no further model request");
}

/// A cancel that arrives while a call's checkpoint flush is still in progress answers that
/// call ABORTED_BEFORE_DISPATCH once, never runs it, and leaves the calls before it (already
/// dispatched) to drain. Real runtime only: in turmoil the flush always completes first.
#[test]
fn a_cancel_during_a_checkpoint_flush_answers_that_call_once_and_never_runs_it() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![two_calls(), Response::text(&["never"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    spec.hold = Some(HeldAppend::new("c2"));
    spec.action = Some((0, Action::CancelWhileHeld));
    let run = run_real(&spec);
    Validator::validate_all(&run.records).unwrap();
    assert_eq!(executions.load(Ordering::SeqCst), 1, "c1 was dispatched before the cancel; c2 never ran");
    assert_eq!(run.tool_ids("tool/call"), ["c1", "c2"], "one intent per call");
    assert_eq!(run.tool_ids("tool/result"), ["c1:ok", "c2:ABORTED_BEFORE_DISPATCH"], "one answer per call");
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Aborted { cause: AbortCause::User }]);
    assert_eq!(run.requests.len(), 1, "no further model request");
}

#[test]
fn the_step_budget_ends_the_turn_with_a_summary() {
    let mut spec = Spec::new(vec![Response::tool_call("c1", "send", "{}")]);
    spec.script.repeat_last = true;
    spec.tools = ToolSet::new().with(Arc::new(Counting(Arc::default())));
    spec.max_steps = 2;
    spec.provider = policy("\"SERVER\"", 0.0);
    let run = run_sim(&spec);
    Validator::validate_all(&run.records).unwrap();
    match &run.turn_ends()[..] {
        [TurnEndReason::BudgetExhausted { budget, limit, summary }] => {
            assert_eq!((budget.as_str(), *limit), ("max_steps", 2));
            assert!(summary.contains("2 tool calls ran: send (ok), send (ok)"), "{summary}");
            assert!(summary.contains("Left undone"), "{summary}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run.requests.len(), 2, "retries aside, one request per step");
}

#[test]
fn invalid_tool_arguments_become_an_error_result_the_model_reads() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![Response::tool_call("c1", "send", "{not json"), Response::text(&["sorry"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 0);
    let second: serde_json::Value = serde_json::from_str(&run.requests[1].body).unwrap();
    let last = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "tool");
    assert!(last["content"].as_str().unwrap().contains("not valid JSON"), "{last}");
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
}

/// One response with two `send` calls, `c1` and `c2`.
fn two_calls() -> Response {
    let call = |index: u32, id: &str| Frame::ToolCall {
        index,
        id: Some(id.into()),
        name: Some("send".into()),
        arguments: "{}".into(),
    };
    Response {
        frames: vec![call(0, "c1"), call(1, "c2")],
        finish: Some("tool_calls".into()),
        done: true,
        ..Response::default()
    }
}

/// `send` with a required `to`: a call without it must not run.
struct Requiring(Arc<AtomicUsize>);

impl Tool for Requiring {
    fn schema(&self) -> ToolSchema {
        let parameters = json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]});
        ToolSchema { name: "send".into(), description: "send".into(), parameters }
    }
    fn call(&self, _: ToolInvocation, _: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { ToolOutput::Ok("sent".into()) })
    }
}

#[test]
fn a_call_missing_a_required_argument_is_an_error_result_and_never_runs() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![
        Response::tool_call("c1", "send", "{\"subject\":\"hi\"}"),
        Response::tool_call("c2", "send", "{\"to\":\"team\"}"),
        Response::text(&["sent it"]),
    ]);
    spec.tools = ToolSet::new().with(Arc::new(Requiring(executions.clone())));
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 1, "only the call that names `to` runs");
    let second: serde_json::Value = serde_json::from_str(&run.requests[1].body).unwrap();
    let answer = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(answer["tool_call_id"], "c1");
    assert!(answer["content"].as_str().unwrap().contains("missing required arguments: to"), "{answer}");
    let third: serde_json::Value = serde_json::from_str(&run.requests[2].body).unwrap();
    let answer = third["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((answer["tool_call_id"].as_str(), answer["content"].as_str()), (Some("c2"), Some("sent")));
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
}

/// FAILURE-LIMITS-AGREE counts a tool call's id, name and arguments, not only text: a call
/// whose arguments outgrow the answer limit ends its attempt RESPONSE_TOO_LARGE, and neither
/// the oversize message nor its call is stored or run.
#[test]
fn an_oversize_tool_call_ends_its_attempt_and_never_runs() {
    let executions = Arc::new(AtomicUsize::new(0));
    // The arguments arrive in a later fragment, without the id and name (as providers stream
    // them): every fragment counts, not only the first.
    let oversize = Response {
        frames: vec![
            Frame::ToolCall {
                index: 0,
                id: Some("c1".into()),
                name: Some("send".into()),
                arguments: "{\"to\":".into(),
            },
            Frame::ToolCall { index: 0, id: None, name: None, arguments: format!("\"{}\"}}", "x".repeat(5000)) },
        ],
        finish: Some("tool_calls".into()),
        done: true,
        ..Response::default()
    };
    let mut spec = Spec::new(vec![oversize, Response::text(&["never"])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    spec.answer_bytes_max = Some(4096);
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 0);
    assert!(run.events("tool/call").is_empty() && run.events("assistant/message").is_empty());
    match &run.turn_ends()[..] {
        [TurnEndReason::Error { error }] => assert_eq!(error.code, ErrorCode::ResponseTooLarge, "{error:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(run.requests.len(), 1, "RESPONSE_TOO_LARGE is never retried");
}

/// The limit is exact on a tool call too: its block (48 bytes), id, name and arguments at
/// the limit are kept and run; one byte more ends the attempt.
#[test]
fn a_tool_call_exactly_at_the_answer_limit_runs_and_one_byte_more_does_not() {
    const LIMIT: usize = 4096;
    // 48 for the block, 2 for `c1`, 4 for `send`, and the arguments as JSON escapes them
    // (each of their 4 quotes costs a backslash more).
    let at_limit = LIMIT - 48 - 2 - 4 - 4;
    for (arguments_bytes, runs) in [(at_limit, 1), (at_limit + 1, 0)] {
        let executions = Arc::new(AtomicUsize::new(0));
        let padding = "x".repeat(arguments_bytes - "{\"to\":\"\"}".len());
        let arguments = format!("{{\"to\":\"{padding}\"}}");
        let mut spec = Spec::new(vec![Response::tool_call("c1", "send", &arguments), Response::text(&["done"])]);
        spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
        spec.answer_bytes_max = Some(LIMIT);
        let run = run_sim(&spec);
        assert_eq!(executions.load(Ordering::SeqCst), runs, "{arguments_bytes} bytes of arguments");
        assert_eq!(run.events("tool/call").len(), runs, "{arguments_bytes} bytes of arguments");
    }
}

#[test]
fn resume_repairs_and_the_model_sees_the_unknown_outcome_without_a_rerun() {
    // A previous run crashed after the durable tool/call of c1, before its result.
    let mut log = Vec::new();
    let mut push = |event: Event, sources: Option<Vec<u64>>| {
        let mut record = Record::new(log.len() as u64, faultline_sim::seams::SIM_EPOCH_MS, event);
        record.source_seqs = sources;
        log.push(record);
    };
    push(Event::TurnStart(TurnStart { turn: 1 }), None);
    push(Event::StepStart(StepRef { turn: 1, step: 1 }), None);
    push(Event::UserMessage(UserMessage { message: Message::user_text("send it") }), None);
    let call = ContentBlock::tool_call("c1", "send", "{}");
    push(
        Event::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            message: Message { role: Role::Assistant, content: vec![call] },
            usage: None,
        }),
        Some(vec![]),
    );
    push(
        Event::ToolCall(ToolCall {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "send".into(),
            arguments: "{}".into(),
        }),
        None,
    );

    let executions = Arc::new(AtomicUsize::new(0));
    let mut spec = Spec::new(vec![Response::text(&["I will check first"])]);
    spec.preload = Some(log);
    spec.prompts = vec!["did it go out?"];
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    let run = run_sim(&spec);
    Validator::validate_all(&run.records).unwrap();
    assert_eq!(executions.load(Ordering::SeqCst), 0, "an unknown outcome is never re-run by the runtime");
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Interrupted, TurnEndReason::Completed]);
    let header = run.events("request/header");
    assert!(matches!(&header[0].event, Event::RequestHeader(h) if h.reason == HeaderReason::Initial));
    let body: serde_json::Value = serde_json::from_str(&run.requests[0].body).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").expect("the closer is a tool result");
    assert_eq!(tool["tool_call_id"], "c1");
    assert!(tool["content"].as_str().unwrap().contains("outcome is unknown"), "{tool}");
}

/// A refusal is the model's answer: one request, never retried (it used to be an
/// `EMPTY_RESPONSE`, retried and billed up to the budget), the turn completed, and the
/// outcome hands the refusal to the caller.
#[test]
fn a_refusal_ends_the_turn_completed_after_one_request_and_is_handed_back() {
    let refusal =
        Response { recorded: Some(faultline_sim::model_server::Recorded::OpenaiRefusal), ..Response::default() };
    let spec = Spec::new(vec![refusal, Response::text(&["never asked for"])]);
    both(spec, |run, world| {
        assert_eq!(run.requests.len(), 1, "{world}: never retried");
        assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed], "{world}");
        let outcome = run.last_outcome.clone().expect("the turn ended");
        assert_eq!(outcome.refusal.as_deref(), Some("I'm sorry, but I can't help with writing that."), "{world}");
        assert_eq!(outcome.text, "", "{world}");
        let message = run.events("assistant/message");
        let Event::AssistantMessage(message) = &message[0].event else { unreachable!() };
        assert_eq!(
            message.message.content,
            vec![ContentBlock::Refusal { text: "I'm sorry, but I can't help with writing that.".into() }],
            "{world}: its own block"
        );
    });
}

/// Tool calls without `index` (Mistral's shape) are kept, run, and answered: the stream is
/// not refused as malformed and the step is not retried.
#[test]
fn tool_calls_without_an_index_run_and_the_turn_goes_on() {
    let executions = Arc::new(AtomicUsize::new(0));
    let mut first = Response::tool_call("Kq3TzW8pA", "send", r#"{"to":"ops"}"#);
    first.dialect = faultline_sim::model_server::Dialect::Mistral;
    let mut spec = Spec::new(vec![first, Response::text(&["Sent."])]);
    spec.tools = ToolSet::new().with(Arc::new(Counting(executions.clone())));
    let run = run_sim(&spec);
    assert_eq!(executions.load(Ordering::SeqCst), 1, "the call ran once");
    assert_eq!(run.tool_ids("tool/result"), ["Kq3TzW8pA:ok"]);
    assert_eq!(run.requests.len(), 2, "no retry: the tool's result, then the answer");
    assert_eq!(run.turn_ends(), vec![TurnEndReason::Completed]);
}
