//! One generic body exercising all four seams, instantiated with the production seams (real
//! files in a temp dir, real TCP on 127.0.0.1) and inside a turmoil simulation, where the 5 s
//! sleep costs no wall time and a crash before `sync_dir` loses the linked name.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // the test measures wall time

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faultline_runtime::{seams::EntropyExt, seams::Net, seams::OpenOptions, seams::Seams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::sim_builder;

const PAYLOAD: &[u8] = b"intent before effect\n";
const SLEEP: Duration = Duration::from_secs(5);

/// What the generic body observed.
#[derive(Debug, Clone, PartialEq)]
struct SmokeReport {
    read_back: Vec<u8>,
    echoed: Vec<u8>,
    slept: Duration,
    temp_name_len: usize,
}

/// Publishes `dir/session.log` the way transcripts are published (temp + fsync + link
/// [+ sync_dir]), echoes bytes through `echo_addr`, and sleeps 5 s on the seam clock.
async fn exercise_seams(seams: &Seams, dir: &Path, echo_addr: &str, sync_dir: bool) -> io::Result<SmokeReport> {
    let temp = dir.join(format!("session.log.{}.tmp", seams.entropy.hex_id(16)));
    let published = dir.join("session.log");
    let mut file = seams.fs.open(&temp, OpenOptions::create_new_private())?;
    file.write_all(PAYLOAD)?;
    file.sync()?;
    seams.fs.hard_link(&temp, &published)?;
    let second_link = seams.fs.hard_link(&temp, &published).expect_err("hard_link must never overwrite");
    assert_eq!(second_link.kind(), io::ErrorKind::AlreadyExists);
    if sync_dir {
        seams.fs.sync_dir(dir)?;
    }
    let read_back = seams.fs.read(&published)?;

    let mut stream = seams.net.connect(echo_addr).await?;
    stream.write_all(PAYLOAD).await?;
    let mut echoed = vec![0; PAYLOAD.len()];
    stream.read_exact(&mut echoed).await?;

    let before = seams.clock.now();
    seams.clock.sleep(SLEEP).await;
    let slept = seams.clock.now().saturating_duration_since(before);

    Ok(SmokeReport { read_back, echoed, slept, temp_name_len: temp.file_name().map_or(0, |n| n.len()) })
}

/// Echoes every connection on `listener_addr` back to its sender.
async fn echo_server(
    net: Arc<dyn Net>,
    bind_addr: &str,
    bound: tokio::sync::oneshot::Sender<String>,
) -> io::Result<()> {
    let listener = net.bind(bind_addr).await?;
    let _ = bound.send(listener.local_addr()?.to_string());
    loop {
        let (mut stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if stream.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

fn check(report: &SmokeReport) {
    assert_eq!(report.read_back, PAYLOAD);
    assert_eq!(report.echoed, PAYLOAD);
    assert!(report.slept >= SLEEP, "slept only {:?}", report.slept);
    assert_eq!(report.temp_name_len, "session.log..tmp".len() + 16);
}

#[tokio::test]
async fn seams_work_on_the_real_machine() {
    let seams = faultline_runtime::production::seams();
    let dir = tempfile::tempdir().unwrap();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(echo_server(seams.net.clone(), "127.0.0.1:0", bound_tx));
    let echo_addr = bound_rx.await.unwrap();

    let report = exercise_seams(&seams, dir.path(), &echo_addr, true).await.unwrap();
    check(&report);
    assert!(dir.path().join("session.log").exists());
    server.abort();
}

/// Runs the generic body on host `agent` of a fresh simulation, crashes and restarts the host,
/// and returns the report plus what the restarted host finds at `session.log`.
fn simulate(sync_dir: bool) -> (SmokeReport, Option<Vec<u8>>, Duration) {
    let mut sim = sim_builder(7).build();
    let report = Arc::new(Mutex::new(None));
    let after_crash = Arc::new(Mutex::new(None));
    let incarnation = Arc::new(Mutex::new(0u64));
    let dir = PathBuf::from("/data");

    sim.host("echo", || async {
        let (bound_tx, _bound_rx) = tokio::sync::oneshot::channel();
        echo_server(Arc::new(faultline_sim::seams::SimNet), "0.0.0.0:7000", bound_tx).await?;
        Ok(())
    });
    {
        let (report, after_crash, incarnation, dir) =
            (report.clone(), after_crash.clone(), incarnation.clone(), dir.clone());
        sim.host("agent", move || {
            let (report, after_crash, incarnation, dir) =
                (report.clone(), after_crash.clone(), incarnation.clone(), dir.clone());
            async move {
                let life = {
                    let mut n = incarnation.lock().unwrap();
                    *n += 1;
                    *n
                };
                let seams = faultline_sim::seams::sim_seams(7, "agent", life);
                let first_life = life == 1;
                if first_life {
                    seams.fs.create_dir(&dir)?;
                    seams.fs.sync_dir(Path::new("/"))?;
                    let observed = exercise_seams(&seams, &dir, "echo:7000", sync_dir).await?;
                    *report.lock().unwrap() = Some(observed);
                } else {
                    let found = seams.fs.read(&dir.join("session.log")).ok();
                    *after_crash.lock().unwrap() = Some(found);
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }

    let wall = Instant::now();
    run_until(&mut sim, || report.lock().unwrap().is_some());
    let wall_elapsed = wall.elapsed();
    sim.crash("agent");
    sim.bounce("agent");
    run_until(&mut sim, || after_crash.lock().unwrap().is_some());

    let report = report.lock().unwrap().take().unwrap();
    let found = after_crash.lock().unwrap().take().unwrap();
    (report, found, wall_elapsed)
}

/// Steps the simulation until `done` holds (bounded by the simulated-time budget).
fn run_until(sim: &mut turmoil::Sim<'_>, done: impl Fn() -> bool) {
    while !done() {
        sim.step().expect("simulation step failed");
    }
}

#[test]
fn seams_work_in_simulation_and_sleep_costs_no_wall_time() {
    let (report, after_crash, wall) = simulate(true);
    check(&report);
    assert!(wall < Duration::from_secs(2), "5 s of simulated sleep took {wall:?} of wall time");
    assert_eq!(after_crash.as_deref(), Some(PAYLOAD), "a synced name survives the crash");
}

#[test]
fn crash_before_sync_dir_loses_the_linked_name() {
    let (report, after_crash, _) = simulate(false);
    check(&report);
    assert_eq!(after_crash, None, "the link was never made durable, so the crash must forget it");
}
