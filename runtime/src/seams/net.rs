use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};

use super::future::BoxFuture;

/// A connected, bidirectional byte stream (a TCP connection in both worlds).
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> ByteStream for T {}

/// A bound listener that accepts byte streams.
pub trait Listener: Send + Sync {
    /// Waits for the next inbound connection.
    fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>>;

    /// The address actually bound (port 0 resolves to a real port here).
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// The network, as the runtime is allowed to see it.
///
/// Contract:
/// - `connect("host:port")` resolves the name in the current world (DNS in production,
///   turmoil's host table in simulation) and returns a stream once the connection is
///   established; a refused or unreachable peer is an `io::Error`, never a hang past the
///   caller's own timeout.
/// - Bytes written to a stream arrive in order or not at all; a dropped stream closes the
///   connection (this is how the adapter cancels a transport below a caller that moved on).
/// - HTTP (hyper) runs on top of these streams in both worlds; nothing in the runtime opens a
///   socket any other way.
pub trait Net: Send + Sync {
    /// Opens a connection to `addr` (`host:port`).
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>>;

    /// Binds a listener on `addr` (`ip:port`; port 0 picks a free port).
    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;
}
