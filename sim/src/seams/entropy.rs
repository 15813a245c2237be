use std::sync::Mutex;

use faultline_runtime::seams::Entropy;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A ChaCha8 stream derived from a seed and a stream name.
///
/// ChaCha8 is portable and specified, unlike `SmallRng` (whose algorithm may change between
/// `rand` releases) or `RandomState` (seeded by the OS). Each named stream uses its own ChaCha
/// stream id, so adding draws to one stream never reshuffles another.
#[derive(Debug)]
pub struct SimEntropy {
    rng: Mutex<ChaCha8Rng>,
}

impl SimEntropy {
    /// The stream `stream` of `seed`.
    pub fn new(seed: u64, stream: &str) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream_id(stream));
        Self { rng: Mutex::new(rng) }
    }
}

/// FNV-1a of the stream name: stable across Rust versions and platforms, unlike `Hash`.
pub fn stream_id(name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    name.bytes().fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

impl Entropy for SimEntropy {
    fn next_u64(&self) -> u64 {
        self.rng.lock().unwrap_or_else(|p| p.into_inner()).next_u64()
    }
}
