//! A step's attempts at the model: a fresh request and assembler each time, retries inside
//! the step without committing partial output (FAILURE-REQUEST-LOOP, FAILURE-RETRY-EXECUTOR),
//! and the answer's size bound.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::agent::retry::{decide, RetryDecision};
use crate::event::*;
use crate::llm::assembler::Assembler;
use crate::llm::request_body;
use crate::seams::EntropyExt;
use crate::Result;

use super::TurnCtx;

impl TurnCtx<'_> {
    /// Attempts of one step: fresh request and assembler each time; only a terminal
    /// error/aborted consults the retry executor (FAILURE-REQUEST-LOOP).
    #[allow(clippy::type_complexity)]
    pub(super) async fn attempts(
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
            let span = crate::agent::spans::attempt(route, step, attempt);
            let finish =
                self.consume(&mut stream, (step, attempt), &mut assembler, &mut seqs).instrument(span.clone()).await?;
            drop(stream);
            let failure = match &finish {
                FinishReason::Stop | FinishReason::ToolCalls | FinishReason::MaxTokens => {
                    let (message, usage) = assembler.finish();
                    crate::agent::spans::attempt_ended(&span, &finish, usage.as_ref());
                    return Ok(Ok((message, usage, (seqs, finish))));
                }
                FinishReason::Aborted { .. } => {
                    crate::agent::spans::attempt_ended(&span, &finish, None);
                    return Ok(Err(self.aborted()));
                }
                FinishReason::Error { failure } => {
                    crate::agent::spans::attempt_ended(&span, &finish, None);
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
        let span = crate::agent::spans::retry_wait(step, retry, delay_ms, failure.code);
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
