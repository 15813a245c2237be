//! A receiver that is an external command: the payload on stdin, the execution id in
//! `FAULTLINE_EXECUTION_ID`. Exit 0 = delivered (stdout is the answer), exit 2 = refused
//! (stderr is the reason, nothing happened), anything else = the outcome is unknown.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;

use crate::config::ToolEnv;
use crate::outbox::{Deliverer, DeliveryError};
use crate::seams::BoxFuture;

/// Exit status a command uses to say "refused: nothing happened".
pub const EXIT_REFUSED: i32 = 2;

/// Delivers by running a command.
#[derive(Debug, Clone)]
pub struct CommandDeliverer {
    command: Vec<String>,
    env: ToolEnv,
}

impl CommandDeliverer {
    /// `command[0]` with `command[1..]` as arguments.
    pub fn new(command: Vec<String>) -> Self {
        assert!(!command.is_empty(), "a command needs a program");
        Self { command, env: ToolEnv::default() }
    }

    /// Runs the receiver with the environment `env` allows (at least: without the provider
    /// key variables).
    pub fn with_env(mut self, env: ToolEnv) -> Self {
        self.env = env;
        self
    }
}

impl Deliverer for CommandDeliverer {
    fn deliver(&self, execution_id: &str, payload: &str) -> BoxFuture<'static, Result<String, DeliveryError>> {
        let command = self.command.clone();
        let env = self.env.clone();
        let (execution_id, payload) = (execution_id.to_owned(), payload.to_owned());
        Box::pin(async move {
            let mut child = tokio::process::Command::new(&command[0]);
            super::command_tool::apply_env(&mut child, &env);
            let mut child = child
                .args(&command[1..])
                .env("FAULTLINE_EXECUTION_ID", &execution_id)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| DeliveryError::Rejected(format!("could not start {:?}: {e}", command[0])))?;
            if let Some(mut stdin) = child.stdin.take() {
                // A receiver that does not read its payload is its own business.
                let _ = stdin.write_all(payload.as_bytes()).await;
            }
            let output = child
                .wait_with_output()
                .await
                .map_err(|e| DeliveryError::Unknown(format!("waiting for the receiver: {e}")))?;
            let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            match output.status.code() {
                Some(0) => Ok(stdout),
                Some(EXIT_REFUSED) => Err(DeliveryError::Rejected(stderr)),
                code => Err(DeliveryError::Unknown(format!("receiver exited with {code:?}: {stderr}"))),
            }
        })
    }
}
