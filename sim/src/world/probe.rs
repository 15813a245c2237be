//! The simulator's crash-point probe: at the planned hit of the planned point it freezes the
//! host's disk (everything after this instant is lost, as in a SIGKILL) and asks the driver to
//! crash the host.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use faultline_runtime::seams::{CrashPoint, Probe};

use crate::seams::FsFaults;

/// Shared between the probe (inside the host) and the driver.
#[derive(Debug, Default)]
pub struct CrashControl {
    /// Planned crashes, in order: point and 1-based hit (counted across incarnations).
    pub plan: std::collections::VecDeque<(CrashPoint, u32)>,
    /// Hits per point, across incarnations (coverage).
    pub hits: BTreeMap<CrashPoint, u32>,
    /// Set when the probe fired; the driver crashes the host and clears it.
    pub requested: Option<CrashPoint>,
    /// How many planned crashes fired.
    pub fired: usize,
}

/// The probe of one incarnation.
#[derive(Debug, Clone)]
pub struct SimProbe {
    /// Shared control.
    pub control: Arc<Mutex<CrashControl>>,
    /// This incarnation's disk faults (frozen when the probe fires).
    pub fs: FsFaults,
}

impl Probe for SimProbe {
    fn hit(&self, point: CrashPoint) -> bool {
        let mut control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        if control.requested.is_some() {
            // Already crashing: nothing after the crash instant may happen.
            return true;
        }
        let count = control.hits.entry(point).or_insert(0);
        *count += 1;
        let count = *count;
        if control.plan.front() == Some(&(point, count)) {
            control.plan.pop_front();
            control.requested = Some(point);
            control.fired += 1;
            self.fs.crash_now();
            return true;
        }
        false
    }
}
