//! One seed, one place: every random stream a simulated run uses is derived here from the
//! run's seed, so a reviewer can see them all at once and no derivation drifts.
//!
//! The streams are independent: each is its own ChaCha stream (or, for proptest, its own
//! ChaCha key), so adding draws to one never reshuffles another.

use proptest::test_runner::{RngAlgorithm, TestRng};

use crate::seams::SimEntropy;

/// The seed of one simulated run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seed(u64);

impl Seed {
    /// The run seeded with `value` (`faultline run NAME --seed VALUE`).
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// Seed of turmoil's own RNG. turmoil draws from it for message latency between the
    /// configured bounds (equal in every world here, so it picks nothing) and, in its
    /// `unstable-fs`, for how many blocks of an unsynced write survive a crash (the torn
    /// writes of `torn_block` scenarios) — so it does decide a fault, and replaying a seed
    /// depends on it.
    pub const fn turmoil(self) -> u64 {
        self.0
    }

    /// The entropy of incarnation `incarnation` of host `host` (jitter, ids, temp names): a
    /// restarted host draws a fresh stream, as a real process would.
    pub fn host(self, host: &str, incarnation: u64) -> SimEntropy {
        SimEntropy::new(self.0, &format!("{host}#{incarnation}"))
    }

    /// The stream of fault family `family` (`model`, `crash`, `fs`, `hole`, `rot/where`, ...):
    /// which faults a seed's swarm turns on and where they land.
    pub fn fault(self, family: &str) -> SimEntropy {
        SimEntropy::new(self.0, &format!("faults/{family}"))
    }

    /// The proptest RNG that draws the seed's generated conversation (`generated` scenario).
    pub fn workload_rng(self) -> TestRng {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&self.0.to_le_bytes());
        key[8..17].copy_from_slice(b"generated");
        TestRng::from_seed(RngAlgorithm::ChaCha, &key)
    }
}
