//! Parallel CPU work on the machine's cores.

use crate::seams::Compute;

/// Most threads one `run` starts: recovery's decode saturates a few cores before it starves on
/// the single-threaded validator after it.
pub const THREADS_MAX: usize = 8;

/// Jobs on the machine's cores: the calling thread and up to `cores - 1` scoped helpers take
/// the next job from one queue until it is empty, the caller starting with the first (with
/// one core, or one job, no helper: the caller runs them all in order).
///
/// Why a queue and not a thread per job: recovery hands over the commit of one batch and the
/// decoding of the next, in several parts. With a thread per job three or more runnable
/// threads shared two cores, and a profile of the zstd recovery mix showed one core idle for
/// half of each batch (the scheduler left a finished core empty while two decoders shared the
/// other). Helpers that pull work keep every core busy until the last part.
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
        let helpers = self.cores.min(jobs.len()).saturating_sub(1);
        let mut jobs = jobs.into_iter();
        let Some(first) = jobs.next() else { return };
        let queue = std::sync::Mutex::new(jobs);
        // The lock is held only to take a job, never while one runs: a job that panics
        // cannot poison it (the scope re-raises the panic when it joins).
        let next = || queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                scope.spawn(|| {
                    while let Some(job) = next() {
                        job();
                    }
                });
            }
            first();
            while let Some(job) = next() {
                job();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Threads;
    use crate::seams::Compute;

    #[test]
    fn every_job_runs_exactly_once_whatever_the_cores() {
        for cores in 1..=4 {
            let threads = Threads { cores };
            for count in [0usize, 1, 2, 3, 17] {
                let mut slots = vec![0usize; count];
                let runs = AtomicUsize::new(0);
                let jobs: Vec<Box<dyn FnOnce() + Send + '_>> = slots
                    .iter_mut()
                    .enumerate()
                    .map(|(i, slot)| {
                        let runs = &runs;
                        Box::new(move || {
                            *slot += i + 1;
                            runs.fetch_add(1, Ordering::Relaxed);
                        }) as Box<dyn FnOnce() + Send + '_>
                    })
                    .collect();
                threads.run(jobs);
                assert_eq!(runs.load(Ordering::Relaxed), count, "{cores} cores, {count} jobs");
                assert_eq!(slots, (1..=count).collect::<Vec<_>>(), "{cores} cores, {count} jobs");
            }
        }
    }

    /// `parallelism` is what the pool does, not a number it reports: with more jobs than it,
    /// exactly that many run at once (each job holds its place until every one of the first
    /// `parallelism` has started, and counts how many run beside it).
    #[test]
    fn parallelism_is_how_many_jobs_run_at_once() {
        for threads in [Threads::new(), Threads { cores: 1 }, Threads { cores: 3 }] {
            let width = threads.parallelism();
            assert!((1..=super::THREADS_MAX).contains(&width), "{width}");
            let (running, most, started) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let jobs: Vec<Box<dyn FnOnce() + Send + '_>> = (0..width * 3)
                .map(|_| {
                    let (running, most, started) = (&running, &most, &started);
                    Box::new(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        started.fetch_add(1, Ordering::SeqCst);
                        // Hold the place until a full width has started (or the whole batch
                        // has, for the last ones), so every place is filled at least once.
                        while started.load(Ordering::SeqCst) < width && std::time::Instant::now() < deadline {
                            std::thread::yield_now();
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            threads.run(jobs);
            assert_eq!(most.load(Ordering::SeqCst), width, "{width} jobs at once, never more");
        }
    }

    /// With two cores, two jobs run at the same time: each waits (a bounded time) for the
    /// other to start. Run one after the other, the first would wait in vain.
    #[test]
    fn jobs_share_the_cores() {
        let (a_started, a_seen) = std::sync::mpsc::channel();
        let (b_started, b_seen) = std::sync::mpsc::channel();
        let met = AtomicUsize::new(0);
        let wait = std::time::Duration::from_secs(10);
        let met_ref = &met;
        let jobs: Vec<Box<dyn FnOnce() + Send + '_>> = vec![
            Box::new(move || {
                let _ = a_started.send(());
                if b_seen.recv_timeout(wait).is_ok() {
                    met_ref.fetch_add(1, Ordering::Relaxed);
                }
            }),
            Box::new(move || {
                let _ = b_started.send(());
                if a_seen.recv_timeout(wait).is_ok() {
                    met_ref.fetch_add(1, Ordering::Relaxed);
                }
            }),
        ];
        Threads { cores: 2 }.run(jobs);
        assert_eq!(met.load(Ordering::Relaxed), 2, "both jobs ran at once");
    }

    // Whichever thread took it, the panic reaches the caller (with the job's message when the
    // caller ran it, the scope's when a helper did).
    #[test]
    #[should_panic]
    fn a_panicking_job_is_not_swallowed() {
        let jobs: Vec<Box<dyn FnOnce() + Send>> =
            vec![Box::new(|| ()), Box::new(|| panic!("a job failed")), Box::new(|| ()), Box::new(|| ())];
        Threads { cores: 2 }.run(jobs);
    }
}
