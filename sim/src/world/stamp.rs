//! The run's one order of events, shared by the hosts that stamp what they saw.

use std::sync::Arc;

/// One order of events across the hosts of a run: every durability fact, outcome and effect
/// is stamped from it, so "before" means strictly before, never "in the same tick". The
/// simulator counts (its hosts run one at a time, on one thread); a real run reads
/// `CLOCK_MONOTONIC` in each process (one clock for the whole machine).
pub type Stamp = Arc<dyn Fn() -> u64 + Send + Sync>;
