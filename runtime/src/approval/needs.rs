//! `NeedsApproval`: any tool, each call of which waits for a person's decision first.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::policy::ApprovalPolicy;
use crate::event::ToolSchema;
use crate::seams::BoxFuture;
use crate::tool::{Tool, ToolInvocation, ToolOutput};

/// A tool that needs approval before each call: `inner` with `policy`.
pub struct NeedsApproval {
    inner: Arc<dyn Tool>,
    policy: ApprovalPolicy,
}

impl std::fmt::Debug for NeedsApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeedsApproval").field("tool", &self.inner.schema().name).field("policy", &self.policy).finish()
    }
}

impl NeedsApproval {
    /// `inner`, each call of which waits for a decision under `policy`.
    pub fn new(inner: Arc<dyn Tool>, policy: ApprovalPolicy) -> Self {
        Self { inner, policy }
    }
}

impl Tool for NeedsApproval {
    fn schema(&self) -> ToolSchema {
        self.inner.schema()
    }

    fn timeout(&self) -> Option<Duration> {
        self.inner.timeout()
    }

    fn approval(&self) -> Option<ApprovalPolicy> {
        Some(self.policy.clone())
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        self.inner.call(invocation, cancel)
    }
}
