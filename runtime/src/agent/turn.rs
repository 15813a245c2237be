//! One turn: steps, attempts, retries, tools, checkpoints (FAILURE-REQUEST-LOOP,
//! FAILURE-CHECKPOINT-*, FAILURE-TOOL-DRAIN, FAILURE-TURN-BUDGETS).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::history::History;
use super::retry::{decide, RetryDecision};
use super::state::Paused;
use super::state::{Shared, TurnOutcome};
use crate::approval::PendingApproval;
use crate::event::*;
use crate::llm::assembler::Assembler;
use crate::llm::request_body;
use crate::seams::EntropyExt;
use crate::tool::{run_with_deadline, CallOutcome, ToolInvocation};
use crate::{Error, Result};

/// Why a checkpoint did not pass.
enum Checkpoint {
    /// The turn's signal fired while the flush was pending.
    Cancelled,
    /// The flush failed: fail closed.
    Failed(Error),
}

/// A planned tool call of the committed message.
struct PlannedCall {
    call_id: String,
    name: String,
    arguments: String,
}

trait Planned {
    /// The call as the turn runs it.
    fn planned(&self) -> PlannedCall;
}

impl Planned for PendingApproval {
    fn planned(&self) -> PlannedCall {
        PlannedCall { call_id: self.call_id.clone(), name: self.name.clone(), arguments: self.arguments.clone() }
    }
}

impl PlannedCall {
    /// The calls an answer requests, in the model's order.
    fn all_of(message: &Message) -> Vec<PlannedCall> {
        message
            .tool_calls()
            .map(|(id, name, arguments)| PlannedCall {
                call_id: id.to_owned(),
                name: name.to_owned(),
                arguments: arguments.to_owned(),
            })
            .collect()
    }
}

/// How a turn ended: the outcome for the embedder, and the error that left the turn open
/// (an append refused before its `turn/end`), if one did.
pub(super) struct TurnEnded {
    pub outcome: TurnOutcome,
    pub broke: Option<Error>,
}

/// What a turn run starts from: a new user message, or a turn paused for approval.
pub(super) enum Start {
    /// A new turn for this message.
    Message(Message),
    /// The paused turn, continued.
    Paused(Paused),
}

/// Runs one turn for `message` (or continues a paused one) to its `turn/end`, then makes it
/// durable before reporting it (FAILURE-OUTCOME-DURABLE: the end of a turn is a flush
/// barrier). A turn that pauses for approval is flushed the same way before it says so.
pub(super) async fn run_turn(
    shared: &Arc<Shared>,
    history: &mut History,
    start: Start,
    cancel: CancellationToken,
) -> TurnEnded {
    let turn = match &start {
        Start::Message(_) => history.last_turn + 1,
        Start::Paused(paused) => paused.turn,
    };
    let span = super::spans::turn(&shared.seams.secrets, &shared.session_id, turn);
    let ended = async {
        let mut ctx = TurnCtx {
            shared,
            history,
            turn,
            cancel,
            calls: Vec::new(),
            answer: None,
            usage: Usage::default(),
            approved: Vec::new(),
        };
        let ended = match start {
            Start::Message(message) => ctx.run(message).await,
            Start::Paused(paused) => ctx.resume(paused).await,
        };
        let TurnCtx { answer, calls: tool_calls, usage, .. } = ctx;
        // The answer's text is copied out of its record only here, after the turn's records
        // were flushed and freed: at the stream's peak it is held once, by the log's queue.
        let outcome = |reason, kept, reached| {
            let (text, refusal) = answer_of(answer.as_deref());
            TurnOutcome { turn, reason, kept, reached, text, refusal, tool_calls, usage }
        };
        let reached = match ended {
            Ok(reason) => reason,
            Err(error) => {
                tracing::warn!("the turn could not be recorded to its end; the agent refuses new input");
                let mut failure = error.persist_failure("the turn could not be recorded to its end");
                shared.seams.secrets.scrub_failure(&mut failure);
                return TurnEnded {
                    outcome: outcome(TurnEndReason::Error { error: failure }, false, None),
                    broke: Some(error),
                };
            }
        };
        tracing::info!(reason = reached.kind(), "turn ended");
        if crate::testing::bugs::planted("outcome-before-durable") {
            return TurnEnded { outcome: outcome(reached, true, None), broke: None };
        }
        match shared.session.flush().await {
            Ok(()) => {
                if matches!(reached, TurnEndReason::AwaitingApproval { .. }) {
                    crate::seams::crash_point(shared.seams.probe.as_ref(), crate::seams::CrashPoint::AwaitingApproval)
                        .await;
                }
                TurnEnded { outcome: outcome(reached, true, None), broke: None }
            }
            Err(error) => {
                // The records stay queued (a later flush retries them); the turn is not kept.
                tracing::warn!("the turn's end is not durable; its records stay queued");
                shared.report(&error);
                let mut failure = error.persist_failure("the turn ended, but its records are not durable");
                shared.seams.secrets.scrub_failure(&mut failure);
                TurnEnded {
                    outcome: outcome(TurnEndReason::Error { error: failure }, false, Some(reached)),
                    broke: None,
                }
            }
        }
    }
    .instrument(span.clone())
    .await;
    super::spans::turn_ended(&span, &ended.outcome.reason, ended.outcome.kept, &ended.outcome.usage);
    ended
}

struct TurnCtx<'a> {
    shared: &'a Arc<Shared>,
    history: &'a mut History,
    turn: u32,
    cancel: CancellationToken,
    calls: Vec<(String, Option<ErrorCode>)>,
    /// The last step's assistant message, as the log accepted it (shared with its queue).
    answer: Option<Arc<Record>>,
    /// Tokens this turn's attempts reported.
    usage: Usage,
    /// Tools whose approved calls this turn dispatched (read only by the planted bug
    /// `decision-unbound`).
    approved: Vec<String>,
}

impl TurnCtx<'_> {
    /// The turn's records from `turn/start` to `turn/end`; the reason it reached.
    async fn run(&mut self, message: Message) -> Result<TurnEndReason> {
        self.emit(Event::TurnStart(TurnStart { turn: self.turn }), None).await?;
        let reason = self.steps(1, Some(message)).await?;
        self.end_turn(reason).await
    }

    /// The paused turn from its open step: its calls decided (or still waiting), the step
    /// ended, and the turn carried on to its end (FAILURE-APPROVAL). Nothing recorded before
    /// the pause runs again.
    async fn resume(&mut self, paused: Paused) -> Result<TurnEndReason> {
        let step = paused.step;
        let reason = match self.settle_approvals(step, paused.calls).await? {
            Some(reason @ TurnEndReason::AwaitingApproval { .. }) => reason,
            Some(reason) => {
                self.end_step(step).await?;
                reason
            }
            // A cancel closed what waited: the turn ends here, aborted.
            None if self.cancel.is_cancelled() => {
                self.end_step(step).await?;
                self.aborted()
            }
            None => {
                self.end_step(step).await?;
                self.steps(step + 1, None).await?
            }
        };
        self.end_turn(reason).await
    }

    /// The turn's `turn/end`, unless it paused: a paused turn stays open.
    async fn end_turn(&mut self, reason: TurnEndReason) -> Result<TurnEndReason> {
        if !matches!(reason, TurnEndReason::AwaitingApproval { .. }) {
            self.emit(Event::TurnEnd(TurnEnd { turn: self.turn, reason: reason.clone() }), None).await?;
        }
        Ok(reason)
    }

    async fn emit(&mut self, event: Event, sources: Option<Vec<u64>>) -> Result<u64> {
        self.emit_shared(event, sources).await.map(|record| record.seq)
    }

    /// [`TurnCtx::emit`], returning the accepted record (shared, not copied).
    async fn emit_shared(&mut self, event: Event, sources: Option<Vec<u64>>) -> Result<Arc<Record>> {
        // FAILURE-SECRETS: nothing the world sent (a tool's output, an echoed key) reaches the
        // log, or the next request built from it, with a secret in it.
        let event = self.shared.seams.secrets.scrub_event(event);
        let record = self.shared.session.append_shared(event, sources).await?;
        self.history.absorb_shared(&record);
        Ok(record)
    }

    fn aborted(&self) -> TurnEndReason {
        TurnEndReason::Aborted { cause: self.shared.abort_cause() }
    }

    async fn checkpoint(&self) -> std::result::Result<(), Checkpoint> {
        if self.cancel.is_cancelled() {
            return Err(Checkpoint::Cancelled);
        }
        tokio::select! {
            biased;
            flushed = self.shared.session.flush() => flushed.map_err(Checkpoint::Failed),
            () = self.cancel.cancelled() => Err(Checkpoint::Cancelled),
        }
    }

    /// The end of a turn whose checkpoint could not flush: a persistence failure, fail closed.
    fn checkpoint_failure(&self, error: &Error) -> TurnEndReason {
        let mut failure = error.persist_failure("checkpoint failed, nothing was dispatched");
        self.shared.seams.secrets.scrub_failure(&mut failure);
        TurnEndReason::Error { error: failure }
    }

    async fn end_step(&mut self, step: u32) -> Result<()> {
        self.emit(Event::StepEnd(StepRef { turn: self.turn, step }), None).await.map(|_| ())
    }

    async fn steps(&mut self, first: u32, message: Option<Message>) -> Result<TurnEndReason> {
        let max_steps = self.shared.config.max_steps;
        let mut user = message;
        for step in first.. {
            if step > max_steps {
                return Ok(self.budget_exhausted(max_steps));
            }
            let span = super::spans::step(self.turn, step);
            if let Some(reason) = self.step(step, user.take()).instrument(span).await? {
                return Ok(reason);
            }
        }
        unreachable!("the step loop returns")
    }

    /// One step: its request, its attempts, and its tool calls; the turn's end when the step
    /// ends it.
    async fn step(&mut self, step: u32, user: Option<Message>) -> Result<Option<TurnEndReason>> {
        self.emit(Event::StepStart(StepRef { turn: self.turn, step }), None).await?;
        if let Some(message) = user {
            self.emit(Event::UserMessage(UserMessage { message }), None).await?;
        }
        let route = self.shared.provider.snapshot();
        let prefix = RequestPrefix {
            model: route.model.clone(),
            system: self.shared.config.system.clone(),
            tools: self.shared.tools().schemas(),
        };
        self.write_header(&prefix).await?;
        // Model path checkpoint: the request prefix is durable before dispatch.
        match self.checkpoint().await {
            Ok(()) => {}
            Err(Checkpoint::Cancelled) => {
                self.end_step(step).await?;
                return Ok(Some(self.aborted()));
            }
            Err(Checkpoint::Failed(error)) => {
                self.end_step(step).await?;
                return Ok(Some(self.checkpoint_failure(&error)));
            }
        }
        crate::seams::crash_point(self.shared.seams.probe.as_ref(), crate::seams::CrashPoint::BeforeDispatch).await;
        let (message, usage, finish) = match self.attempts(step, &route, &prefix).await? {
            Ok(done) => done,
            Err(reason) => {
                self.end_step(step).await?;
                return Ok(Some(reason));
            }
        };
        // A refusal is the model's last word in its step: a call it streamed before refusing
        // (Anthropic's `refusal` stop inside a `tool_use` block) is cut, never run.
        let refused = message.content.iter().any(|b| matches!(b, crate::event::ContentBlock::Refusal { .. }));
        let calls = if refused && !crate::testing::bugs::planted("refused-call-run") {
            Vec::new()
        } else {
            PlannedCall::all_of(&message)
        };
        let (sources, finish_reason) = finish;
        let message = Event::AssistantMessage(AssistantMessage { turn: self.turn, step, message, usage });
        self.answer = Some(self.emit_shared(message, Some(sources)).await?);
        if finish_reason == FinishReason::MaxTokens {
            self.end_step(step).await?;
            return Ok(Some(TurnEndReason::MaxTokens));
        }
        if calls.is_empty() {
            self.end_step(step).await?;
            return Ok(Some(TurnEndReason::Completed));
        }
        let stopped = self.run_tools(step, calls).await?;
        if !matches!(stopped, Some(TurnEndReason::AwaitingApproval { .. })) {
            self.end_step(step).await?;
        }
        Ok(stopped)
    }

    /// The request prefix, written before the first dispatch of a session (`initial`, or
    /// `resume` after a restart) and again only when it changes.
    async fn write_header(&mut self, prefix: &RequestPrefix) -> Result<()> {
        let reason = if !self.shared.header_written() {
            Some(if self.history.last_header.is_some() { HeaderReason::Resume } else { HeaderReason::Initial })
        } else if self.history.last_header.as_ref() != Some(prefix) {
            Some(HeaderReason::Change)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.emit(Event::RequestHeader(RequestHeader { header: prefix.clone(), reason }), None).await?;
            self.shared.mark_header_written();
        }
        Ok(())
    }

    fn budget_exhausted(&self, limit: u32) -> TurnEndReason {
        let done = if self.calls.is_empty() {
            "no tool calls were made".to_owned()
        } else {
            let listed: Vec<String> = self
                .calls
                .iter()
                .map(|(name, code)| match code {
                    None => format!("{name} (ok)"),
                    Some(code) => format!("{name} ({code})"),
                })
                .collect();
            format!("{} tool calls ran: {}", listed.len(), listed.join(", "))
        };
        TurnEndReason::BudgetExhausted {
            budget: "max_steps".into(),
            limit,
            summary: format!(
                "Stopped after {limit} steps (the max_steps budget; retries inside a step are not counted). Achieved: {done}. Left undone: the model had not given a final answer and still wanted to act."
            ),
        }
    }

    /// Attempts of one step: fresh request and assembler each time; only a terminal
    /// error/aborted consults the retry executor (FAILURE-REQUEST-LOOP).
    #[allow(clippy::type_complexity)]
    async fn attempts(
        &mut self,
        step: u32,
        route: &Arc<crate::llm::ResolvedProvider>,
        prefix: &RequestPrefix,
    ) -> Result<std::result::Result<(Message, Option<Usage>, (Vec<u64>, FinishReason)), TurnEndReason>> {
        let mut retry_id: Option<String> = None;
        // Only read by the planted bug `cite-failed-attempts`.
        let mut all_seqs: Vec<u64> = Vec::new();
        let mut retries = 0u32;
        // Only read by the planted bug `unlogged-retry`.
        let mut silently_retried = false;
        for attempt in 1.. {
            tracing::debug!(step, attempt, "attempt started");
            let body = request_body(route, prefix, self.history.entries());
            let mut stream = self.shared.adapter.stream(route.clone(), body, self.cancel.clone());
            let mut assembler = Assembler::new();
            let mut seqs = if crate::testing::bugs::planted("cite-failed-attempts") {
                std::mem::take(&mut all_seqs)
            } else {
                Vec::new()
            };
            let span = super::spans::attempt(route, step, attempt);
            let finish =
                self.consume(&mut stream, (step, attempt), &mut assembler, &mut seqs).instrument(span.clone()).await?;
            drop(stream);
            let failure = match &finish {
                FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens => {
                    let (message, usage) = assembler.finish();
                    super::spans::attempt_ended(&span, &finish, usage.as_ref());
                    return Ok(Ok((message, usage, (seqs, finish))));
                }
                FinishReason::Aborted { .. } => {
                    super::spans::attempt_ended(&span, &finish, None);
                    return Ok(Err(self.aborted()));
                }
                FinishReason::Error { failure } => {
                    super::spans::attempt_ended(&span, &finish, None);
                    failure.clone()
                }
            };
            // Codes only: messages may quote what the server said.
            tracing::warn!(step, attempt, code = %failure.code, status = failure.status, "attempt failed");
            if crate::testing::bugs::planted("cite-failed-attempts") {
                all_seqs = seqs;
            }
            if self.cancel.is_cancelled() {
                return Ok(Err(self.aborted()));
            }
            // Planted: a transport-level reconnect that neither logs nor counts its attempt.
            if crate::testing::bugs::planted("unlogged-retry") && !silently_retried {
                silently_retried = true;
                continue;
            }
            retries += 1;
            let entropy = self.shared.seams.entropy.clone();
            match decide(&route.retry, &failure, retries, || entropy.unit_f64()) {
                RetryDecision::GiveUp => {
                    tracing::warn!(step, attempt, code = %failure.code, "giving up on the step");
                    return Ok(Err(TurnEndReason::Error { error: failure }));
                }
                RetryDecision::Retry { retry, delay_ms } => {
                    // One id per (turn, step): deterministic and unique within the session, and
                    // it draws nothing from Entropy, whose stream belongs to the jitter.
                    let id = retry_id.get_or_insert_with(|| format!("r{}.{step}", self.turn)).clone();
                    if !self.retry_after_wait(route, (step, retry, delay_ms), id, failure).await? {
                        return Ok(Err(self.aborted()));
                    }
                }
            }
        }
        unreachable!("the attempt loop returns")
    }

    /// Streams one attempt's chunks into the log and `assembler` (their seqs into `seqs`) up
    /// to the one terminal finish; an answer above the limit ends the attempt there.
    async fn consume(
        &mut self,
        stream: &mut crate::llm::ModelStream,
        (step, attempt): (u32, u32),
        assembler: &mut Assembler,
        seqs: &mut Vec<u64>,
    ) -> Result<FinishReason> {
        let mut answer_bytes = 0usize;
        while let Some(mut chunk) = stream.next().await {
            // FAILURE-LIMITS-AGREE: an answer that would not fit one record ends the attempt
            // here, before the chunk that overflows is appended.
            answer_bytes = answer_bytes.saturating_add(answer_bytes_of(&chunk));
            let limit = self.shared.config.answer_bytes_max;
            if answer_bytes > limit && !crate::testing::bugs::planted("no-answer-limit") {
                chunk = Chunk::finish(response_too_large(answer_bytes, limit));
            }
            if let Chunk::Usage { usage } = &chunk {
                self.usage.add(usage);
            }
            let done = assembler.push(&chunk);
            let seq = self
                .emit(Event::AssistantChunk(AssistantChunk { turn: self.turn, step, attempt, chunk }), None)
                .await?;
            if seqs.is_empty() {
                crate::seams::crash_point(self.shared.seams.probe.as_ref(), crate::seams::CrashPoint::MidStream).await;
            }
            seqs.push(seq);
            if let Some(reason) = done {
                return Ok(reason);
            }
        }
        unreachable!("a model stream always ends in finish")
    }

    /// FAILURE-RETRY-EXECUTOR's order: `llm/retry` appended, the cancellable wait, then
    /// `llm/retry-started`. Returns `false` when the wait was cancelled (nothing more written).
    async fn retry_after_wait(
        &mut self,
        route: &crate::llm::ResolvedProvider,
        (step, retry, delay_ms): (u32, u32, u64),
        retry_id: String,
        failure: Failure,
    ) -> Result<bool> {
        let max_retries = match &route.retry {
            crate::llm::RetryPolicy::Normal { max_retries, .. } => Some(*max_retries),
            crate::llm::RetryPolicy::Always { .. } => None,
        };
        let span = super::spans::retry_wait(step, retry, delay_ms, failure.code);
        let event = LlmRetry {
            retry_id: retry_id.clone(),
            turn: self.turn,
            step,
            provider: route.name.clone(),
            mode: route.retry.mode().to_owned(),
            policy_key: route.retry.policy_key(),
            retry,
            max_retries,
            delay_ms,
            failure,
        };
        self.emit(Event::LlmRetry(Box::new(event)), None).await?;
        tracing::info!(step, retry, delay_ms, "retrying the step");
        let waited = async {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => false,
                () = self.shared.seams.clock.sleep(Duration::from_millis(delay_ms)) => true,
            }
        };
        if !waited.instrument(span).await {
            return Ok(false);
        }
        self.emit(Event::LlmRetryStarted(LlmRetryStarted { retry_id, turn: self.turn, step, retry }), None).await?;
        Ok(true)
    }

    /// The bounded parallel pool (FAILURE-TOOL-DRAIN): on abort start nothing new, drain what
    /// was dispatched, commit results in model order, then write ordered synthetic
    /// `ABORTED_BEFORE_DISPATCH` call/result pairs for the rest. Returns a turn end reason
    /// when the turn must stop after this step.
    async fn run_tools(&mut self, step: u32, calls: Vec<PlannedCall>) -> Result<Option<TurnEndReason>> {
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
    async fn settle_approvals(&mut self, step: u32, calls: Vec<PendingApproval>) -> Result<Option<TurnEndReason>> {
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
        let span =
            super::spans::tool(&self.shared.seams.secrets, step, &call.name, &call.call_id, &invocation.execution_id);
        tokio::spawn(
            async move {
                let outcome = run_with_deadline(tool, invocation, &cancel, &clock).await;
                drop(permit);
                let code = outcome.error.as_ref().map(|e| e.code);
                super::spans::tool_ended(&tracing::Span::current(), code);
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

/// What `chunk` adds to the assistant message's encoded size, in bytes: its strings as JSON
/// escapes them, plus the structure a new block costs.
fn answer_bytes_of(chunk: &Chunk) -> usize {
    /// Bytes a block's tags and punctuation take in the message record.
    const BLOCK_OVERHEAD_BYTES: usize = 48;
    let escaped = crate::store::json_escaped_bytes;
    match chunk {
        Chunk::BlockStart { .. } => BLOCK_OVERHEAD_BYTES,
        Chunk::TextDelta { text, .. } | Chunk::ReasoningDelta { text, .. } | Chunk::RefusalDelta { text, .. } => {
            escaped(text)
        }
        Chunk::ToolCallDelta { id, name, arguments_delta, .. } => {
            id.as_deref().map_or(0, escaped) + name.as_deref().map_or(0, escaped) + escaped(arguments_delta)
        }
        Chunk::SignatureDelta { signature, .. } => escaped(signature),
        _ => 0,
    }
}

fn response_too_large(answer_bytes: usize, limit: usize) -> FinishReason {
    FinishReason::Error {
        failure: Failure::new(
            ErrorCode::ResponseTooLarge,
            format!(
                "the answer reached {answer_bytes} bytes, above the {limit}-byte answer limit (one session record holds at most {}); the attempt was ended before anything oversize was stored",
                crate::store::ANSWER_BYTES_MAX
            ),
        ),
    }
}

/// The text and the refusal of an assistant message record (empty and none without one).
fn answer_of(record: Option<&Record>) -> (String, Option<String>) {
    let Some(Event::AssistantMessage(message)) = record.map(|r| &r.event) else { return (String::new(), None) };
    let content = &message.message.content;
    let text = content
        .iter()
        .filter_map(|b| if let ContentBlock::Text { text } = b { Some(text.as_str()) } else { None })
        .collect();
    let refusal = content.iter().find_map(|b| match b {
        ContentBlock::Refusal { text } => Some(text.clone()),
        _ => None,
    });
    (text, refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_and_an_encrypted_thought_count_against_the_answer_limit() {
        // Anthropic's signatures and redacted thinking are stored with the message: an answer
        // of nothing else still fills its record, and the limit must see every byte.
        let signature = Chunk::SignatureDelta { index: 0, signature: "s".repeat(4096) };
        assert_eq!(answer_bytes_of(&signature), 4096);
        let escaped = Chunk::SignatureDelta { index: 0, signature: "\"".repeat(10) };
        assert_eq!(answer_bytes_of(&escaped), 20, "counted as JSON escapes them");
    }
}
