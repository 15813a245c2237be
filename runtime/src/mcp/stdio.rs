//! An MCP server over stdio: a child started through the `Process` seam, one JSON-RPC
//! message per line each way. A reader task routes each response to the request waiting for
//! it and answers the server's pings; anything that is not a message ends the connection
//! (a line that cannot be read cannot be attributed, so whatever waits is told its outcome
//! is unknown rather than left to wait).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use super::jsonrpc::{self, Incoming, MCP_MESSAGE_BYTES_MAX};
use super::transport::{Answer, Lost, Transport};
use crate::seams::{BoxFuture, ChildControl, SpawnedChild};

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// What the reader shares with the senders.
#[derive(Default)]
struct Shared {
    waiting: Mutex<BTreeMap<u64, oneshot::Sender<Answer>>>,
    /// Why the connection ended, once it has.
    ended: Mutex<Option<String>>,
    usable: AtomicBool,
}

impl Shared {
    fn end(&self, why: String) {
        self.usable.store(false, Ordering::SeqCst);
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.get_or_insert(why);
        // Dropping the senders wakes every waiter with "no answer".
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn why_ended(&self) -> String {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.clone().unwrap_or_else(|| "the server's output ended".into())
    }
}

/// A running stdio server.
pub(crate) struct Stdio {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    shared: Arc<Shared>,
    control: Box<dyn ChildControl>,
    reader: tokio::task::JoinHandle<()>,
}

impl Stdio {
    /// Takes over a started child.
    pub fn new(child: SpawnedChild) -> Self {
        let writer: Arc<tokio::sync::Mutex<Writer>> = Arc::new(tokio::sync::Mutex::new(child.stdin));
        let shared = Arc::new(Shared::default());
        shared.usable.store(true, Ordering::SeqCst);
        let reader = tokio::spawn(read_loop(child.stdout, shared.clone(), writer.clone()));
        Self { writer, shared, control: child.control, reader }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        self.reader.abort();
        self.control.kill();
    }
}

async fn write_line(writer: &tokio::sync::Mutex<Writer>, message: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut writer = writer.lock().await;
    writer.write_all(&line).await?;
    writer.flush().await
}

/// Reads messages until the output ends or a line is not one; then ends the connection.
async fn read_loop(
    stdout: Box<dyn AsyncRead + Send + Unpin>,
    shared: Arc<Shared>,
    writer: Arc<tokio::sync::Mutex<Writer>>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        let limit = (MCP_MESSAGE_BYTES_MAX + 1) as u64;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => break "the server closed its output (it exited)".to_owned(),
            Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 >= limit => {
                break format!("the server wrote a line above the {MCP_MESSAGE_BYTES_MAX}-byte limit");
            }
            Ok(_) => {}
            Err(e) => break format!("reading the server's output: {e}"),
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match jsonrpc::parse(text) {
            Ok(Incoming::Response { id, outcome }) => {
                let waiter = shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(outcome);
                }
            }
            Ok(Incoming::Request { id, method }) => {
                let answer = if method == "ping" {
                    Ok(serde_json::json!({}))
                } else {
                    Err((jsonrpc::METHOD_NOT_FOUND, "this client offers no such method"))
                };
                if write_line(&writer, &jsonrpc::reply(&id, answer)).await.is_err() {
                    break "writing to the server failed".to_owned();
                }
            }
            Ok(Incoming::Notification) => {}
            Err(why) => break format!("the server wrote something that is not a JSON-RPC message ({why})"),
        }
    };
    shared.end(why);
}

impl Transport for Stdio {
    fn exchange(&self, id: u64, message: Value) -> BoxFuture<'_, Result<Answer, Lost>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(Lost::NotSent(self.shared.why_ended()));
            }
            let (sender, receiver) = oneshot::channel();
            self.shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, sender);
            if !self.usable() {
                // It ended between the check and the insert, after its waiters were told.
                self.shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                return Err(Lost::NotSent(self.shared.why_ended()));
            }
            if let Err(e) = write_line(&self.writer, &message).await {
                // The line ends with its newline, so a write that failed left no whole
                // message for the server to read.
                self.shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                return Err(Lost::NotSent(format!("writing to the server: {e}")));
            }
            // A connection that ends from now on drops the sender, so this never waits on a
            // dead server.
            receiver.await.map_err(|_| Lost::MaybeArrived(self.shared.why_ended()))
        })
    }

    fn notify(&self, message: Value) -> BoxFuture<'_, Result<(), Lost>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(Lost::NotSent(self.shared.why_ended()));
            }
            write_line(&self.writer, &message).await.map_err(|e| Lost::NotSent(format!("writing to the server: {e}")))
        })
    }

    fn usable(&self) -> bool {
        self.shared.usable.load(Ordering::SeqCst)
    }
}
