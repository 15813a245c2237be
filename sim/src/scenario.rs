//! Scenario registry. Scenarios are data files under `scenarios/`, compiled into the binary
//! so a fresh clone's `faultline sweep` needs no paths.

/// A built-in scenario.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioInfo {
    /// Unique name (`faultline run NAME`).
    pub name: &'static str,
    /// One line for `faultline scenarios`.
    pub description: &'static str,
}

/// Every built-in scenario, in listing order. Empty until the simulation harness lands.
pub const BUILT_IN_SCENARIOS: &[ScenarioInfo] = &[];
