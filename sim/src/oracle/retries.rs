//! Retries against the model server's own request log: a step is retried no more than its
//! policy allows, never sooner than SPEC's backoff floor or the provider's advice, never after
//! a failure no policy retries; and every recorded failure carries the code of what the server
//! served, read by the oracle's own classifier (`served.rs`).

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{ErrorCode, Event, Record};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::{Invariant, Violation};
use super::limits::recorded_failure;
use super::served::{advice_ms, served_code};
use crate::model_server::{Exchange, Response};
use crate::world::ledger::{identical_runs, LedgerEntry};
use crate::world::seeded::Plan;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let (plan, end_ms) = (evidence.plan, evidence.end_ms);
    let entries = evidence.world.ledger.entries();
    // Retries per step within the scenario's policy, as the model server counted them: a
    // retry the runtime never logged is still a request that arrived.
    if let Some(max) = retries_allowed(plan) {
        for (start, len) in identical_runs(&entries) {
            let retries = len as u32 - 1;
            if retries > max {
                found.fail(
                    Invariant::RetryBudget,
                    format!(
                        "agent#{} sent one request {len} times in a row (model requests {start}..{}, by the \
                         server's count): {retries} retries of one step, the policy allows {max}",
                        entries[start].life,
                        start + len
                    ),
                    end_ms,
                );
            }
        }
    }
    let exchanges = evidence.exchanges;
    found.0.extend(retry_after_honoured(plan, &entries, exchanges));
    found.0.extend(final_failures_not_retried(plan, &entries, exchanges));
    found.0.extend(answers_not_retried(plan, &entries, exchanges));
    found.0.extend(backoff_respected(plan, &entries, exchanges));
    if let Some(transcript) = evidence.transcript() {
        let cut_off = |from_ms, to_ms| model_cut_off(plan, from_ms, to_ms);
        found.0.extend(failure_codes_as_served(plan, transcript, exchanges, &cut_off));
        found.0.extend(failures_not_taken_as_answers(plan, transcript, exchanges, &cut_off));
    }
}

/// A failure the script decides (an error status, an error event inside a 200 stream, a clean
/// end without the format's last event) is never taken as an answer: the first record that
/// settles its attempt, before the next request arrives, is a failure, not an
/// `assistant/message`.
fn failures_not_taken_as_answers(
    plan: &Plan,
    transcript: &[Record],
    exchanges: &[Exchange],
    cut_off: &impl Fn(u64, u64) -> bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, exchange) in exchanges.iter().enumerate() {
        let Some(code) = exchange.slot.and_then(|slot| plan.script.responses.get(slot)).and_then(served_code) else {
            continue;
        };
        let next_ms = exchanges.get(i + 1).map_or(u64::MAX, |e| e.at_ms);
        let settled = transcript.iter().find(|record| {
            let at_ms = record.time.saturating_sub(crate::seams::SIM_EPOCH_MS);
            (exchange.at_ms..next_ms).contains(&at_ms)
                && (recorded_failure(record).is_some() || matches!(record.event, Event::AssistantMessage(_)))
        });
        let Some(record) = settled.filter(|r| matches!(r.event, Event::AssistantMessage(_))) else { continue };
        let at_ms = record.time.saturating_sub(crate::seams::SIM_EPOCH_MS);
        if cut_off(exchange.at_ms, at_ms) {
            continue;
        }
        out.push(
            Violation::new(
                Invariant::FailureCodeAsServed,
                format!(
                    "model request {} was served {} ({} format), which means {code}, but seq {} took it as an \
                     answer",
                    exchange.n,
                    exchange.served,
                    exchange.format.name(),
                    record.seq
                ),
                at_ms,
            )
            .advised(format!(
                "A runtime defect in the {} stream reader: a failure the provider reported was taken as an answer; \
                 an error event or a stream cut before its last event must end the attempt with its code (FAILURE-ADAPTER-BOUNDARY).",
                exchange.format.name()
            )),
        );
    }
    out
}

/// The most retries per step any policy of the run allows (the scenario's, or a live update's
/// that parses), or `None` when one of them retries without bound (`always`).
fn retries_allowed(plan: &Plan) -> Option<u32> {
    let mut max = 0;
    for policy in run_policies(plan) {
        match policy {
            faultline_runtime::llm::RetryPolicy::Normal { max_retries, .. } => max = max.max(max_retries),
            _ => return None,
        }
    }
    Some(max)
}

/// A retry after a served failure whose Retry-After advice is within every policy's cap
/// arrives no sooner than the advice, by the model server's clock (the runtime's own delay record is not
/// consulted).
fn retry_after_honoured(plan: &Plan, entries: &[LedgerEntry], exchanges: &[Exchange]) -> Vec<Violation> {
    let Some(cap_ms) = run_policies(plan).iter().map(|policy| policy.backoff().max_delay_ms).min() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (response, served, next) in retries_of_served(plan, entries, exchanges) {
        let Some(advice_ms) = advice_ms(response, served.at_ms).filter(|&advice| advice <= cap_ms) else {
            continue;
        };
        let waited_ms = next.at_ms.saturating_sub(served.at_ms);
        if waited_ms < advice_ms {
            out.push(Violation::new(
                Invariant::RetryAfterHonoured,
                format!(
                    "model request {} was answered {} with a Retry-After of {advice_ms} ms, and its retry \
                     (request {}) arrived {waited_ms} ms later by the server's clock",
                    served.n,
                    response.status.map_or_else(|| "a failure".to_owned(), |s| format!("HTTP {s}")),
                    next.n
                ),
                next.at_ms,
            ));
        }
    }
    out
}

/// The least any policy of the run waits before retry `retry` (1-based) on its own, by
/// SPEC's formula `min(initial·2^(retry-1), max)·(1 − j)` computed here (not by the runtime's
/// `decide`), rounded down.
fn backoff_floor_ms(plan: &Plan, retry: u32) -> u64 {
    run_policies(plan)
        .iter()
        .map(|policy| {
            let backoff = policy.backoff();
            let doubled = backoff.initial_delay_ms as f64 * 2f64.powi(retry.saturating_sub(1).min(62) as i32);
            (doubled.min(backoff.max_delay_ms as f64) * (1.0 - backoff.jitter_ratio)).floor() as u64
        })
        .min()
        .unwrap_or(0)
}

/// Retry `k` of a step arrives at least the policy's backoff for `k` after the request it
/// repeats, by the model server's clock, unless that request was answered with provider
/// advice (`retry-after*`, held to its own rule above). The server's `k` never exceeds the
/// runtime's retry number (a refused connection is a retry the server never sees), and the
/// backoff only grows with it, so the bound is safe.
fn backoff_respected(plan: &Plan, entries: &[LedgerEntry], exchanges: &[Exchange]) -> Vec<Violation> {
    let slots = served_slots(exchanges);
    let advised = |served: &LedgerEntry| {
        slots
            .get(&served.n)
            .and_then(|&slot| plan.script.responses.get(slot))
            .is_some_and(|r| advice_ms(r, served.at_ms).is_some())
    };
    let mut out = Vec::new();
    for (start, len) in identical_runs(entries) {
        for k in 1..len {
            let (served, next) = (&entries[start + k - 1], &entries[start + k]);
            if advised(served) || model_cut_off(plan, served.at_ms, next.at_ms) {
                continue;
            }
            let floor_ms = backoff_floor_ms(plan, k as u32);
            let waited_ms = next.at_ms.saturating_sub(served.at_ms);
            if waited_ms < floor_ms {
                out.push(Violation::new(
                    Invariant::RetryBackoff,
                    format!(
                        "model request {} repeated request {} after {waited_ms} ms by the server's clock: \
                         retry {k} of a step waits at least {floor_ms} ms under the run's policies",
                        next.n, served.n
                    ),
                    next.at_ms,
                ));
            }
        }
    }
    out
}

/// A failure whose code no policy of the run lists as retryable ends its step: the next
/// request of that incarnation is not the same request again (by the model server's log).
fn final_failures_not_retried(plan: &Plan, entries: &[LedgerEntry], exchanges: &[Exchange]) -> Vec<Violation> {
    let mut retryable: BTreeSet<ErrorCode> = BTreeSet::new();
    for policy in run_policies(plan) {
        match policy {
            faultline_runtime::llm::RetryPolicy::Normal { codes, .. } => retryable.extend(codes),
            // `always` retries everything.
            _ => return Vec::new(),
        }
    }
    let mut out = Vec::new();
    for (response, served, next) in retries_of_served(plan, entries, exchanges) {
        let Some(code) = served_code(response).filter(|code| !retryable.contains(code)) else {
            continue;
        };
        out.push(Violation::new(
            Invariant::FinalFailureNotRetried,
            format!(
                "model request {} was served a {code} failure, which the policy does not retry, and \
                 request {} repeated it",
                served.n, next.n
            ),
            next.at_ms,
        ));
    }
    out
}

/// A complete answer ends its attempt well: the next request of that incarnation is never the
/// same request again (a refusal read as an empty response was retried, and billed, up to the
/// policy's budget).
fn answers_not_retried(plan: &Plan, entries: &[LedgerEntry], exchanges: &[Exchange]) -> Vec<Violation> {
    retries_of_served(plan, entries, exchanges)
        .into_iter()
        .filter(|(response, _, _)| super::served::is_complete_answer(response))
        .map(|(response, served, next)| {
            Violation::new(
                Invariant::AnswerNotRetried,
                format!(
                    "model request {} was served a complete answer ({}), and request {} repeated it",
                    served.n,
                    response.describe(),
                    next.n
                ),
                next.at_ms,
            )
        })
        .collect()
}

/// Whether a partition between the agent and the model overlapped `[from_ms, to_ms]` (server
/// clock, which starts with the run): a response served then may never have reached the
/// agent, which rightly saw a timeout or a broken stream instead of what was served.
pub(super) fn model_cut_off(plan: &Plan, from_ms: u64, to_ms: u64) -> bool {
    plan.faults.partitions.iter().any(|p| {
        let pair = [p.a.as_str(), p.b.as_str()];
        pair.contains(&"agent") && pair.contains(&"model") && p.from_ms <= to_ms && p.to_ms >= from_ms
    })
}

/// The retry policies of the run that resolve: the scenario's, and a live update's (an
/// invalid route sends nothing, so it bounds nothing).
fn run_policies(plan: &Plan) -> Vec<faultline_runtime::llm::RetryPolicy> {
    std::iter::once(&plan.provider)
        .chain(plan.faults.config_update.iter().map(|u| &u.provider))
        .filter_map(|provider| {
            crate::world::setup::resolve_route(plan.format, crate::world::setup::SIM_MODEL_ROOT, provider).ok()
        })
        .map(|route| route.retry)
        .collect()
}

/// The script slot each model request was served from, by request number.
fn served_slots(exchanges: &[Exchange]) -> BTreeMap<usize, usize> {
    exchanges.iter().filter_map(|e| Some((e.n, e.slot?))).collect()
}

/// Every request the same incarnation sent again right after it was served a scripted
/// response that reached the agent (no partition to the model in between): the response,
/// the served request and its repeat, by the model server's log.
fn retries_of_served<'a>(
    plan: &'a Plan,
    entries: &'a [LedgerEntry],
    exchanges: &[Exchange],
) -> Vec<(&'a Response, &'a LedgerEntry, &'a LedgerEntry)> {
    let slots = served_slots(exchanges);
    entries
        .windows(2)
        .filter(|pair| pair[1].repeats(&pair[0]) && !model_cut_off(plan, pair[0].at_ms, pair[1].at_ms))
        .filter_map(|pair| Some((&plan.script.responses[*slots.get(&pair[0].n)?], &pair[0], &pair[1])))
        .collect()
}

/// Every failure the agent wrote down — an `llm/retry`'s cause, a `turn/end` error — carries
/// the code of the response the model server served last before it, whenever the script alone
/// decides that code and the response reached the agent (no agent<->model partition between
/// them). An attempt is one request: the last request before the record is the failed one.
fn failure_codes_as_served(
    plan: &Plan,
    transcript: &[Record],
    exchanges: &[Exchange],
    cut_off: &impl Fn(u64, u64) -> bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    // The step's start, by the agent's clock: a request before it belongs to another step (a
    // turn that fails before sending anything, say, must not be held to the last turn's).
    let mut step_start_ms = 0;
    for record in transcript {
        if let Event::StepStart(_) = record.event {
            step_start_ms = record.time.saturating_sub(crate::seams::SIM_EPOCH_MS);
        }
        let Some((what, failure)) = recorded_failure(record) else { continue };
        let at_ms = record.time.saturating_sub(crate::seams::SIM_EPOCH_MS);
        let Some(last) = exchanges.iter().rev().find(|e| e.at_ms <= at_ms) else { continue };
        // A request that arrived in the record's own millisecond may be the next attempt.
        if last.at_ms == at_ms || last.at_ms < step_start_ms || cut_off(last.at_ms, at_ms) {
            continue;
        }
        let Some(expected) = last.slot.and_then(|slot| plan.script.responses.get(slot)).and_then(served_code) else {
            continue;
        };
        if failure.code != expected {
            out.push(Violation::new(
                Invariant::FailureCodeAsServed,
                format!(
                    "seq {} ({what}) records {}, but the request before it (model request {}, served {}) \
                     means {expected}",
                    record.seq, failure.code, last.n, last.served
                ),
                at_ms,
            ));
        }
    }
    out
}
