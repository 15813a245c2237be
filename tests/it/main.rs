//! The single end-to-end test binary of the workspace: drives the real `faultline` binary.

mod agent_run;
mod approvals;
mod bad_input;
mod chat;
mod cli;
mod cutting_proxy;
mod disk_full;
mod fleet;
mod hostile;
mod incident;
mod layout;
mod llm;
mod mcp;
mod outbox;
mod power_loss;
mod quickstart;
mod real;
mod shipped;
mod sigkill;
mod soak;
mod telemetry;
mod transcript;
mod your_agent;
mod your_agent_doc;
