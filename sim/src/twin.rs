//! The bare turmoil twin of a scenario run: a plain turmoil simulation with the run's
//! topology, tick and simulated time that replays the run's recorded I/O
//! (`world::io_trace`) with nothing above the seams — every connection the agent opened,
//! each side writing the same sizes in the same order and reading what it read, and every
//! disk operation the agent host made, on the same paths with the same byte counts.
//!
//! What is left between the run and its twin is what the runtime (turn loop, adapter,
//! stores, outbox) and the harness (model server scripts, oracle) add to simulating that
//! I/O. The first twin replayed only counts (one `GET /` answered `ok` per exchange, 512-byte
//! appends): a run that streams a 20-frame answer, posts a 300 KiB conversation or lists a
//! directory paid for work its twin never did. `byte_less_twin` keeps it for comparison.
//! `faultline bench` times runs against their twins.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::{seams::Fs, seams::FsFile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::seams::SimFs;
pub use crate::verdict::run_recorded;
use crate::world::io_trace::Flow;
pub use crate::world::io_trace::{DiskOp, IoTrace};

/// The port nobody listens on: a connection the run saw refused is refused here too.
const REFUSED_PORT: u16 = 81;
/// Largest single write or read replayed, in bytes (the run's own are bounded by the store's
/// line limit and the model server's request limit, both far below).
const REPLAY_BUFFER_BYTES_MAX: usize = 64 << 20;

/// What one twin replays.
#[derive(Debug, Clone)]
pub struct Twin {
    pub tick_ms: u64,
    pub sim_ms: u64,
    pub io: Arc<IoTrace>,
}

/// What a twin moved: the test that the replay did the run's I/O, not some of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Bytes the agent's side read, over every connection.
    pub read_by_agent: usize,
    /// Disk operations replayed.
    pub disk_ops: usize,
}

/// The plain turmoil simulation every twin (replaying or byte-less) runs in: the run's seed,
/// tick and simulated time (plus the same minute of slack the scenario's budget has), and a
/// fixed 1 ms link, so the twins differ from each other only in what their hosts do.
pub fn twin_sim<'a>(seed: u64, tick_ms: u64, sim_ms: u64) -> turmoil::Sim<'a> {
    turmoil::Builder::new()
        .epoch(crate::seams::sim_epoch())
        .rng_seed(crate::seed::Seed::new(seed).turmoil())
        .tick_duration(Duration::from_millis(tick_ms))
        .simulation_duration(Duration::from_millis(sim_ms + 60_000))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1))
        .build()
}

/// Runs the twin of a run made with `seed`.
pub fn replay(seed: u64, twin: &Twin) -> Replayed {
    let replayed = Arc::new(std::sync::Mutex::new(Replayed::default()));
    let mut sim = twin_sim(seed, twin.tick_ms, twin.sim_ms);
    // The model and the gateway, and every other host the run connected to (an MCP
    // server's, a service of an agent under test).
    let mut hosts: Vec<String> = vec!["model".into(), "gateway".into()];
    for connection in &twin.io.connections {
        if !hosts.contains(&connection.host) {
            hosts.push(connection.host.clone());
        }
    }
    for host in hosts {
        // The server sides of this host's established connections, by their number among them.
        let flows: Vec<Flow> =
            twin.io.connections.iter().filter(|c| c.host == host && c.established).map(|c| c.server.clone()).collect();
        let flows = Arc::new(flows);
        sim.host(host, move || {
            let flows = flows.clone();
            async move {
                let listener = turmoil::net::TcpListener::bind("0.0.0.0:80").await?;
                loop {
                    let (stream, _) = listener.accept().await?;
                    tokio::spawn(serve(stream, flows.clone()));
                }
            }
        });
    }
    let (io, sim_ms, out) = (twin.io.clone(), twin.sim_ms, replayed.clone());
    sim.client("agent", async move {
        let mut read_by_agent = 0;
        let mut established: Vec<(&str, u64)> = Vec::new();
        for connection in &io.connections {
            if !connection.established {
                let refused = turmoil::net::TcpStream::connect((connection.host.as_str(), REFUSED_PORT)).await;
                assert!(refused.is_err(), "nobody listens on the refused port");
                continue;
            }
            let number = match established.iter_mut().find(|(host, _)| *host == connection.host) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    established.push((&connection.host, 0));
                    0
                }
            };
            let stream = turmoil::net::TcpStream::connect((connection.host.as_str(), 80)).await?;
            read_by_agent += call(stream, &connection.client, number).await;
        }
        replay_disk(&io.disk);
        *out.lock().unwrap_or_else(|p| p.into_inner()) = Replayed { read_by_agent, disk_ops: io.disk.len() };
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        // Inside a bare turmoil host tokio's clock is turmoil's: the twin has no seams to
        // sleep through, and this sleep is simulated time.
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(Duration::from_millis(sim_ms).saturating_sub(elapsed)).await;
        Ok(())
    });
    sim.run().expect("twin simulation");
    let replayed = *replayed.lock().unwrap_or_else(|p| p.into_inner());
    replayed
}

/// Bytes at the start of a connection that say which of its host's connections it is: the
/// server replays that connection's side whatever order the connections arrive in (in the
/// run, concurrent ones — parallel deliveries — may be accepted in another order than they
/// were recorded). They overwrite the first bytes of the client's first write, whose size
/// stays what it was.
const NUMBER_BYTES: usize = 8;

/// The client side of one connection: writes what the agent wrote (numbered), says it is
/// done (a half close, so a server that read less than it expected never waits for more),
/// then reads what the agent read. Returns the bytes it read.
async fn call(mut stream: turmoil::net::TcpStream, flow: &Flow, number: u64) -> usize {
    let largest = flow.writes.iter().copied().max().unwrap_or(0).min(REPLAY_BUFFER_BYTES_MAX);
    let mut bytes = vec![b'x'; largest.max(NUMBER_BYTES)];
    bytes[..NUMBER_BYTES].copy_from_slice(&number.to_le_bytes());
    if !write_each(&mut stream, &bytes, &flow.writes).await {
        return 0;
    }
    let _ = stream.shutdown().await;
    read_up_to(&mut stream, flow.read).await
}

/// The server side of one connection: reads which connection it is and what the server
/// read, writes what it wrote, then closes. A connection that cannot say is closed.
async fn serve(mut stream: turmoil::net::TcpStream, flows: Arc<Vec<Flow>>) {
    let mut number = [0u8; NUMBER_BYTES];
    if stream.read_exact(&mut number).await.is_err() {
        return;
    }
    let Some(flow) = usize::try_from(u64::from_le_bytes(number)).ok().and_then(|n| flows.get(n)) else { return };
    let _ = read_up_to(&mut stream, flow.read.saturating_sub(NUMBER_BYTES)).await;
    let bytes = vec![b'x'; flow.writes.iter().copied().max().unwrap_or(0).min(REPLAY_BUFFER_BYTES_MAX)];
    write_each(&mut stream, &bytes, &flow.writes).await;
}

/// Reads until `bytes` have come or the peer closed; returns what came.
async fn read_up_to(stream: &mut turmoil::net::TcpStream, bytes: usize) -> usize {
    let mut buffer = vec![0; 16 * 1024];
    let mut read = 0;
    while read < bytes {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    read
}

/// Writes `sizes` bytes of `bytes` one write each; `false` when the peer went away.
async fn write_each(stream: &mut turmoil::net::TcpStream, bytes: &[u8], sizes: &[usize]) -> bool {
    for &n in sizes {
        if stream.write_all(&bytes[..n.min(bytes.len())]).await.is_err() {
            return false;
        }
    }
    true
}

/// Every disk operation of the run, on the same paths through the same seam (`SimFs`, the
/// thin adapter over turmoil's filesystem), with buffers of the same sizes. Results are
/// ignored: the twin does the work, it does not judge it.
fn replay_disk(ops: &[DiskOp]) {
    let fs = SimFs;
    let mut files: Vec<Option<Box<dyn FsFile>>> = Vec::new();
    let largest = ops
        .iter()
        .map(|op| match op {
            DiskOp::Write { bytes, .. } | DiskOp::ReadAt { bytes, .. } => *bytes,
            _ => 0,
        })
        .max()
        .unwrap_or(0)
        .min(REPLAY_BUFFER_BYTES_MAX);
    let mut buffer = vec![b'x'; largest];
    for op in ops {
        let _: io::Result<()> = (|| {
            match op {
                DiskOp::Open { path, options, file } => {
                    let opened = fs.open(path, *options);
                    if let Some(file) = *file {
                        if files.len() <= file {
                            files.resize_with(file + 1, || None);
                        }
                        files[file] = opened.ok();
                    }
                }
                DiskOp::Read { path } => _ = fs.read(path)?,
                DiskOp::CreateDir { path } => fs.create_dir(path)?,
                DiskOp::HardLink { original, link } => fs.hard_link(original, link)?,
                DiskOp::Rename { from, to } => fs.rename(from, to)?,
                DiskOp::RemoveFile { path } => fs.remove_file(path)?,
                DiskOp::ReadDir { path } => _ = fs.read_dir(path)?,
                DiskOp::Metadata { path } => _ = fs.metadata(path)?,
                DiskOp::SyncDir { path } => fs.sync_dir(path)?,
                DiskOp::Write { file, bytes } => {
                    file_of(&mut files, *file)?.write_all(&buffer[..*bytes.min(&largest)])?
                }
                DiskOp::ReadAll { file } => _ = file_of(&mut files, *file)?.read_all()?,
                DiskOp::ReadAt { file, offset, bytes } => {
                    _ = file_of(&mut files, *file)?.read_at(*offset, &mut buffer[..*bytes.min(&largest)])?
                }
                DiskOp::Sync { file } => file_of(&mut files, *file)?.sync()?,
                DiskOp::SetLen { file, len } => file_of(&mut files, *file)?.set_len(*len)?,
                DiskOp::Len { file } => _ = file_of(&mut files, *file)?.len()?,
            }
            Ok(())
        })();
    }
}

fn file_of(files: &mut [Option<Box<dyn FsFile>>], file: usize) -> io::Result<&mut Box<dyn FsFile>> {
    files.get_mut(file).and_then(Option::as_mut).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}
