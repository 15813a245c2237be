//! Progress on stderr: a bar (runs done, runs/s, failures so far, ETA) when stderr is a
//! terminal, plain lines at every tenth otherwise (CI logs stay short and greppable).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// One job's progress.
pub struct Progress {
    bar: Option<ProgressBar>,
    /// Plain-line mode: print at all?
    plain: bool,
    unit: &'static str,
    started: Instant,
    last_tenth: AtomicUsize,
}

impl Progress {
    /// Progress in `unit`s; nothing at all unless `show`.
    pub fn new(unit: &'static str, show: bool) -> Self {
        let terminal = show && std::io::stderr().is_terminal();
        let bar = terminal.then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed_precise}, {per_sec}, ETA {eta}]")
                    .expect("a valid template"),
            );
            bar
        });
        Self { bar, plain: show && !terminal, unit, started: Instant::now(), last_tenth: AtomicUsize::new(0) }
    }

    /// `done` of `total`, `failed` of them failing.
    pub fn update(&self, done: usize, total: usize, failed: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(format!("{} failed", failed));
            return;
        }
        if !self.plain {
            return;
        }
        let tenth = done * 10 / total.max(1);
        if tenth > self.last_tenth.load(Ordering::SeqCst) || done == total {
            self.last_tenth.store(tenth, Ordering::SeqCst);
            eprintln!(
                "progress: {done}/{total} {} ({:.1} s, {failed} failed)",
                self.unit,
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    /// A phase without a count (shrink, bench): shown as the bar's message or one line.
    pub fn phase(&self, what: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_message(what.to_owned());
                bar.tick();
            }
            None if self.plain => eprintln!("progress: {what} ({:.1} s)", self.started.elapsed().as_secs_f64()),
            None => {}
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
