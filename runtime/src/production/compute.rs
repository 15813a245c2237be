//! Parallel CPU work on the machine's cores.

use crate::seams::Compute;

/// Most threads one `run` starts: recovery's decode saturates a few cores before it starves on
/// the single-threaded validator after it.
pub const THREADS_MAX: usize = 8;

/// Jobs on scoped OS threads, one per job (the calling thread runs the first).
#[derive(Debug, Clone, Copy)]
pub struct Threads {
    cores: usize,
}

impl Threads {
    /// As many as the machine has cores (at most [`THREADS_MAX`]).
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, THREADS_MAX);
        Self { cores }
    }
}

impl Default for Threads {
    fn default() -> Self {
        Self::new()
    }
}

impl Compute for Threads {
    fn parallelism(&self) -> usize {
        self.cores
    }

    fn run<'a>(&self, jobs: Vec<Box<dyn FnOnce() + Send + 'a>>) {
        let mut jobs = jobs.into_iter();
        let Some(first) = jobs.next() else { return };
        std::thread::scope(|scope| {
            for job in jobs {
                scope.spawn(job);
            }
            first();
        });
    }
}
