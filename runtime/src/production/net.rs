use std::io;
use std::net::SocketAddr;

use crate::seams::{BoxFuture, ByteStream, Listener, Net};

/// Real TCP through `tokio::net`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioNet;

#[derive(Debug)]
struct TokioListener {
    inner: tokio::net::TcpListener,
}

impl Listener for TokioListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.inner.accept().await?;
            // Small request/response exchanges and SSE frames: never wait for Nagle.
            stream.set_nodelay(true)?;
            Ok((Box::new(stream) as Box<dyn ByteStream>, peer))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl Net for TokioNet {
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn ByteStream>)
        })
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let inner = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(TokioListener { inner }) as Box<dyn Listener>)
        })
    }
}
