//! Leases: the one-writer rule of a store shared by hosts that cannot see each other's
//! processes (FAILURE-LEASE-EPOCH). A writer holds a lease — owner, epoch, expiry — renewed
//! every third of its length while its process runs. A stopped or partitioned writer stops
//! renewing with it, its lease runs out, and a takeover moves the epoch on: every later
//! write the old writer sends under its epoch matches nothing and is refused as fenced.
//!
//! What every leased backend shares lives here, once: the bounds of a lease, the renewal
//! cadence, the takeover rule, and the set of leases a process keeps renewing. Where the
//! expiry is judged (the database's `now()`, the leased memory store's clock) and how the
//! epoch is compared (in the statement that does the work) is each backend's.
//! Backends: `production::pg` (PostgreSQL) and [`super::MemoryStore::leased`] (the
//! simulator's fleet store).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::seams::{OwnerIdentity, Process};
use crate::store::Takeover;
use crate::{Error, Result};

/// A writer's lease when none is configured, in milliseconds.
pub const LEASE_MS_DEFAULT: u64 = 30_000;
/// The shortest lease accepted, in milliseconds (it is renewed every third of it).
pub const LEASE_MS_MIN: u64 = 1_000;
/// The longest lease accepted, in milliseconds.
pub const LEASE_MS_MAX: u64 = 3_600_000;

/// How many renewals fit in one lease: a holder that misses fewer than this many rounds in a
/// row keeps its lease.
const RENEWALS_PER_LEASE: u32 = 3;

/// `lease_ms` as a lease, if within [`LEASE_MS_MIN`]..=[`LEASE_MS_MAX`].
pub(crate) fn check_lease_ms(lease_ms: u64) -> Result<Duration> {
    if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
        return Err(Error::BadBatch(format!("lease of {lease_ms} ms is outside {LEASE_MS_MIN}..={LEASE_MS_MAX} ms")));
    }
    Ok(Duration::from_millis(lease_ms))
}

/// How often a holder renews a lease of length `lease`.
pub(crate) fn renewal_interval(lease: Duration) -> Duration {
    lease / RENEWALS_PER_LEASE
}

/// The one-writer rule for a holder that also holds a lease: a holder whose lease is live is
/// refused unless it is provably dead; an expired lease makes it a dead owner whatever its
/// process looks like from here (a stopped or partitioned worker is a zombie, and its epoch
/// is fenced by the takeover).
pub(crate) fn check_lease_takeover(
    process: &dyn Process,
    id: &str,
    holder: Option<&OwnerIdentity>,
    lease_live: bool,
    takeover: Takeover,
) -> Result<()> {
    let Some(holder) = holder else { return Ok(()) };
    let describe_holder = if lease_live { holder.to_string() } else { format!("{holder}, whose lease expired") };
    // The file stores' rule, with a holder whose lease ran out counted as no live holder.
    super::check_takeover(process, id, Some(holder).filter(|_| lease_live), describe_holder, takeover)
}

/// The leases a process keeps renewing: session id → epoch. A writer is entered when it
/// takes its lease and leaves when it releases; a renewal that finds the epoch moved on
/// (taken over) drops it, and the writer's next write is refused by the epoch it carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeldLeases(Arc<Mutex<BTreeMap<String, u64>>>);

impl HeldLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps renewing the lease of session `id` at `epoch`.
    pub(crate) fn hold(&self, id: &str, epoch: u64) {
        self.lock().insert(id.to_owned(), epoch);
    }

    /// Stops renewing the lease of `id` at `epoch` (another epoch's entry is left alone: a
    /// newer writer of the same session in this process).
    pub(crate) fn drop_lease(&self, id: &str, epoch: u64) {
        let mut leases = self.lock();
        if leases.get(id) == Some(&epoch) {
            leases.remove(id);
        }
    }

    /// The leases to renew this round.
    pub(crate) fn held(&self) -> Vec<(String, u64)> {
        self.lock().iter().map(|(id, epoch)| (id.clone(), *epoch)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_renewed_three_times_per_length_and_bounded() {
        assert_eq!(renewal_interval(Duration::from_millis(3_000)), Duration::from_millis(1_000));
        assert!(check_lease_ms(LEASE_MS_MIN - 1).is_err());
        assert!(check_lease_ms(LEASE_MS_MAX + 1).is_err());
        assert_eq!(check_lease_ms(LEASE_MS_MIN).unwrap(), Duration::from_millis(LEASE_MS_MIN));
    }

    #[test]
    fn dropping_a_lease_leaves_a_newer_epoch_of_the_same_session_held() {
        let held = HeldLeases::default();
        held.hold("s", 2);
        held.drop_lease("s", 1);
        assert_eq!(held.held(), vec![("s".to_owned(), 2)]);
        held.drop_lease("s", 2);
        assert!(held.held().is_empty());
    }
}
