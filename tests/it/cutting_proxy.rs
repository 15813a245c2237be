//! A TCP proxy of the tests' own in front of PostgreSQL, cutting connections on demand, or
//! going silent: a database that accepts and never answers.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets and threads

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A TCP proxy to the database that can cut every connection through it at once (both
/// directions shut down, as a middlebox or a pooler restart does); new connections are
/// accepted and forwarded as before. Or it goes silent: nothing more is forwarded either way
/// on any connection, and new ones are accepted and never answered (a primary that hangs, a
/// proxy that lost its upstream), while every socket stays open.
pub(crate) struct CuttingProxy {
    port: u16,
    open: Arc<Mutex<Vec<std::net::TcpStream>>>,
    silent: Arc<AtomicBool>,
}

impl CuttingProxy {
    /// A proxy in front of the database of `url` (`postgresql://…@127.0.0.1:PORT/db`), and the
    /// same URL through it.
    pub(crate) fn in_front_of(url: &str) -> (Self, String) {
        let port: u16 = url.rsplit(':').next().unwrap().split('/').next().unwrap().parse().unwrap();
        let proxy = Self::start(Some(port));
        let through = url.replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
        (proxy, through)
    }

    /// A listener that accepts every connection and never answers: a database silent from
    /// the start.
    pub(crate) fn silent() -> Self {
        let proxy = Self::start(None);
        proxy.silence();
        proxy
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    fn start(to_port: Option<u16>) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
        let silent = Arc::new(AtomicBool::new(false));
        let (tracked, quiet) = (open.clone(), silent.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let mut tracked = tracked.lock().unwrap();
                tracked.push(client.try_clone().unwrap());
                let upstream = to_port.filter(|_| !quiet.load(Ordering::SeqCst));
                let Some(Ok(server)) = upstream.map(|p| std::net::TcpStream::connect(("127.0.0.1", p))) else {
                    continue; // held open, never answered
                };
                tracked.push(server.try_clone().unwrap());
                for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let quiet = quiet.clone();
                    std::thread::spawn(move || forward(from, to, &quiet));
                }
            }
        });
        Self { port, open, silent }
    }

    /// Cuts every connection open now; returns how many were cut.
    pub(crate) fn cut(&self) -> usize {
        let open = std::mem::take(&mut *self.open.lock().unwrap());
        for stream in &open {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        open.len() / 2
    }

    /// From now on nothing is forwarded, and new connections are never answered.
    pub(crate) fn silence(&self) {
        self.silent.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either side closes; once `silent`, reads nothing more (the
/// sockets stay open: the peers see a connection that never answers).
fn forward(mut from: std::net::TcpStream, mut to: std::net::TcpStream, silent: &AtomicBool) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if silent.load(Ordering::SeqCst) {
            std::thread::park();
            continue;
        }
        let _ = from.set_read_timeout(Some(std::time::Duration::from_millis(20)));
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) if !silent.load(Ordering::SeqCst) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}
