//! The simulated I/O of one run, as it crossed the seams into turmoil: every disk operation
//! the agent host made (with its path, options and byte count) and every connection between
//! the agent and the servers (each side's writes, by size, and what each side read).
//!
//! Recorded only when asked (`world::run_recorded`): the bench's bare turmoil twin replays it
//! with no runtime above the seams, so the twin pays for exactly the simulated network and
//! disk work the run made, and the ratio between the two is what the runtime and the harness
//! add on top. Off in a sweep: each seam then checks one `Option` and records nothing.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use faultline_runtime::{
    seams::BoxFuture, seams::ByteStream, seams::Fs, seams::FsFile, seams::FsMetadata, seams::Listener, seams::Net,
    seams::OpenOptions,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One disk operation of the agent host, in the order it was made. Files are named by the
/// order they were opened (`file`: the 0-based open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskOp {
    /// `Fs::open`; when it succeeded, the file is number `file` from then on.
    Open { path: PathBuf, options: OpenOptions, file: Option<usize> },
    /// `Fs::read` of a whole file.
    Read { path: PathBuf },
    /// `Fs::create_dir`.
    CreateDir { path: PathBuf },
    /// `Fs::hard_link`.
    HardLink { original: PathBuf, link: PathBuf },
    /// `Fs::rename`.
    Rename { from: PathBuf, to: PathBuf },
    /// `Fs::remove_file`.
    RemoveFile { path: PathBuf },
    /// `Fs::read_dir`.
    ReadDir { path: PathBuf },
    /// `Fs::metadata`.
    Metadata { path: PathBuf },
    /// `Fs::sync_dir`.
    SyncDir { path: PathBuf },
    /// `FsFile::write_all` of `bytes` bytes.
    Write { file: usize, bytes: usize },
    /// `FsFile::read_all`.
    ReadAll { file: usize },
    /// `FsFile::read_at` into a buffer of `bytes` bytes.
    ReadAt { file: usize, offset: u64, bytes: usize },
    /// `FsFile::sync`.
    Sync { file: usize },
    /// `FsFile::set_len`.
    SetLen { file: usize, len: u64 },
    /// `FsFile::len`.
    Len { file: usize },
}

/// One side of a connection: its writes (sizes, in order) and the bytes it read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flow {
    pub writes: Vec<usize>,
    pub read: usize,
}

/// A connection the agent opened: to which host, whether it was established, and both sides'
/// flows (the server's is empty when no server accepted it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    pub host: String,
    pub established: bool,
    pub client: Flow,
    pub server: Flow,
}

/// A run's simulated I/O.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoTrace {
    /// The agent's connections, in the order it opened them (refused ones included).
    pub connections: Vec<Connection>,
    /// The agent host's disk operations, across incarnations, in order.
    pub disk: Vec<DiskOp>,
}

#[derive(Default)]
struct State {
    disk: Vec<DiskOp>,
    files_opened: usize,
    /// Client sides, in connect order: (host, established, flow).
    clients: Vec<(String, bool, Arc<Mutex<Flow>>)>,
    /// Server sides, by host, in accept order.
    servers: Vec<(String, Arc<Mutex<Flow>>)>,
}

/// Where the seams record; `None` records nothing.
#[derive(Clone, Default)]
pub(crate) struct IoRecorder(Option<Arc<Mutex<State>>>);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl IoRecorder {
    /// A recorder that records (`on`) or one that does nothing.
    pub fn new(on: bool) -> Self {
        IoRecorder(on.then(Arc::default))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn disk(&self, op: DiskOp) {
        if let Some(state) = &self.0 {
            lock(state).disk.push(op);
        }
    }

    /// What was recorded, the agent's connections paired with the servers' (the k-th
    /// established connection to a host with that host's k-th accepted one).
    pub fn trace(&self) -> Option<IoTrace> {
        let state = lock(self.0.as_ref()?);
        let mut accepted: Vec<(&str, usize)> = Vec::new();
        let connections = state
            .clients
            .iter()
            .map(|(host, established, flow)| {
                let server = if *established {
                    let seen = match accepted.iter_mut().find(|(h, _)| h == host) {
                        Some((_, n)) => n,
                        None => {
                            accepted.push((host, 0));
                            &mut accepted.last_mut().expect("just pushed").1
                        }
                    };
                    let server = state.servers.iter().filter(|(h, _)| h == host).nth(*seen);
                    *seen += 1;
                    server.map(|(_, flow)| lock(flow).clone()).unwrap_or_default()
                } else {
                    Flow::default()
                };
                Connection { host: host.clone(), established: *established, client: lock(flow).clone(), server }
            })
            .collect();
        Some(IoTrace { connections, disk: state.disk.clone() })
    }

    /// `fs`, recording every operation (or `fs` itself when off).
    pub fn fs(&self, fs: Arc<dyn Fs>) -> Arc<dyn Fs> {
        if self.is_on() {
            Arc::new(RecordingFs { inner: fs, recorder: self.clone() })
        } else {
            fs
        }
    }

    /// `net` as the agent's: every connection it opens is recorded.
    pub fn client_net(&self, net: Arc<dyn Net>) -> Arc<dyn Net> {
        if self.is_on() {
            Arc::new(RecordingNet { inner: net, recorder: self.clone(), server_host: None })
        } else {
            net
        }
    }

    /// `net` as server `host`'s: every connection it accepts is recorded.
    pub fn server_net(&self, net: Arc<dyn Net>, host: &str) -> Arc<dyn Net> {
        if self.is_on() {
            Arc::new(RecordingNet { inner: net, recorder: self.clone(), server_host: Some(host.to_owned()) })
        } else {
            net
        }
    }
}

struct RecordingFs {
    inner: Arc<dyn Fs>,
    recorder: IoRecorder,
}

#[derive(Debug)]
struct RecordingFile {
    inner: Box<dyn FsFile>,
    file: usize,
    recorder: IoRecorder,
}

impl std::fmt::Debug for IoRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_on() { "IoRecorder(on)" } else { "IoRecorder(off)" })
    }
}

impl Fs for RecordingFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let opened = self.inner.open(path, options);
        let state = self.recorder.0.as_ref().expect("a recording fs records");
        let mut state = lock(state);
        let file = opened.is_ok().then_some(state.files_opened);
        state.files_opened += usize::from(file.is_some());
        state.disk.push(DiskOp::Open { path: path.to_path_buf(), options, file });
        drop(state);
        let inner = opened?;
        Ok(Box::new(RecordingFile { inner, file: file.expect("opened"), recorder: self.recorder.clone() }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.recorder.disk(DiskOp::Read { path: path.to_path_buf() });
        self.inner.read(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.recorder.disk(DiskOp::CreateDir { path: path.to_path_buf() });
        self.inner.create_dir(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.recorder.disk(DiskOp::HardLink { original: original.to_path_buf(), link: link.to_path_buf() });
        self.inner.hard_link(original, link)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.recorder.disk(DiskOp::Rename { from: from.to_path_buf(), to: to.to_path_buf() });
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.recorder.disk(DiskOp::RemoveFile { path: path.to_path_buf() });
        self.inner.remove_file(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.recorder.disk(DiskOp::ReadDir { path: path.to_path_buf() });
        self.inner.read_dir(path)
    }

    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        self.recorder.disk(DiskOp::Metadata { path: path.to_path_buf() });
        self.inner.metadata(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.recorder.disk(DiskOp::SyncDir { path: path.to_path_buf() });
        self.inner.sync_dir(path)
    }
}

impl FsFile for RecordingFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.recorder.disk(DiskOp::Write { file: self.file, bytes: buf.len() });
        self.inner.write_all(buf)
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.recorder.disk(DiskOp::ReadAll { file: self.file });
        self.inner.read_all()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.recorder.disk(DiskOp::ReadAt { file: self.file, offset, bytes: buf.len() });
        self.inner.read_at(offset, buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.recorder.disk(DiskOp::Sync { file: self.file });
        self.inner.sync()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.recorder.disk(DiskOp::SetLen { file: self.file, len });
        self.inner.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        self.recorder.disk(DiskOp::Len { file: self.file });
        self.inner.len()
    }
}

struct RecordingNet {
    inner: Arc<dyn Net>,
    recorder: IoRecorder,
    /// The host this net serves as (`None`: the agent, a client).
    server_host: Option<String>,
}

impl Net for RecordingNet {
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
        let host = addr.split(':').next().unwrap_or(addr).to_owned();
        let connecting = self.inner.connect(addr);
        Box::pin(async move {
            let connected = connecting.await;
            let flow = Arc::new(Mutex::new(Flow::default()));
            if let Some(state) = &self.recorder.0 {
                lock(state).clients.push((host, connected.is_ok(), flow.clone()));
            }
            connected.map(|inner| Box::new(RecordingStream { inner, flow }) as Box<dyn ByteStream>)
        })
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let binding = self.inner.bind(addr);
        Box::pin(async move {
            let inner = binding.await?;
            match &self.server_host {
                Some(host) => {
                    Ok(Box::new(RecordingListener { inner, host: host.clone(), recorder: self.recorder.clone() })
                        as Box<dyn Listener>)
                }
                None => Ok(inner),
            }
        })
    }
}

struct RecordingListener {
    inner: Box<dyn Listener>,
    host: String,
    recorder: IoRecorder,
}

impl Listener for RecordingListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(Box<dyn ByteStream>, std::net::SocketAddr)>> {
        Box::pin(async move {
            let (inner, peer) = self.inner.accept().await?;
            let flow = Arc::new(Mutex::new(Flow::default()));
            if let Some(state) = &self.recorder.0 {
                lock(state).servers.push((self.host.clone(), flow.clone()));
            }
            Ok((Box::new(RecordingStream { inner, flow }) as Box<dyn ByteStream>, peer))
        })
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// A stream that counts what passes, and otherwise behaves exactly as the one it wraps
/// (vectored writes included: hyper writes differently to a stream that takes them).
struct RecordingStream {
    inner: Box<dyn ByteStream>,
    flow: Arc<Mutex<Flow>>,
}

impl RecordingStream {
    /// Records the size of a write that completed (plain or vectored alike) and passes the
    /// poll on unchanged.
    fn note_written(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = polled {
            lock(&self.flow).writes.push(n);
        }
        polled
    }
}

impl AsyncRead for RecordingStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            lock(&self.flow).read += buf.filled().len() - before;
        }
        polled
    }
}

impl AsyncWrite for RecordingStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_written(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
