//! faultline runtime: an LLM tool-calling agent runtime with layered failure recovery.
//!
//! An [`Agent`](agent::Agent) runs turns against an OpenAI-compatible streaming endpoint (DeepSeek preset
//! included), calls tools, and writes every event to a durable session ([`Store`](store::Store): JSONL,
//! zstd, SQLite, or memory) before it acts on it. A crash at any point — SIGKILL mid-stream,
//! mid-tool, mid-write — leaves a transcript that the next start repairs: a torn tail is cut,
//! an interrupted turn is closed, and a tool call whose outcome cannot be known is answered
//! with an explicit `TOOL_OUTCOME_UNKNOWN` instead of being run twice. Side effects whose
//! receipt can be lost go through a delivery queue ([`Outbox`](outbox::Outbox)) that never resends blindly.
//!
//! The runtime is compiled against seams ([`Clock`](seams::Clock), [`Net`](seams::Net),
//! [`Fs`](seams::Fs), [`Entropy`](seams::Entropy), [`Process`](seams::Process)) so the same code runs in production ([`production::seams`], the default) and
//! inside the deterministic simulator of the `faultline-sim` crate.
//!
//! # Example
//!
//! One turn against a model server (here a tiny one started in the example itself, on
//! 127.0.0.1), with the session in memory:
//!
//! ```
//! use std::sync::Arc;
//! use faultline_runtime::{agent::Agent, store::MemoryStore, llm::ProviderConfig, store::SessionId, llm::StaticCredentials};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # runtime.block_on(async {
//! # let base_url = fake_model::serve("Hello from the model.").await;
//! let provider: ProviderConfig = toml::from_str(&format!(
//!     "preset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"m\""
//! ))?;
//! let route = provider.resolve("provider")?;
//! let seams = faultline_runtime::production::seams();
//! let store = MemoryStore::new(seams.process.clone());
//! let agent = Agent::builder(route, Arc::new(StaticCredentials::default()))
//!     .seams(seams)
//!     .start(&store, &SessionId::new("demo")?)?;
//! agent.submit("Say hello.")?;
//! agent.when_idle().await;
//! let outcome = agent.last_outcome().expect("the turn ended");
//! // Reported only once its `turn/end` is durable (a memory store: at once).
//! assert!(outcome.kept);
//! assert_eq!(outcome.text, "Hello from the model.");
//! agent.dispose().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! # mod fake_model {
//! #     use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! #     /// Answers one chat request with `text` as an SSE stream; returns the base URL.
//! #     pub async fn serve(text: &'static str) -> String {
//! #         let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #         let url = format!("http://{}/v1", listener.local_addr().unwrap());
//! #         tokio::spawn(async move {
//! #             let (mut socket, _) = listener.accept().await.unwrap();
//! #             let mut request = Vec::new();
//! #             let mut buf = [0u8; 4096];
//! #             loop {
//! #                 let n = socket.read(&mut buf).await.unwrap();
//! #                 request.extend_from_slice(&buf[..n]);
//! #                 let text = String::from_utf8_lossy(&request);
//! #                 if let Some(end) = text.find("\r\n\r\n") {
//! #                     let length: usize = text[..end].lines()
//! #                         .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
//! #                         .unwrap_or(0);
//! #                     if request.len() >= end + 4 + length { break; }
//! #                 }
//! #             }
//! #             let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
//! #                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
//! #             let stop = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
//! #                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
//! #             let body = format!("data: {chunk}\n\ndata: {stop}\n\ndata: [DONE]\n\n");
//! #             let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
//! #             socket.write_all(head.as_bytes()).await.unwrap();
//! #             socket.write_all(body.as_bytes()).await.unwrap();
//! #             socket.shutdown().await.unwrap();
//! #         });
//! #         url
//! #     }
//! # }
//! ```
//!
//! Every public item has one path: its module, by concern (`agent`, `event`, `llm`,
//! `mcp`, `outbox`, `store`, `seams`, `secrets`, `production`, `report`, `telemetry`), and the crate's error at
//! the root. `docs/embedding.md` ("Modules") says what each module is for;
//! `testing`, what the simulator reaches inside for, exists only with the `testing` feature.
#![warn(missing_docs)]

pub mod agent;
pub mod approval;
pub mod config;
mod error;
pub mod event;
pub mod llm;
pub mod mcp;
pub mod outbox;
pub mod production;
pub mod report;
pub mod seams;
pub mod secrets;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool;
// Without the feature the same module serves the runtime itself (the planted-bug switches),
// out of sight.
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod testing;

pub use error::{DatabaseError, Error, Result, SqliteError};
