//! Helpers shared by the integration tests.

use std::time::Duration;

/// A turmoil builder with the project's fixed epoch and seed, and a simulated-time budget
/// generous enough for every test in this binary.
pub fn sim_builder(seed: u64) -> turmoil::Builder {
    sim_builder_with_tick(seed, Duration::from_millis(10))
}

/// The same with an explicit tick (1 ms where a test asserts millisecond timing).
pub fn sim_builder_with_tick(seed: u64, tick: Duration) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder
        .epoch(faultline_sim::seams::sim_epoch())
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(tick)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1));
    builder
}

/// Entropy that replays fixed draws (then zeros): pins jitter samples in tests.
#[derive(Debug, Default)]
pub struct ScriptedEntropy(pub std::sync::Mutex<std::collections::VecDeque<u64>>);

impl faultline_runtime::seams::Entropy for ScriptedEntropy {
    fn next_u64(&self) -> u64 {
        self.0.lock().unwrap().pop_front().unwrap_or(0)
    }
}

/// TLS on loopback for the tests: a CA and a server certificate for `127.0.0.1` generated now,
/// and a `Net` whose listeners complete the TLS handshake before handing a stream over, so an
/// unchanged server (the fake model server) speaks `https://`.
pub mod tls {
    #![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets

    use std::io;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use faultline_runtime::{seams::BoxFuture, seams::ByteStream, seams::Listener, seams::Net};

    /// A CA (its PEM, for the client's `ca_file`) and the acceptor of a certificate it signed.
    pub struct LoopbackTls {
        /// The CA certificate, PEM.
        pub ca_pem: String,
        acceptor: tokio_rustls::TlsAcceptor,
    }

    impl LoopbackTls {
        /// A fresh CA and a certificate for `127.0.0.1`.
        pub fn new() -> Self {
            let pki = faultline_runtime::testing::TestPki::new(&["127.0.0.1"]);
            Self { acceptor: pki.acceptor(), ca_pem: pki.ca_pem }
        }

        /// Real TCP whose listeners speak TLS.
        pub fn net(&self) -> Arc<dyn Net> {
            Arc::new(TlsNet { acceptor: self.acceptor.clone() })
        }
    }

    struct TlsNet {
        acceptor: tokio_rustls::TlsAcceptor,
    }

    struct TlsListener {
        inner: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    }

    impl Net for TlsNet {
        fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
            faultline_runtime::production::TokioNet.connect(addr)
        }

        fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
            let (addr, acceptor) = (addr.to_owned(), self.acceptor.clone());
            Box::pin(async move {
                let inner = tokio::net::TcpListener::bind(addr).await?;
                Ok(Box::new(TlsListener { inner, acceptor }) as Box<dyn Listener>)
            })
        }
    }

    impl Listener for TlsListener {
        fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
            Box::pin(async move {
                loop {
                    let (tcp, peer) = self.inner.accept().await?;
                    tcp.set_nodelay(true)?;
                    // A client that gives up mid-handshake is not the server's failure.
                    if let Ok(tls) = self.acceptor.accept(tcp).await {
                        return Ok((Box::new(tls) as Box<dyn ByteStream>, peer));
                    }
                }
            })
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            self.inner.local_addr()
        }
    }
}
