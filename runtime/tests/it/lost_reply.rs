//! A commit whose reply was lost, made to happen on demand: a TCP proxy in front of
//! PostgreSQL that, once armed, forwards the client's `COMMIT` to the server, lets the server
//! commit, and cuts the connection before a byte of the answer gets back (issue 54: "a
//! commit whose reply was lost is looked up, not re-run").
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets and threads

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::production::PgStore;
use faultline_runtime::store::{SessionId, Store, Takeover, LEASE_MS_DEFAULT};
use faultline_runtime::testing::PgServer;

use crate::fixtures::TestProcess;

/// How long the proxy waits after forwarding the `COMMIT` before it cuts: the server commits
/// well within it, and its answer is swallowed meanwhile.
const COMMIT_GRACE_MS: u64 = 200;

/// The proxy: `armed` cuts the next connection that sends `COMMIT` (once).
struct LosingProxy {
    port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl LosingProxy {
    fn start(to_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (armed, cuts) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (armed_in, cuts_in) = (armed.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to_port)) else { continue };
                let swallow = Arc::new(AtomicBool::new(false));
                // Server to client: relayed until a cut is pending, then swallowed.
                let (mut from_server, mut to_client, swallowing) =
                    (server.try_clone().unwrap(), client.try_clone().unwrap(), swallow.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from_server.read(&mut buf) {
                        if n == 0 || swallowing.load(Ordering::SeqCst) || to_client.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                // Client to server: a `COMMIT` while armed is forwarded, answered by nobody,
                // and the connection cut.
                let (mut from_client, mut to_server) = (client, server);
                let (armed, cuts) = (armed_in.clone(), cuts_in.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let commit = buf[..n].windows(6).any(|w| w == b"COMMIT");
                        let cut = commit && armed.swap(false, Ordering::SeqCst);
                        if cut {
                            swallow.store(true, Ordering::SeqCst);
                        }
                        if to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        if cut {
                            std::thread::sleep(Duration::from_millis(COMMIT_GRACE_MS));
                            let _ = from_client.shutdown(Shutdown::Both);
                            let _ = to_server.shutdown(Shutdown::Both);
                            cuts.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                    }
                });
            }
        });
        Self { port, armed, cuts }
    }

    /// `url` through this proxy.
    fn url(&self, url: &str, server_port: u16) -> String {
        url.replace(&format!(":{server_port}/"), &format!(":{}/", self.port))
    }
}

/// Creates a session as worker `a`, then opens it as worker `b` through a proxy that loses
/// the answer of `b`'s takeover `COMMIT`; the open's result, and the server to keep alive.
fn take_over_losing_the_commit_answer(
    id: &SessionId,
) -> Option<(faultline_runtime::Result<faultline_runtime::store::Opened>, usize)> {
    let server = PgServer::shared()?;
    let url = server.fresh_database();
    let world = TestProcess::world();
    let (a, b) = (TestProcess::new("worker-a", &world), TestProcess::new("worker-b", &world));
    PgStore::connect(&url, a, LEASE_MS_DEFAULT).unwrap().create(id, 1).unwrap().close().unwrap();
    let proxy = LosingProxy::start(server.port());
    let store = PgStore::connect(&proxy.url(&url, server.port()), b, LEASE_MS_DEFAULT).unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let opened = store.open(id, Takeover::IfDead);
    Some((opened, proxy.cuts.load(Ordering::SeqCst)))
}

/// A takeover whose `COMMIT` reached the server but whose answer never came back: the
/// session is looked up, found taken by this process at an epoch none of its writers holds,
/// and handed over — not taken again, which would meet this very process as the live holder
/// and be refused.
#[test]
fn a_takeover_whose_commit_reply_was_lost_is_found_committed_not_run_again() {
    let id = SessionId::new("lost-reply").unwrap();
    let Some((opened, cuts)) = take_over_losing_the_commit_answer(&id) else { return };
    let opened = opened.expect("the committed takeover is found");
    assert_eq!(cuts, 1, "the takeover's COMMIT was answered by nobody");
    assert_eq!(opened.log.token(), 3, "created at 1, released at 2, taken over (once) at 3");
    let mut log = opened.log;
    log.append(&[faultline_runtime::event::Record::new(
        0,
        1,
        faultline_runtime::event::Event::TurnStart(faultline_runtime::event::TurnStart { turn: 1 }),
    )])
    .expect("the writer handed over holds the session");
}

/// The rule PostgreSQL follows is the shared one (`store/lost_answer.rs`): planted there, the
/// takeover is run again blind and meets its own lease.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_lost_answer_rerun_makes_the_postgres_takeover_meet_its_own_lease() {
    let id = SessionId::new("lost-reply-planted").unwrap();
    faultline_runtime::testing::bugs::plant(&["lost-answer-rerun"]);
    let taken = take_over_losing_the_commit_answer(&id);
    faultline_runtime::testing::bugs::plant(&[]);
    let Some((opened, cuts)) = taken else { return };
    assert_eq!(cuts, 1, "the takeover's COMMIT was answered by nobody");
    let refused = opened.map(|_| ()).unwrap_err();
    assert!(
        matches!(&refused, faultline_runtime::Error::SessionLocked { holder, .. } if holder.contains("worker-b")),
        "{refused}"
    );
}
