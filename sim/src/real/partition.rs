//! Partitions for real: a `Net` for the harness's servers that, while its switch is on,
//! refuses new connections (the listening socket is closed, so a connect meets
//! `ECONNREFUSED` at once, as a connect across a turmoil partition fails at once) and drops
//! every byte on connections already open in both directions (as turmoil drops the segments
//! of a partitioned link: the peer sees silence, not a reset). When the switch goes off, the
//! same port is bound again and open connections carry bytes again.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use faultline_runtime::{seams::BoxFuture, seams::ByteStream, seams::Listener, seams::Net};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Mutex};

/// Listen backlog of a partitionable server.
const BACKLOG: u32 = 1024;
/// Bytes read and dropped at a time from a partitioned connection.
const DROP_BUFFER_BYTES: usize = 16 * 1024;

/// Turns one server's partition on and off.
#[derive(Debug, Clone)]
pub struct PartitionSwitch {
    on: Arc<AtomicBool>,
    changed: watch::Sender<bool>,
}

impl Default for PartitionSwitch {
    fn default() -> Self {
        Self { on: Arc::default(), changed: watch::channel(false).0 }
    }
}

impl PartitionSwitch {
    /// Partitions (`true`) or heals (`false`) the server.
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
        self.changed.send_replace(on);
    }

    fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }
}

/// Real TCP for servers, behind a [`PartitionSwitch`].
#[derive(Debug, Clone)]
pub struct PartitionNet {
    switch: PartitionSwitch,
    /// A port bound in advance, handed out by the first `bind` (the agent is told the
    /// address before the server starts serving).
    prebound: Arc<std::sync::Mutex<Option<std::net::TcpListener>>>,
}

impl PartitionNet {
    /// A network for one server, partitioned by `switch`, with a loopback port bound now: its
    /// address, and the first `bind` gets that port whatever address it names.
    pub fn prebound(switch: PartitionSwitch) -> io::Result<(Self, SocketAddr)> {
        let listener = bind_reusable("127.0.0.1:0".parse().expect("an address"))?.into_std()?;
        let addr = listener.local_addr()?;
        Ok((Self { switch, prebound: Arc::new(std::sync::Mutex::new(Some(listener))) }, addr))
    }
}

fn bind_reusable(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // The same port again after a partition, while old connections linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

impl Net for PartitionNet {
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
        faultline_runtime::production::TokioNet.connect(addr)
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.to_owned();
        let switch = self.switch.clone();
        let prebound = self.prebound.lock().unwrap_or_else(|p| p.into_inner()).take();
        Box::pin(async move {
            let listener = match prebound {
                Some(listener) => tokio::net::TcpListener::from_std(listener)?,
                None => {
                    let wanted: SocketAddr = addr
                        .parse()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
                    bind_reusable(wanted)?
                }
            };
            let bound = listener.local_addr()?;
            Ok(Box::new(PartitionListener { bound, socket: Mutex::new(Some(listener)), switch }) as Box<dyn Listener>)
        })
    }
}

struct PartitionListener {
    bound: SocketAddr,
    /// `None` while partitioned: nobody listens on the port.
    socket: Mutex<Option<tokio::net::TcpListener>>,
    switch: PartitionSwitch,
}

impl Listener for PartitionListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let mut changes = self.switch.changed.subscribe();
            loop {
                let mut socket = self.socket.lock().await;
                if self.switch.is_on() {
                    // Close the port: new connections are refused for the window.
                    *socket = None;
                    drop(socket);
                    let _ = changes.wait_for(|on| !*on).await;
                    continue;
                }
                if socket.is_none() {
                    *socket = Some(bind_reusable(self.bound)?);
                }
                let listener = socket.as_ref().expect("bound above");
                tokio::select! {
                    accepted = listener.accept() => {
                        let (stream, peer) = accepted?;
                        stream.set_nodelay(true)?;
                        let stream = PartitionStream { inner: stream, switch: self.switch.clone() };
                        return Ok((Box::new(stream) as Box<dyn ByteStream>, peer));
                    }
                    _ = changes.changed() => {}
                }
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.bound)
    }
}

/// A server connection whose bytes vanish in both directions while partitioned.
struct PartitionStream {
    inner: tokio::net::TcpStream,
    switch: PartitionSwitch,
}

impl AsyncRead for PartitionStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.switch.is_on() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        // Read and drop until the socket has nothing more (which registers the waker).
        let mut scratch = [0u8; DROP_BUFFER_BYTES];
        loop {
            let mut dropped = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut dropped) {
                Poll::Ready(Ok(())) if !dropped.filled().is_empty() => continue,
                // End of stream or an error: the connection is gone either way.
                Poll::Ready(result) => return Poll::Ready(result),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl AsyncWrite for PartitionStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.switch.is_on() {
            // Lost on the partitioned link.
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.switch.is_on() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
