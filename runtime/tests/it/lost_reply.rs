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

/// The proxy: `armed` cuts the next connection that sends `COMMIT` (once), after letting
/// `let_through` more commits pass.
struct LosingProxy {
    port: u16,
    armed: Arc<AtomicBool>,
    let_through: Arc<AtomicUsize>,
    cuts: Arc<AtomicUsize>,
}

impl LosingProxy {
    fn start(to_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (armed, cuts) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let let_through = Arc::new(AtomicUsize::new(0));
        let (armed_in, cuts_in, through_in) = (armed.clone(), cuts.clone(), let_through.clone());
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
                let (armed, cuts, let_through) = (armed_in.clone(), cuts_in.clone(), through_in.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let commit = buf[..n].windows(6).any(|w| w == b"COMMIT");
                        let passes =
                            || let_through.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                        let cut = commit && armed.load(Ordering::SeqCst) && passes().is_err();
                        let cut = cut && armed.swap(false, Ordering::SeqCst);
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
        Self { port, armed, let_through, cuts }
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

/// Counts what a drain delivers.
#[derive(Default)]
struct Counting(std::sync::Mutex<Vec<String>>);

impl faultline_runtime::outbox::Deliverer for Counting {
    fn deliver(
        &self,
        execution_id: &str,
        _payload: &str,
    ) -> faultline_runtime::seams::BoxFuture<'static, Result<String, faultline_runtime::outbox::DeliveryError>> {
        self.0.lock().unwrap().push(execution_id.to_owned());
        Box::pin(async { Ok("ack".to_owned()) })
    }
}

/// A delivery claim whose `COMMIT` reached the server but whose answer never came back: the
/// row is looked up, found claimed by this queue, and it is this claim — delivered once, now.
/// (Before, the claim left the in-flight set on the error, and the next drain's recovery of
/// abandoned claims called the row `unknown`: a send the model was told may have happened,
/// which never did, left to an operator.)
#[tokio::test]
async fn a_claim_whose_commit_reply_was_lost_is_found_claimed_and_delivered_once() {
    use faultline_runtime::outbox::{drain, DeliveryStatus, Outbox};
    let Some(server) = PgServer::shared() else { return };
    let url = server.fresh_database();
    let proxy = LosingProxy::start(server.port());
    let seams = faultline_runtime::production::seams();
    let queue = faultline_runtime::production::PgOutbox::connect(
        &proxy.url(&url, server.port()),
        seams.process.clone(),
        seams.clock.clone(),
        seams.entropy.as_ref(),
    )
    .unwrap();
    queue.enqueue("x", "{\"amount\":1}").unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let claim = queue.claim_next().expect("the committed claim is found, not an error");
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 1, "the claim's COMMIT was answered by nobody");
    let claim = claim.expect("the row the lost commit claimed is this call's claim");
    assert_eq!((claim.execution_id.as_str(), claim.payload.as_str()), ("x", "{\"amount\":1}"));
    assert_eq!(queue.get("x").unwrap().unwrap().status, DeliveryStatus::Delivering);
    assert!(queue.recover_abandoned().unwrap().is_empty(), "the claim is in flight, not abandoned");
    queue.finish("x", faultline_runtime::outbox::Finish::Delivered("ack".into())).unwrap();
    assert_eq!(queue.get("x").unwrap().unwrap().status, DeliveryStatus::Delivered);

    // The same through a drain (its recovery of abandoned claims commits first): the lost
    // claim is delivered by it, once, and nothing is unknown.
    queue.enqueue("y", "{\"amount\":2}").unwrap();
    proxy.let_through.store(1, Ordering::SeqCst);
    proxy.armed.store(true, Ordering::SeqCst);
    let counting = Counting::default();
    let report = drain(&queue, &counting).await.expect("the drain goes on past the lost answer");
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 2);
    assert_eq!(*counting.0.lock().unwrap(), ["y"], "delivered once");
    assert!(report.recovered_unknown.is_empty(), "{report:?}");
    assert_eq!(queue.get("y").unwrap().unwrap().status, DeliveryStatus::Delivered);
    let report = drain(&queue, &counting).await.unwrap();
    assert!(report.recovered_unknown.is_empty() && report.delivered.is_empty(), "{report:?}");
}
