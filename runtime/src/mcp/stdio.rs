//! An MCP server over stdio: a child started through the `Process` seam, one JSON-RPC
//! message per line each way. A reader task routes each response to the request waiting for
//! it and answers the server's pings (from tasks of their own, so reading never waits on
//! writing); anything that is not a message ends the connection (a line that cannot be read
//! cannot be attributed, so whatever waits is told its outcome is unknown rather than left to
//! wait). A message cut off mid-write ends it too: the stream could not be trusted after it.

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
struct Shared {
    waiting: Mutex<BTreeMap<u64, oneshot::Sender<Answer>>>,
    /// Why the connection ended, once it has.
    ended: Mutex<Option<String>>,
    usable: AtomicBool,
    control: Box<dyn ChildControl>,
    writer: tokio::sync::Mutex<Writer>,
}

impl Shared {
    /// Ends the connection: the child is killed and every waiter told.
    fn end(&self, why: String) {
        self.usable.store(false, Ordering::SeqCst);
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(why);
        self.control.kill();
        // Dropping the senders wakes every waiter with "no answer".
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn why_ended(&self) -> String {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.clone().unwrap_or_else(|| "the server's output ended".into())
    }

    /// Writes one message as a line. `started` is set once the lock is held, just before the
    /// first byte; a write that fails or is dropped part-way ends the connection.
    async fn write_line(self: &Arc<Self>, message: &Value, started: &AtomicBool) -> Result<(), Lost> {
        let mut line = jsonrpc::encode(message).map_err(Lost::NotSent)?;
        line.push(b'\n');
        let mut writer = self.writer.lock().await;
        if !self.usable.load(Ordering::SeqCst) {
            return Err(Lost::NotSent(self.why_ended()));
        }
        started.store(true, Ordering::SeqCst);
        let mut torn = TornGuard(Some(self.clone()));
        let written = async {
            writer.write_all(&line).await?;
            writer.flush().await
        }
        .await;
        torn.0 = None;
        written.map_err(|e| {
            let why = format!("writing to the server: {e}");
            self.end(why.clone());
            // The line ends with its newline, so a write that failed left no whole message.
            Lost::NotSent(why)
        })
    }
}

/// Ends the connection if dropped while armed (a write abandoned part-way).
struct TornGuard(Option<Arc<Shared>>);

impl Drop for TornGuard {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.end("a message to the server was cut off mid-write".into());
        }
    }
}

/// Removes its request's waiter when the exchange ends, answered or not.
struct Waiter<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// A running stdio server.
pub(crate) struct Stdio {
    shared: Arc<Shared>,
    reader: tokio::task::JoinHandle<()>,
}

impl Stdio {
    /// Takes over a started child.
    pub fn new(child: SpawnedChild) -> Self {
        let shared = Arc::new(Shared {
            waiting: Mutex::default(),
            ended: Mutex::default(),
            usable: AtomicBool::new(true),
            control: child.control,
            writer: tokio::sync::Mutex::new(child.stdin),
        });
        let reader = tokio::spawn(read_loop(child.stdout, shared.clone()));
        Self { shared, reader }
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.end("the connection was closed".into());
    }
}

/// Reads messages until the output ends or a line is not one; then ends the connection.
async fn read_loop(stdout: Box<dyn AsyncRead + Send + Unpin>, shared: Arc<Shared>) {
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
                let (shared, reply) = (shared.clone(), jsonrpc::reply(&id, answer));
                tokio::spawn(async move { shared.write_line(&reply, &AtomicBool::new(false)).await });
            }
            Ok(Incoming::Notification) => {}
            Err(why) => break format!("the server wrote something that is not a JSON-RPC message ({why})"),
        }
    };
    shared.end(why);
}

impl Transport for Stdio {
    fn exchange(&self, id: u64, message: Value, started: Arc<AtomicBool>) -> BoxFuture<'_, Result<Answer, Lost>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(Lost::NotSent(self.shared.why_ended()));
            }
            let (sender, receiver) = oneshot::channel();
            self.shared.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, sender);
            // An exchange dropped before its answer (a cancel before it was sent) leaves no
            // waiter behind.
            let _waiter = Waiter { shared: &self.shared, id };
            if !self.usable() {
                // It ended between the check and the insert, after its waiters were told.
                return Err(Lost::NotSent(self.shared.why_ended()));
            }
            self.shared.write_line(&message, &started).await?;
            // A connection that ends from now on drops the sender, so this never waits on a
            // dead server.
            receiver.await.map_err(|_| Lost::MaybeArrived(self.shared.why_ended()))
        })
    }

    fn notify(&self, message: Value) -> BoxFuture<'_, Result<(), Lost>> {
        Box::pin(async move { self.shared.write_line(&message, &AtomicBool::new(false)).await })
    }

    fn usable(&self) -> bool {
        self.shared.usable.load(Ordering::SeqCst)
    }
}
