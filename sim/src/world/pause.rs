//! A worker host stopped for a while — a GC pause, a stopped VM, SIGSTOP — in the simulator.
//!
//! turmoil cannot stop one host, so the stop is made where a process meets the world: the
//! host's clock and network. During the window every sleep that ends, every connect, read,
//! write and flush waits until the window closes; the host's tasks make no progress it could
//! be seen making, its lease renewals included, while simulated time runs on for everyone
//! else. On waking it resumes exactly where it was, believing what it believed.
//!
//! What it does not model: a stop between two instructions with no await between them. The
//! runtime's last check before a dispatch (the durable `tool/call`) and the dispatch's first
//! byte have none between them in the simulator; a real stop could fall there, which only a
//! receiver that deduplicates by execution id closes (docs/fleet.md says so).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use faultline_runtime::seams::{BoxFuture, ByteStream, Clock, Listener, Monotonic, Net};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The window a host is stopped for, in simulated time since the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    pub from: Duration,
    pub until: Duration,
}

impl Pause {
    fn now() -> Duration {
        turmoil::sim_elapsed().expect("a pause is kept inside a turmoil host")
    }

    /// How long the host must still wait, if the window is open now.
    fn remaining(self) -> Option<Duration> {
        let now = Self::now();
        (now >= self.from && now < self.until).then(|| self.until - now)
    }

    /// Waits out the window on `clock` if it is open.
    async fn hold(self, clock: &dyn Clock) {
        if let Some(left) = self.remaining() {
            clock.sleep(left).await;
        }
    }
}

/// The host's clock: a sleep that ends inside the window ends when the window does.
pub(crate) struct PausedClock {
    pub inner: Arc<dyn Clock>,
    pub pause: Pause,
}

impl Clock for PausedClock {
    fn now(&self) -> Monotonic {
        self.inner.now()
    }

    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let (slept, pause, clock) = (self.inner.sleep(duration), self.pause, self.inner.clone());
        Box::pin(async move {
            slept.await;
            pause.hold(clock.as_ref()).await;
        })
    }
}

/// The host's network: nothing goes out or comes in while the host is stopped.
pub(crate) struct PausedNet {
    pub inner: Arc<dyn Net>,
    /// The host's own clock (not paused), to wait the window out on.
    pub clock: Arc<dyn Clock>,
    pub pause: Pause,
}

impl Net for PausedNet {
    fn connect(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn ByteStream>>> {
        let (pause, clock) = (self.pause, self.clock.clone());
        let connecting = self.inner.connect(addr);
        Box::pin(async move {
            pause.hold(clock.as_ref()).await;
            let stream = connecting.await?;
            pause.hold(clock.as_ref()).await;
            Ok(Box::new(PausedStream { inner: stream, pause, clock, waiting: None }) as Box<dyn ByteStream>)
        })
    }

    fn bind(&self, addr: &str) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        self.inner.bind(addr)
    }
}

/// A connection of a stopped host: every poll first waits out the window.
struct PausedStream {
    inner: Box<dyn ByteStream>,
    pause: Pause,
    clock: Arc<dyn Clock>,
    waiting: Option<BoxFuture<'static, ()>>,
}

impl PausedStream {
    /// `Ready` once the host is not stopped; `Pending` (woken at the window's end) while it is.
    fn gate(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waiting.is_none() {
            let Some(left) = self.pause.remaining() else { return Poll::Ready(()) };
            self.waiting = Some(self.clock.sleep(left));
        }
        let waiting = self.waiting.as_mut().expect("set above");
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.waiting = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for PausedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.gate(cx));
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PausedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        std::task::ready!(self.gate(cx));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.gate(cx));
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.gate(cx));
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
