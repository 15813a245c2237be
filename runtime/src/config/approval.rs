//! The approval keys an agent file gives a tool (`[[tools]]`) or an MCP server's tools
//! (`[[mcp_servers]]`): who may decide, and how long a call waits (FAILURE-APPROVAL).

use serde::Deserialize;

use crate::approval::{ApprovalPolicy, APPROVAL_DEADLINE_MS_MAX, APPROVAL_DECIDERS_MAX, APPROVAL_NAME_BYTES_MAX};
use crate::llm::ConfigError;

/// Whether a tool's calls wait for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Calls run at once.
    #[default]
    Never,
    /// Each call waits for an `approval/decided`.
    Required,
}

/// Checks `approvers` and `approval_deadline_ms` (given only when `required`), each within its
/// limits; `at` names a key's path.
pub(crate) fn check_approval_keys(
    required: bool,
    approvers: &[String],
    deadline_ms: Option<u64>,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let bad = |field: &str, message: String| Err(ConfigError { path: at(field), message });
    if !required && (!approvers.is_empty() || deadline_ms.is_some()) {
        return bad("approval", "approvers and approval_deadline_ms need calls that wait for approval".into());
    }
    if approvers.len() > APPROVAL_DECIDERS_MAX {
        return bad("approvers", format!("at most {APPROVAL_DECIDERS_MAX} names"));
    }
    if approvers.iter().any(|a| a.trim().is_empty() || a.len() > APPROVAL_NAME_BYTES_MAX) {
        return bad("approvers", format!("each name must be 1..={APPROVAL_NAME_BYTES_MAX} bytes"));
    }
    if deadline_ms.is_some_and(|ms| !(1..=APPROVAL_DEADLINE_MS_MAX).contains(&ms)) {
        return bad("approval_deadline_ms", format!("must be within 1..={APPROVAL_DEADLINE_MS_MAX}"));
    }
    Ok(())
}

/// The policy checked keys make.
pub(crate) fn policy(approvers: &[String], deadline_ms: Option<u64>) -> ApprovalPolicy {
    ApprovalPolicy::new(approvers.to_vec(), deadline_ms)
}
