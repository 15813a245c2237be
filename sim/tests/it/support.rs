//! Helpers shared by the integration tests.

use std::time::Duration;

/// A turmoil builder with the project's fixed epoch and seed, and a simulated-time budget
/// generous enough for every test in this binary.
pub fn sim_builder(seed: u64) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder
        .epoch(faultline_sim::sim_epoch())
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(Duration::from_millis(10));
    builder
}
