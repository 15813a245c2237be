//! A step's tool calls: approvals asked and settled, the bounded pool that drains on abort
//! (FAILURE-TOOL-DRAIN), and results committed in the model's order.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::agent::state::Paused;
use crate::approval::PendingApproval;
use crate::event::*;
use crate::tool::{run_with_deadline, CallOutcome, ToolInvocation};
use crate::Result;

use super::{Checkpoint, Planned, PlannedCall, TurnCtx};

impl TurnCtx<'_> {
    /// The bounded parallel pool (FAILURE-TOOL-DRAIN): on abort start nothing new, drain what
    /// was dispatched, commit results in model order, then write ordered synthetic
    /// `ABORTED_BEFORE_DISPATCH` call/result pairs for the rest. Returns a turn end reason
    /// when the turn must stop after this step.
    pub(super) async fn run_tools(&mut self, step: u32, calls: Vec<PlannedCall>) -> Result<Option<TurnEndReason>> {
        let pool = Arc::new(Semaphore::new(self.shared.config.tool_concurrency));
        let mut dispatched: Vec<(usize, tokio::task::JoinHandle<CallOutcome>)> = Vec::new();
        let mut immediate: Vec<(usize, CallOutcome)> = Vec::new();
        let mut undispatched_from = calls.len();
        let mut stop: Option<TurnEndReason> = None;
        let mut awaiting: Vec<PendingApproval> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if self.cancel.is_cancelled() {
                undispatched_from = i;
                break;
            }
            let permit = tokio::select! {
                biased;
                () = self.cancel.cancelled() => { undispatched_from = i; break; }
                permit = pool.clone().acquire_owned() => permit.expect("the pool is never closed"),
            };
            let stored = self.emit_call(step, call).await?;
            // Tool path checkpoint: the intent is durable before the body runs.
            let checkpoint =
                if crate::testing::bugs::planted("tool-body-before-flush") { Ok(()) } else { self.checkpoint().await };
            match checkpoint {
                Ok(()) => {}
                Err(Checkpoint::Cancelled) => {
                    immediate.push((i, CallOutcome::aborted_before_dispatch()));
                    undispatched_from = i + 1;
                    break;
                }
                Err(Checkpoint::Failed(error)) => {
                    let why = self.shared.seams.secrets.scrub(&error.to_string());
                    let not_run = format!("not run: its intent could not be made durable ({why})");
                    immediate
                        .push((i, CallOutcome::error(ErrorCode::AbortedBeforeDispatch, "checkpoint_failed", not_run)));
                    undispatched_from = i + 1;
                    stop = Some(self.checkpoint_failure(&error));
                    break;
                }
            }
            crate::seams::crash_point(self.shared.seams.probe.as_ref(), crate::seams::CrashPoint::AfterToolCallFlush)
                .await;
            match self.prepare(step, call) {
                Err(outcome) => immediate.push((i, outcome)),
                Ok((tool, invocation)) => match self.approval_of(tool.as_ref(), &call.name) {
                    Some(policy) => awaiting.push(self.request_approval(step, call, &stored, &policy).await?),
                    None => dispatched.push((i, self.spawn_call(step, call, (tool, invocation), permit))),
                },
            }
        }
        self.drain_and_commit(step, &calls, immediate, dispatched, undispatched_from).await?;
        if !awaiting.is_empty() {
            if stop.is_none() {
                // Decided now (an approval taken in this process), closed (a cancel), or
                // paused: `AwaitingApproval` is the step's and the turn's stop.
                stop = self.settle_approvals(step, awaiting).await?;
            } else {
                // The turn ends here (a checkpoint failed): what waited is closed as never run.
                for call in awaiting {
                    self.commit_result(step, &call.planned(), CallOutcome::aborted_before_dispatch()).await?;
                }
            }
        }
        if stop.is_none() && self.cancel.is_cancelled() {
            stop = Some(self.aborted());
        }
        Ok(stop)
    }

    /// The approval rule of `tool`, if its calls wait for a person. (Planted
    /// `decision-unbound`: a tool this turn already dispatched an approved call of runs
    /// without asking again, its earlier decision taken for any arguments.)
    fn approval_of(&self, tool: &dyn crate::tool::Tool, name: &str) -> Option<crate::approval::ApprovalPolicy> {
        let policy = tool.approval()?;
        if crate::testing::bugs::planted("decision-unbound") && self.approved.iter().any(|n| n == name) {
            return None;
        }
        Some(policy)
    }

    /// Writes `approval/requested` for `call`, bound to the digest of the arguments its
    /// `tool/call` stored (`stored`, scrubbed as every record is).
    async fn request_approval(
        &mut self,
        step: u32,
        call: &PlannedCall,
        stored: &str,
        policy: &crate::approval::ApprovalPolicy,
    ) -> Result<PendingApproval> {
        let deadline_ms = policy.deadline_ms.map(|ms| self.shared.seams.clock.now_ms().saturating_add(ms));
        let requested = ApprovalRequested {
            turn: self.turn,
            step,
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            digest: arguments_digest(stored),
            deciders: policy.deciders.clone(),
            deadline_ms,
        };
        self.emit(Event::ApprovalRequested(requested.clone()), None).await?;
        tracing::info!(step, tool = %call.name, "tool call waits for approval");
        Ok(PendingApproval {
            turn: self.turn,
            step,
            call_id: requested.call_id,
            name: requested.name,
            arguments: stored.to_owned(),
            digest: requested.digest,
            deciders: requested.deciders,
            deadline_ms,
            decision: None,
            dispatched: false,
        })
    }

    /// Each call that waited for approval, in order: an approved one dispatched once, a denied
    /// or expired one answered as never run, one still undecided kept waiting. Returns
    /// `AwaitingApproval` (the step and the turn stay open) while any waits, the end of a turn
    /// a failed checkpoint stopped, else `None`: the step is done.
    pub(super) async fn settle_approvals(
        &mut self,
        step: u32,
        calls: Vec<PendingApproval>,
    ) -> Result<Option<TurnEndReason>> {
        let now = self.shared.seams.clock.now_ms();
        let mut waiting = Vec::new();
        let mut stop = None;
        for call in calls {
            let planned = call.planned();
            if self.cancel.is_cancelled() || stop.is_some() {
                let text = "not run: the turn ended while this call waited for approval";
                let outcome = CallOutcome::error(ErrorCode::AbortedBeforeDispatch, "approval_cancelled", text);
                self.commit_result(step, &planned, outcome).await?;
                continue;
            }
            match &call.decision {
                Some((Decision::Approved, ..)) => stop = self.dispatch_approved(step, &call).await?,
                Some((Decision::Denied, by, reason)) => {
                    let why = reason.as_deref().map_or_else(String::new, |r| format!(": {r}"));
                    let text = format!("not run: {by} denied this call{why}");
                    let outcome = CallOutcome::error(ErrorCode::ApprovalDenied, "approval_denied", text);
                    self.commit_result(step, &planned, outcome).await?;
                }
                None if call.deadline_ms.is_some_and(|deadline| now >= deadline) => {
                    let text = "not run: nobody decided on this call before its approval deadline";
                    let outcome = CallOutcome::error(ErrorCode::ApprovalExpired, "approval_expired", text);
                    self.commit_result(step, &planned, outcome).await?;
                }
                None => waiting.push(call),
            }
        }
        if let Some(stop) = stop {
            return Ok(Some(stop));
        }
        if waiting.is_empty() {
            return Ok(None);
        }
        let calls = waiting.iter().map(|c| c.call_id.clone()).collect();
        self.shared.set_paused(Some(Paused { turn: self.turn, step, calls: waiting }));
        Ok(Some(TurnEndReason::AwaitingApproval { calls }))
    }

    /// An approved call, consumed: `approval/dispatched` durable, then its body, once. Returns
    /// the turn's end when the checkpoint before the body failed.
    async fn dispatch_approved(&mut self, step: u32, call: &PendingApproval) -> Result<Option<TurnEndReason>> {
        // Only an approved call is ever dispatched (FAILURE-APPROVAL): the writer never makes
        // the `approval/dispatched` the validator would refuse.
        debug_assert!(
            matches!(call.decision, Some((Decision::Approved, ..))),
            "call {} dispatched with decision {:?}",
            call.call_id,
            call.decision
        );
        let planned = call.planned();
        if arguments_digest(&call.arguments) != call.digest {
            let text = "not run: its approval is bound to other arguments";
            self.commit_result(step, &planned, CallOutcome::error(ErrorCode::ToolFailed, "approval_unbound", text))
                .await?;
            return Ok(None);
        }
        // Planted `approval-redispatch`: crash repair left a dispatched call waiting, and here
        // its body runs again without a second record.
        if !call.dispatched {
            let dispatched = ApprovalDispatched {
                turn: self.turn,
                step,
                call_id: call.call_id.clone(),
                digest: call.digest.clone(),
            };
            self.emit(Event::ApprovalDispatched(dispatched), None).await?;
        }
        let checkpoint =
            if crate::testing::bugs::planted("dispatch-before-durable") { Ok(()) } else { self.checkpoint().await };
        match checkpoint {
            Ok(()) => {}
            Err(Checkpoint::Cancelled) => {
                self.commit_result(step, &planned, CallOutcome::aborted_before_dispatch()).await?;
                return Ok(None);
            }
            Err(Checkpoint::Failed(error)) => {
                let why = self.shared.seams.secrets.scrub(&error.to_string());
                let not_run = format!("not run: its dispatch could not be made durable ({why})");
                let outcome = CallOutcome::error(ErrorCode::AbortedBeforeDispatch, "checkpoint_failed", not_run);
                self.commit_result(step, &planned, outcome).await?;
                return Ok(Some(self.checkpoint_failure(&error)));
            }
        }
        crate::seams::crash_point(self.shared.seams.probe.as_ref(), crate::seams::CrashPoint::AfterToolCallFlush).await;
        let outcome = match self.prepare(step, &planned) {
            Err(outcome) => outcome,
            Ok(prepared) => {
                let permit = Arc::new(Semaphore::new(1)).acquire_owned().await.expect("a new pool is open");
                self.spawn_call(step, &planned, prepared, permit)
                    .await
                    .unwrap_or_else(|_| CallOutcome::error(ErrorCode::ToolFailed, "panicked", "the tool's task failed"))
            }
        };
        self.approved.push(call.name.clone());
        self.commit_result(step, &planned, outcome).await?;
        Ok(None)
    }

    /// Runs a call's body on a task of its own under its cooperative deadline, holding its
    /// place in the pool until it ends.
    fn spawn_call(
        &self,
        step: u32,
        call: &PlannedCall,
        (tool, invocation): (Arc<dyn crate::tool::Tool>, ToolInvocation),
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> tokio::task::JoinHandle<CallOutcome> {
        let cancel = self.cancel.clone();
        let clock = self.shared.seams.clock.clone();
        let span = crate::agent::spans::tool(
            &self.shared.seams.secrets,
            step,
            &call.name,
            &call.call_id,
            &invocation.execution_id,
        );
        tokio::spawn(
            async move {
                let outcome = run_with_deadline(tool, invocation, &cancel, &clock).await;
                drop(permit);
                let code = outcome.error.as_ref().map(|e| e.code);
                crate::agent::spans::tool_ended(&tracing::Span::current(), code);
                tracing::info!(error = code.map_or_else(|| "none".to_owned(), |c| c.to_string()), "tool call ended");
                outcome
            }
            .instrument(span),
        )
    }

    /// The drain: every dispatched call is awaited, whatever happened to the turn; results are
    /// committed in model order, then every call never dispatched gets its ordered
    /// `tool/call` and `ABORTED_BEFORE_DISPATCH` result.
    async fn drain_and_commit(
        &mut self,
        step: u32,
        calls: &[PlannedCall],
        mut outcomes: Vec<(usize, CallOutcome)>,
        dispatched: Vec<(usize, tokio::task::JoinHandle<CallOutcome>)>,
        undispatched_from: usize,
    ) -> Result<()> {
        for (i, handle) in dispatched {
            let outcome = handle
                .await
                .unwrap_or_else(|_| CallOutcome::error(ErrorCode::ToolFailed, "panicked", "the tool's task failed"));
            outcomes.push((i, outcome));
        }
        outcomes.sort_by_key(|(i, _)| *i);
        for (i, outcome) in outcomes {
            self.commit_result(step, &calls[i], outcome).await?;
        }
        for call in &calls[undispatched_from..] {
            self.emit_call(step, call).await?;
            self.commit_result(step, call, CallOutcome::aborted_before_dispatch()).await?;
        }
        Ok(())
    }

    /// Records the durable intent of `call` (its `tool/call`); returns the arguments as stored
    /// (scrubbed of held secrets).
    async fn emit_call(&mut self, step: u32, call: &PlannedCall) -> Result<String> {
        let event = ToolCall {
            turn: self.turn,
            step,
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        let record = self.emit_shared(Event::ToolCall(event), None).await?;
        let Event::ToolCall(stored) = &record.event else { unreachable!("a tool/call was appended") };
        Ok(stored.arguments.clone())
    }

    async fn commit_result(&mut self, step: u32, call: &PlannedCall, outcome: CallOutcome) -> Result<()> {
        self.calls.push((call.name.clone(), outcome.error.as_ref().map(|e| e.code)));
        let result = ToolResult {
            turn: self.turn,
            step,
            call_id: call.call_id.clone(),
            is_error: outcome.error.is_some(),
            content: outcome.content,
            error: outcome.error,
        };
        self.emit(Event::ToolResult(result), None).await.map(|_| ())
    }

    /// Finds the tool and checks the arguments; a bad call becomes an error result the model
    /// can read, never a crash.
    fn prepare(
        &self,
        step: u32,
        call: &PlannedCall,
    ) -> std::result::Result<(Arc<dyn crate::tool::Tool>, ToolInvocation), CallOutcome> {
        let tools = self.shared.tools();
        let Some(tool) = tools.get(&call.name) else {
            return Err(CallOutcome::error(
                ErrorCode::ToolFailed,
                "unknown_tool",
                format!("there is no tool named {:?}", call.name),
            ));
        };
        let mut arguments: serde_json::Value =
            serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments }).map_err(
                |e| {
                    CallOutcome::error(
                        ErrorCode::ToolFailed,
                        "invalid_arguments",
                        format!("the arguments are not valid JSON ({e}); the tool did not run"),
                    )
                },
            )?;
        // What the tool (and a receiver, through the queue) gets is scrubbed after parsing.
        self.shared.seams.secrets.scrub_json(&mut arguments);
        let Some(object) = arguments.as_object() else {
            return Err(CallOutcome::error(
                ErrorCode::ToolFailed,
                "invalid_arguments",
                "the arguments must be a JSON object; the tool did not run",
            ));
        };
        let schema = tool.schema();
        if let Some(required) = schema.parameters.get("required").and_then(|r| r.as_array()) {
            let missing: Vec<&str> =
                required.iter().filter_map(|r| r.as_str()).filter(|r| !object.contains_key(*r)).collect();
            if !missing.is_empty() {
                return Err(CallOutcome::error(
                    ErrorCode::ToolFailed,
                    "invalid_arguments",
                    format!("missing required arguments: {}; the tool did not run", missing.join(", ")),
                ));
            }
        }
        let session = self.shared.session_id.clone();
        let execution_id = crate::store::execution_id(&session, self.turn, step, &call.call_id);
        Ok((
            tool.clone(),
            ToolInvocation {
                session,
                turn: self.turn,
                step,
                call_id: call.call_id.clone(),
                arguments,
                execution_id,
                session_epoch: self.shared.session_epoch,
            },
        ))
    }
}
