use std::io;
use std::net::SocketAddr;

use faultline_runtime::{seams::BoxFuture, seams::ByteStream, seams::Listener, seams::Net};

/// turmoil's simulated TCP. Host names are turmoil host names (`model:80`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SimNet;

struct SimListener {
    inner: turmoil::net::TcpListener,
}

impl Listener for SimListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.inner.accept().await?;
            Ok((Box::new(stream) as Box<dyn ByteStream>, peer))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// turmoil reports a refused connection with the peer's address as its message; the OS says
/// "Connection refused (os error 111)". The runtime stores that text in its failures, so the
/// simulator says what production says (found by parity with the real run of
/// `model-partition-heals`).
fn as_the_os_reports(error: io::Error) -> io::Error {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => io::Error::from_raw_os_error(nix::errno::Errno::ECONNREFUSED as i32),
        _ => error,
    }
}

impl Net for SimNet {
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr.as_str()).await.map_err(as_the_os_reports)?;
            Ok(Box::new(stream) as Box<dyn ByteStream>)
        })
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let inner = turmoil::net::TcpListener::bind(addr.as_str()).await?;
            Ok(Box::new(SimListener { inner }) as Box<dyn Listener>)
        })
    }
}
