/// Randomness, as the runtime is allowed to see it.
///
/// Contract: the production source is seeded by the OS and unpredictable; the simulation source
/// is a named, portable PRNG derived from the scenario seed, so the same seed yields the same
/// stream on every machine and every run. Consumers must draw the same number of values on the
/// same code path (never "retry until unique"), or determinism is lost.
pub trait Entropy: Send + Sync {
    /// The next 64 random bits.
    fn next_u64(&self) -> u64;
}

/// Derived draws, defined once on top of [`Entropy::next_u64`] so both worlds agree on them.
pub trait EntropyExt: Entropy {
    /// A uniform float in `[0, 1]` (both ends reachable: jitter tests pin `u = 0` and `u = 1`).
    fn unit_f64(&self) -> f64 {
        // 53 bits is the f64 mantissa; dividing by 2^53 - 1 makes 1.0 reachable.
        const MANTISSA_MAX: u64 = (1 << 53) - 1;
        (self.next_u64() >> 11) as f64 / MANTISSA_MAX as f64
    }

    /// `len` lowercase hex characters (ids, temp-file suffixes).
    fn hex_id(&self, len: usize) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(len);
        let mut bits = 0u64;
        for i in 0..len {
            if i % 16 == 0 {
                bits = self.next_u64();
            }
            out.push(HEX[(bits & 0xf) as usize] as char);
            bits >>= 4;
        }
        out
    }
}

impl<T: Entropy + ?Sized> EntropyExt for T {}
