//! The cooperative tool deadline (FAILURE-TOOL-TIMEOUT, FAILURE-TIMEOUT-TEST) on tokio's paused
//! clock: the wrapper always awaits the tool and keeps what it says; TOOL_TIMEOUT only for a
//! tool that stopped on its signal before acting, and only if its own deadline fired first.
#![allow(clippy::disallowed_methods)] // drives tokio's paused clock

use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::event::{ContentBlock, ErrorCode, ToolSchema};
use faultline_runtime::production::SystemClock;
use faultline_runtime::testing::{run_with_deadline, CallOutcome};
use faultline_runtime::tool::{Tool, ToolInvocation, ToolOutput};
use faultline_runtime::{seams::BoxFuture, seams::Clock};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy)]
enum OnAbort {
    /// Returns `Aborted` as soon as its signal fires.
    Cooperate,
    /// "Throws": fails with an abort error.
    Fail,
    /// Panics.
    Panic,
    /// Finishes after `work_ms` no matter what.
    Ignore { work_ms: u64 },
}

struct Probe {
    on_abort: OnAbort,
    timeout_ms: Option<u64>,
    /// Cleanup waits for this gate before returning.
    gate: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Tool for Probe {
    fn schema(&self) -> ToolSchema {
        ToolSchema { name: "probe".into(), description: String::new(), parameters: serde_json::json!({}) }
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }
    fn call(&self, _: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let on_abort = self.on_abort;
        let gate = self.gate.lock().unwrap().take();
        Box::pin(async move {
            if let OnAbort::Ignore { work_ms } = on_abort {
                tokio::time::sleep(Duration::from_millis(work_ms)).await;
                return ToolOutput::Ok("finished anyway".into());
            }
            cancel.cancelled().await;
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            match on_abort {
                OnAbort::Cooperate => ToolOutput::Aborted("stopped".into()),
                OnAbort::Fail => ToolOutput::Failed("AbortError: the operation was aborted".into()),
                OnAbort::Panic => panic!("tool panicked on abort"),
                OnAbort::Ignore { .. } => unreachable!(),
            }
        })
    }
}

fn invocation() -> ToolInvocation {
    ToolInvocation {
        session: "s".into(),
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        arguments: serde_json::json!({}),
        execution_id: "s:1:1:c1".into(),
        session_epoch: 1,
    }
}

fn probe(on_abort: OnAbort, timeout_ms: Option<u64>) -> Arc<Probe> {
    Arc::new(Probe { on_abort, timeout_ms, gate: Mutex::new(None) })
}

fn code(outcome: &CallOutcome) -> Option<ErrorCode> {
    outcome.error.as_ref().map(|e| e.code)
}

async fn run(tool: Arc<Probe>, cancel: CancellationToken) -> CallOutcome {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    run_with_deadline(tool, invocation(), &cancel, &clock).await
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_tool_past_its_deadline_reports_tool_timeout() {
    let outcome = run(probe(OnAbort::Cooperate, Some(100)), CancellationToken::new()).await;
    assert_eq!(code(&outcome), Some(ErrorCode::ToolTimeout));
}

/// A tool that answers its deadline with a failure (or panics) said what happened; the
/// result is its word, never "stopped before it acted".
#[tokio::test(start_paused = true)]
async fn a_tool_that_throws_on_abort_reads_as_it_failed_not_as_a_timeout() {
    let outcome = run(probe(OnAbort::Fail, Some(100)), CancellationToken::new()).await;
    assert_eq!(code(&outcome), Some(ErrorCode::ToolFailed));
    let outcome = run(probe(OnAbort::Panic, Some(100)), CancellationToken::new()).await;
    assert_eq!(code(&outcome), Some(ErrorCode::ToolFailed), "a panic after the deadline is the tool's panic");
}

#[tokio::test(start_paused = true)]
async fn caller_abort_first_is_a_plain_abort_not_a_timeout() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let outcome = run(probe(OnAbort::Cooperate, Some(100)), cancel).await;
    assert_eq!(code(&outcome), Some(ErrorCode::Aborted));
    let cancel = CancellationToken::new();
    cancel.cancel();
    let outcome = run(probe(OnAbort::Fail, Some(100)), cancel).await;
    assert_eq!(code(&outcome), Some(ErrorCode::ToolFailed), "the tool's own abort error, not a timeout");
}

#[tokio::test(start_paused = true)]
async fn deadline_first_then_caller_abort_is_a_timeout() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let gate = oneshot::channel();
    let tool = Arc::new(Probe { on_abort: OnAbort::Cooperate, timeout_ms: Some(100), gate: Mutex::new(Some(gate.1)) });
    let running = tokio::spawn(run(tool, cancel));
    tokio::time::sleep(Duration::from_millis(150)).await;
    trigger.cancel(); // arrives after the deadline fired
    let _ = gate.0.send(());
    assert_eq!(code(&running.await.unwrap()), Some(ErrorCode::ToolTimeout));
}

#[tokio::test(start_paused = true)]
async fn the_timeout_result_waits_for_the_tools_slow_cleanup() {
    let (open, gate) = oneshot::channel();
    let tool = Arc::new(Probe { on_abort: OnAbort::Cooperate, timeout_ms: Some(100), gate: Mutex::new(Some(gate)) });
    let running = tokio::spawn(run(tool, CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    assert!(!running.is_finished(), "the wrapper never abandons a running tool");
    open.send(()).unwrap();
    assert_eq!(code(&running.await.unwrap()), Some(ErrorCode::ToolTimeout));
}

/// A tool that ignores its signal is awaited to the end, and the answer it gives then is the
/// call's result (FAILURE-MCP-TOOLS: "a call that may have acted never reads as not run").
#[tokio::test(start_paused = true)]
async fn a_tool_that_ignores_its_signal_is_awaited_and_its_answer_kept() {
    let clock = SystemClock::new();
    let started = clock.now();
    let outcome = run(probe(OnAbort::Ignore { work_ms: 1_000 }, Some(100)), CancellationToken::new()).await;
    assert!(clock.now().saturating_duration_since(started) >= Duration::from_millis(1_000));
    assert_eq!(code(&outcome), None);
    assert!(matches!(&outcome.content[..], [ContentBlock::Text { text }] if text == "finished anyway"), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_tool_without_a_deadline_runs_to_completion() {
    let outcome = run(probe(OnAbort::Ignore { work_ms: 10 }, None), CancellationToken::new()).await;
    assert_eq!(code(&outcome), None);
    let panicking = run(probe(OnAbort::Panic, None), {
        let c = CancellationToken::new();
        c.cancel();
        c
    })
    .await;
    assert_eq!(code(&panicking), Some(ErrorCode::ToolFailed), "a panic is an error result, never a crash");
    // The model is told it was a panic, not a generic failure (a cancelled task reads "failed").
    assert_eq!(panicking.error.as_ref().map(|e| e.name.as_str()), Some("panicked"));
    assert!(
        panicking.content.iter().any(|b| matches!(b, ContentBlock::Text { text } if text.contains("panicked"))),
        "{:?}",
        panicking.content
    );
}

/// A real command that ignores SIGTERM: after its deadline it gets SIGTERM, the grace period,
/// then SIGKILL, and the wrapper still awaits it; a process killed mid-run may have acted, so
/// the result is TOOL_OUTCOME_UNKNOWN, never "did not finish".
#[tokio::test]
async fn a_command_tool_that_ignores_sigterm_is_killed_after_the_grace_period() {
    use faultline_runtime::config::CommandToolConfig;
    use faultline_runtime::production::{CommandTool, COMMAND_KILL_GRACE_MS};
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("after-kill");
    let grandchild_s = (200 + COMMAND_KILL_GRACE_MS).div_ceil(1000) + 1;
    let tool = Arc::new(CommandTool::new(CommandToolConfig {
        name: "stubborn".into(),
        description: String::new(),
        parameters: serde_json::json!({"type": "object"}),
        // A grandchild in the same group outlives a kill of the shell alone and leaves the
        // marker a second after the SIGKILL is due: only a kill of the whole group keeps the
        // marker from appearing.
        command: vec![
            "sh".into(),
            "-c".into(),
            format!("trap '' TERM; (sleep {grandchild_s}; touch {}) & sleep 30", marker.display()),
        ],
        timeout_ms: Some(200),
        side_effects: true,
        via_outbox: false,
        env_allow: None,
        env_deny: Vec::new(),
        env_hidden: Vec::new(),
        sim: None,
        approval: Default::default(),
        approvers: Vec::new(),
        approval_deadline_ms: None,
    }));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let started = clock.now();
    let outcome = run_with_deadline(tool, invocation(), &CancellationToken::new(), &clock).await;
    let took = clock.now().saturating_duration_since(started);
    assert_eq!(code(&outcome), Some(ErrorCode::ToolOutcomeUnknown), "{outcome:?}");
    assert!(took >= Duration::from_millis(200 + COMMAND_KILL_GRACE_MS), "waited for the grace period: {took:?}");
    assert!(took < Duration::from_secs(20), "and then killed it: {took:?}");
    // Past the grandchild's sleep: had it survived, the marker would be there.
    tokio::time::sleep(Duration::from_millis(grandchild_s * 1000 + 1000).saturating_sub(took)).await;
    assert!(!marker.exists(), "the whole process group died, the backgrounded grandchild with it");
}

#[tokio::test]
async fn a_command_tool_returns_stdout_or_its_failure() {
    use faultline_runtime::config::CommandToolConfig;
    use faultline_runtime::production::CommandTool;
    let tool = |script: &str| {
        Arc::new(CommandTool::new(CommandToolConfig {
            name: "t".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            command: vec!["sh".into(), "-c".into(), script.into()],
            timeout_ms: None,
            side_effects: false,
            via_outbox: false,
            env_allow: None,
            env_deny: Vec::new(),
            env_hidden: Vec::new(),
            sim: None,
            approval: Default::default(),
            approvers: Vec::new(),
            approval_deadline_ms: None,
        }))
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let ok =
        run_with_deadline(tool("cat; echo \" $FAULTLINE_CALL_ID\""), invocation(), &CancellationToken::new(), &clock)
            .await;
    assert_eq!(ok, CallOutcome::ok("{} c1\n".into()));
    let failed =
        run_with_deadline(tool("echo oops >&2; exit 3"), invocation(), &CancellationToken::new(), &clock).await;
    assert_eq!(code(&failed), Some(ErrorCode::ToolFailed));
    assert!(format!("{:?}", failed.content).contains("oops"));
}

/// A real command that finishes cleanly on its SIGTERM, printing its answer: the answer that
/// arrives within the grace is the call's result.
#[tokio::test]
async fn a_command_tool_that_answers_its_sigterm_within_the_grace_is_heard() {
    use faultline_runtime::config::CommandToolConfig;
    use faultline_runtime::production::CommandTool;
    let tool = Arc::new(CommandTool::new(CommandToolConfig {
        name: "polite".into(),
        description: String::new(),
        parameters: serde_json::json!({"type": "object"}),
        command: vec!["sh".into(), "-c".into(), "trap 'echo wrote the file; exit 0' TERM; sleep 30 & wait".into()],
        timeout_ms: Some(200),
        side_effects: true,
        via_outbox: false,
        env_allow: None,
        env_deny: Vec::new(),
        env_hidden: Vec::new(),
        sim: None,
        approval: Default::default(),
        approvers: Vec::new(),
        approval_deadline_ms: None,
    }));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let outcome = run_with_deadline(tool, invocation(), &CancellationToken::new(), &clock).await;
    assert_eq!(code(&outcome), None, "{outcome:?}");
    assert!(
        matches!(&outcome.content[..], [ContentBlock::Text { text }] if text.contains("wrote the file")),
        "{outcome:?}"
    );
}
