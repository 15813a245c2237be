//! One turn: its steps and checkpoints (FAILURE-REQUEST-LOOP, FAILURE-CHECKPOINT-*,
//! FAILURE-TURN-BUDGETS); a step's model attempts and retries are `attempts.rs`, its tool
//! calls (approvals, the draining pool, commits) `calls.rs`.

mod attempts;
mod calls;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::history::History;
use super::state::Paused;
use super::state::{Shared, TurnOutcome};
use crate::approval::PendingApproval;
use crate::event::*;
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
