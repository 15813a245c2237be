/// CPU work that may run on several cores at once: the decoding of a recovery's lines.
///
/// Contract: `run` returns only when every job has run to its end; jobs are independent (they
/// share nothing mutable), so the result does not depend on their order. Production runs them
/// on scoped threads ([`crate::production::Threads`]); the simulator runs them one after
/// another on the caller's thread ([`Sequential`]), so a simulated run stays a function of its
/// seed and never starts an OS thread.
pub trait Compute: Send + Sync {
    /// How many jobs are worth running at once (1: no parallelism).
    fn parallelism(&self) -> usize;

    /// Runs every job and returns when all have finished.
    fn run<'a>(&self, jobs: Vec<Box<dyn FnOnce() + Send + 'a>>);
}

/// Every job on the caller's thread, in order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sequential;

impl Compute for Sequential {
    fn parallelism(&self) -> usize {
        1
    }

    fn run<'a>(&self, jobs: Vec<Box<dyn FnOnce() + Send + 'a>>) {
        for job in jobs {
            job();
        }
    }
}
