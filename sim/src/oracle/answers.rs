//! What a tool's result says against the tool's own record (FAILURE-USER-VIEW,
//! FAILURE-TOOL-TIMEOUT): a tool that returned an answer — within its deadline or after it,
//! inside the cancel's grace — was heard, so its call never reads as stopped before it
//! acted (`TOOL_TIMEOUT`, `ABORTED`). A model reading "did not finish" is invited to call
//! again an effect that may have happened.

use std::collections::BTreeMap;

use faultline_runtime::event::{ErrorCode, Event};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let Some(transcript) = evidence.transcript() else { return };
    let answered: BTreeMap<&str, (u64, u64)> =
        evidence.world.tool_answers.iter().map(|a| (a.execution_id.as_str(), (a.life, a.at_ms))).collect();
    if answered.is_empty() {
        return;
    }
    for record in transcript {
        let Event::ToolResult(result) = &record.event else { continue };
        let Some(code) = result.error.as_ref().map(|e| e.code) else { continue };
        if !matches!(code, ErrorCode::ToolTimeout | ErrorCode::Aborted) {
            continue;
        }
        let execution = super::effects::execution_id(result.turn, result.step, &result.call_id);
        if let Some(&(life, at_ms)) = answered.get(execution.as_str()) {
            found.fail(
                Invariant::AnswerHeard,
                format!(
                    "seq {}: execution {execution} reads {code} (stopped before it acted), but the tool answered at \
                     {at_ms} ms (agent#{life}) by its own record",
                    record.seq
                ),
                at_ms,
            );
        }
    }
}

/// Margin for the network between a server's answer and the client's deadline, in ms.
const MCP_ANSWER_MARGIN_MS: u64 = 100;

/// An MCP server's answer, given before the call's deadline and its cancel's grace ran out
/// on a connection nothing cut (written on an open stream, or held for the resumption its
/// priming event offered), is the call's result (FAILURE-MCP-TOOLS): never an unknown
/// outcome or a timeout.
pub(super) fn check_mcp(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let Some(transcript) = evidence.transcript() else { return };
    for answer in evidence.world.mcp_answers.iter().filter(|a| a.is_answer) {
        let call = transcript.iter().find(|r| {
            matches!(&r.event, Event::ToolCall(c) if super::effects::execution_id(c.turn, c.step, &c.call_id) == answer.execution_id)
        });
        let result = transcript.iter().find(|r| match &r.event {
            Event::ToolResult(res) => {
                super::effects::execution_id(res.turn, res.step, &res.call_id) == answer.execution_id
            }
            _ => false,
        });
        let (Some(call), Some(result)) = (call, result) else { continue };
        let Event::ToolResult(outcome) = &result.event else { continue };
        let code = outcome.error.as_ref().map(|e| e.code);
        // Only the call's own result (a crash's repair closer cites its tool/call), and only a
        // result that says no answer came.
        let unheard = matches!(code, Some(ErrorCode::ToolOutcomeUnknown | ErrorCode::ToolTimeout | ErrorCode::Aborted));
        if !unheard || result.source_seqs.is_some() {
            continue;
        }
        let (called_ms, settled_ms) = (sim_ms(call), sim_ms(result));
        let grace = faultline_runtime::mcp::MCP_CANCEL_GRACE_MS;
        let limit = answer.timeout_ms.map_or(u64::MAX, |t| called_ms + t + grace);
        let ready_ms = answer.at_ms + answer.held_for_resume_ms.unwrap_or(0) + MCP_ANSWER_MARGIN_MS;
        let cut = evidence.plan.faults.partitions.iter().any(|p| {
            let pair = [p.a.as_str(), p.b.as_str()];
            pair.contains(&"agent")
                && pair.contains(&answer.host.as_str())
                && p.from_ms <= settled_ms
                && p.to_ms >= called_ms
        });
        if ready_ms > limit || cut {
            continue;
        }
        let how = match answer.held_for_resume_ms {
            Some(retry) => format!("held it for a GET with Last-Event-ID after {retry} ms"),
            None => "wrote it on an open connection".to_owned(),
        };
        found.fail(
            Invariant::AnswerHeard,
            format!(
                "seq {}: execution {} reads {} (no answer), but {} answered at {} ms and {how}, before the call's \
                 deadline and grace ran out",
                result.seq,
                answer.execution_id,
                code.map_or_else(String::new, |c| c.to_string()),
                answer.host,
                answer.at_ms
            ),
            settled_ms,
        );
    }
}

fn sim_ms(record: &faultline_runtime::event::Record) -> u64 {
    record.time.saturating_sub(crate::seams::SIM_EPOCH_MS)
}
