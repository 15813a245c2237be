//! A TCP proxy of the tests' own in front of PostgreSQL, cutting connections on demand.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets and threads

/// A TCP proxy to the database that can cut every connection through it at once (both
/// directions shut down, as a middlebox or a pooler restart does); new connections are
/// accepted and forwarded as before.
pub(crate) struct CuttingProxy {
    port: u16,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl CuttingProxy {
    /// A proxy in front of the database of `url` (`postgresql://…@127.0.0.1:PORT/db`), and the
    /// same URL through it.
    pub(crate) fn in_front_of(url: &str) -> (Self, String) {
        let port: u16 = url.rsplit(':').next().unwrap().split('/').next().unwrap().parse().unwrap();
        let proxy = Self::start(port);
        let through = url.replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
        (proxy, through)
    }

    fn start(to_port: u16) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = std::sync::Arc::default();
        let tracked = open.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to_port)) else { continue };
                let mut tracked = tracked.lock().unwrap();
                tracked.push(client.try_clone().unwrap());
                tracked.push(server.try_clone().unwrap());
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self { port, open }
    }

    /// Cuts every connection open now; returns how many were cut.
    pub(crate) fn cut(&self) -> usize {
        let open = std::mem::take(&mut *self.open.lock().unwrap());
        for stream in &open {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        open.len() / 2
    }
}
