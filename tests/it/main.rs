//! The single end-to-end test binary of the workspace: drives the real `faultline` binary.

mod cli;
mod llm;
mod transcript;
