use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::seams::Entropy;

/// A CSPRNG seeded once from the operating system.
#[derive(Debug)]
pub struct OsEntropy {
    rng: Mutex<StdRng>,
}

impl OsEntropy {
    /// Seeds from the OS.
    pub fn new() -> Self {
        Self { rng: Mutex::new(StdRng::from_os_rng()) }
    }
}

impl Default for OsEntropy {
    fn default() -> Self {
        Self::new()
    }
}

impl Entropy for OsEntropy {
    fn next_u64(&self) -> u64 {
        // A poisoned lock only means another thread panicked mid-draw; the RNG state is fine.
        self.rng.lock().unwrap_or_else(|p| p.into_inner()).next_u64()
    }
}
