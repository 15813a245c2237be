//! The embeddable agent: turns and steps over a durable session, retries inside a step
//! (FAILURE-REQUEST-LOOP, FAILURE-RETRY-EXECUTOR), tools with cooperative timeouts and a
//! draining pool (FAILURE-TOOL-TIMEOUT, FAILURE-TOOL-DRAIN), semantic checkpoints
//! (FAILURE-CHECKPOINT-*), cancellation with a wake latch (FAILURE-AGENT-CANCEL), memoised
//! disposal (FAILURE-AGENT-DISPOSAL), and resume after a crash (FAILURE-CRASH-REPAIR); see
//! docs/internals/requirements.md.
//!
//! ```no_run
//! # async fn demo(agent: faultline_runtime::agent::Agent) -> faultline_runtime::Result<()> {
//! agent.submit("summarise the report")?;
//! agent.when_idle().await;
//! println!("{:?}", agent.last_outcome());
//! agent.dispose().await?;
//! # Ok(()) }
//! ```

mod builder;
mod handle;
pub(crate) mod history;
pub(crate) mod retry;
mod spans;
mod state;
mod turn;

pub use builder::{AgentBuilder, ProviderRoute};
pub use handle::{Agent, Open};
pub use state::{AgentConfig, TurnOutcome, INBOX_MESSAGES_MAX, MAX_STEPS_DEFAULT, TOOL_CONCURRENCY_DEFAULT};
