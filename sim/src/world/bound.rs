//! The liveness bound of one run (FAILURE-FINDINGS): how long after the faults heal the
//! workload may take, derived from the agent's own promises rather than a harness constant.
//!
//! A wait that began inside the fault window ends when the agent's own setting says it
//! ends: a stream stalled by a partition is given up at the provider's idle watchdog, a retry
//! wait lasts up to the backoff cap, a call whose reply was lost is given up at the tool's
//! deadline. The bound is the scenario's own window for the workload plus each of those
//! waits, so an agent configured to wait five minutes for a silent stream is judged against
//! five minutes, and a report says so. A tool that declares no deadline adds nothing: a
//! call of it whose reply never comes is waited for without end, and a finding says so.

use std::time::Duration;

use faultline_runtime::llm::ResolvedProvider;

/// Most waits a bound names (the provider's, and one per tool at most).
const WAITS_MAX: usize = 64;

/// One wait the agent's settings allow past the heal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BoundWait {
    /// The setting, as the user spells it (`provider.idle_timeout_ms`, `tool send_invoice
    /// timeout`).
    pub setting: String,
    /// Its value, in ms.
    pub value_ms: u64,
    /// The setting was not written: its default applies.
    pub default: bool,
    /// What wait it bounds.
    pub bounds: &'static str,
}

/// How long after the heal a run's workload may take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LivenessBound {
    /// The instant the faults heal, in simulated ms.
    pub heal_at_ms: u64,
    /// The scenario's own window for the workload after the heal, in ms.
    pub workload_ms: u64,
    /// The longest of each kind of wait the agent's settings allow past the heal.
    pub waits: Vec<BoundWait>,
    /// Tools that declare no deadline (a lost reply is waited for without end).
    pub untimed_tools: Vec<String>,
}

/// A run that converged within its bound, but past the scenario's own window: what the
/// agent's own settings made it wait for after the heal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlowRecovery {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// How long after the heal the workload converged, in ms.
    pub took_ms: u64,
    /// The scenario's own window for the workload after the heal, in ms.
    pub workload_ms: u64,
    /// Each wait that ended after the heal, naming its setting and value.
    pub waits: Vec<String>,
}

impl std::fmt::Display for SlowRecovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} seed {}: recovery took {} ms after the heal (the scenario allows {} ms): {}",
            self.scenario,
            self.seed,
            grouped(self.took_ms),
            grouped(self.workload_ms),
            self.waits.join("; ")
        )
    }
}

/// Most waits one slow recovery names.
const SLOW_WAITS_MAX: usize = 8;

/// The waits of a converged run that ended after the heal, from its recovered `transcript`
/// and the instants its records were seen durable outside the host (`durable_at`, seq → ms),
/// when the run took longer than the scenario's own window; `None` otherwise, or when no
/// wait of the agent's settings explains it.
pub(crate) fn slow_recovery(
    bound: &LivenessBound,
    transcript: &[faultline_runtime::event::Record],
    durable_at: &std::collections::BTreeMap<u64, u64>,
    end_ms: u64,
) -> Option<(u64, Vec<String>)> {
    use faultline_runtime::event::{ErrorCode, Event};
    let took_ms = end_ms.checked_sub(bound.heal_at_ms)?;
    if took_ms <= bound.workload_ms {
        return None;
    }
    let setting = |name: &str| bound.wait(name).map_or_else(|| name.to_owned(), ToString::to_string);
    let names: std::collections::BTreeMap<(u32, u32, &str), &str> = transcript
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolCall(call) => Some(((call.turn, call.step, call.call_id.as_str()), call.name.as_str())),
            _ => None,
        })
        .collect();
    let mut waits = Vec::new();
    for record in transcript {
        let Some(&at_ms) = durable_at.get(&record.seq).filter(|at| **at >= bound.heal_at_ms) else { continue };
        let wait = match &record.event {
            Event::LlmRetry(retry) if retry.failure.code == ErrorCode::Timeout => format!(
                "a stalled stream waited for the idle watchdog, or while it pinged for at most {}, and was given up \
                 at {} ms",
                setting("provider.progress_timeout_ms"),
                grouped(at_ms)
            ),
            Event::LlmRetry(retry) if retry.delay_ms > 0 => format!(
                "retry {} waited {} ms after {} ({})",
                retry.retry,
                grouped(retry.delay_ms),
                retry.failure.code,
                setting("provider.retry_policy.backoff.max_delay_ms")
            ),
            Event::ToolResult(result) if result.error.as_ref().is_some_and(|e| e.code == ErrorCode::ToolTimeout) => {
                let name = names.get(&(result.turn, result.step, result.call_id.as_str())).copied().unwrap_or("?");
                format!("a call of tool {name} waited for its deadline and was given up at {} ms", grouped(at_ms))
            }
            _ => continue,
        };
        if waits.len() < SLOW_WAITS_MAX && !waits.contains(&wait) {
            waits.push(wait);
        }
    }
    (!waits.is_empty()).then_some((took_ms, waits))
}

/// The provider settings the bound reads, as resolved, and whether each was written.
pub(crate) struct ProviderPromises<'a> {
    pub route: &'a ResolvedProvider,
    pub idle_written: bool,
    pub max_delay_written: bool,
}

/// The agent's tools as the bound reads them: name and deadline.
pub(crate) type ToolDeadlines = Vec<(String, Option<Duration>)>;

impl LivenessBound {
    /// The bound of a run healing at `heal_at_ms` whose scenario gives the workload
    /// `workload_ms` after it, on the provider `promises` (the longest of each when a live
    /// update changes them) and `tools`.
    pub(crate) fn derive(
        heal_at_ms: u64,
        workload_ms: u64,
        promises: &[ProviderPromises<'_>],
        tools: &ToolDeadlines,
    ) -> Self {
        let mut waits = Vec::new();
        // A silent stall ends at the idle watchdog; one that pings (a provider queueing the
        // request) only at the progress bound, which is never shorter.
        if let Some(p) = promises.iter().max_by_key(|p| p.route.progress_timeout) {
            waits.push(BoundWait {
                setting: "provider.progress_timeout_ms".into(),
                value_ms: millis(p.route.progress_timeout),
                default: !p.idle_written,
                bounds: "a stream stalled before the heal is given up at the idle watchdog, or at the progress bound \
                         when it keeps pinging",
            });
        }
        if let Some(p) = promises.iter().max_by_key(|p| p.route.retry.backoff().max_delay_ms) {
            waits.push(BoundWait {
                setting: "provider.retry_policy.backoff.max_delay_ms".into(),
                value_ms: p.route.retry.backoff().max_delay_ms,
                default: !p.max_delay_written,
                bounds: "a retry wait begun before the heal lasts up to the backoff cap",
            });
        }
        let longest = tools.iter().filter_map(|(name, t)| t.map(|t| (name, millis(t)))).max_by_key(|(_, ms)| *ms);
        if let Some((name, ms)) = longest {
            waits.push(BoundWait {
                setting: format!("tool {name} timeout"),
                value_ms: ms,
                default: false,
                bounds: "a call whose reply was lost before the heal is given up at its deadline",
            });
        }
        let mut untimed_tools: Vec<String> =
            tools.iter().filter(|(_, t)| t.is_none()).map(|(name, _)| name.clone()).collect();
        untimed_tools.sort();
        untimed_tools.dedup();
        assert!(waits.len() <= WAITS_MAX);
        Self { heal_at_ms, workload_ms, waits, untimed_tools }
    }

    /// The whole bound after the heal, in ms.
    pub fn total_ms(&self) -> u64 {
        self.waits.iter().fold(self.workload_ms, |sum, w| sum.saturating_add(w.value_ms))
    }

    /// The instant the workload must have converged by, in simulated ms.
    pub fn deadline_ms(&self) -> u64 {
        self.heal_at_ms.saturating_add(self.total_ms())
    }

    /// The wait of `setting`, if the bound has one.
    pub fn wait(&self, setting: &str) -> Option<&BoundWait> {
        self.waits.iter().find(|w| w.setting == setting)
    }
}

impl std::fmt::Display for BoundWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let default = if self.default { ", the default" } else { "" };
        write!(f, "{} = {} ms{default}", self.setting, grouped(self.value_ms))
    }
}

impl std::fmt::Display for LivenessBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ms after the heal at {} ms: the scenario's {} ms",
            grouped(self.total_ms()),
            grouped(self.heal_at_ms),
            grouped(self.workload_ms)
        )?;
        for wait in &self.waits {
            write!(f, " + {wait}")?;
        }
        if !self.untimed_tools.is_empty() {
            write!(f, " (no deadline: tool {})", self.untimed_tools.join(", tool "))?;
        }
        Ok(())
    }
}

/// The bound of a run of `plan`'s scenario: its provider settings (and a live update's), and
/// the deadlines of the tools that may wait on the network (an embedder's own, each scenario
/// tool that declares one).
pub(crate) fn of_run(
    format: faultline_runtime::llm::WireFormat,
    heal_at_ms: u64,
    workload_ms: u64,
    providers: &[&str],
    scenario_tools: &[crate::scenario::ScenarioTool],
    user: Option<&super::user::AgentUnderTest>,
) -> LivenessBound {
    let resolved: Vec<(ResolvedProvider, [bool; 3])> = providers
        .iter()
        .filter_map(|extra| {
            let route = super::setup::resolve_route(format, super::setup::SIM_MODEL_ROOT, extra).ok()?;
            let written = super::setup::written_keys(
                format,
                extra,
                [
                    &["provider", "progress_timeout_ms"],
                    &["provider", "idle_timeout_ms"],
                    &["provider", "retry_policy", "backoff", "max_delay_ms"],
                ],
            );
            Some((route, written))
        })
        .collect();
    let promises: Vec<ProviderPromises<'_>> = resolved
        .iter()
        .map(|(route, [progress, idle, max_delay])| ProviderPromises {
            route,
            idle_written: *progress || *idle,
            max_delay_written: *max_delay,
        })
        .collect();
    let mut tools: ToolDeadlines = scenario_tools
        .iter()
        .filter_map(|t| t.timeout_ms.map(|ms| (t.name.clone(), Some(Duration::from_millis(ms)))))
        .collect();
    if let Some(user) = user {
        let set = (user.tools)(&crate::seams::sim_seams(0, "agent", 0));
        for schema in set.schemas() {
            let deadline = set.get(&schema.name).and_then(|tool| tool.timeout());
            tools.push((schema.name, deadline));
        }
    }
    let mut approvals: Vec<(String, u64)> = scenario_tools
        .iter()
        .filter_map(|t| t.approval_policy().and_then(|p| p.deadline_ms).map(|ms| (t.name.clone(), ms)))
        .collect();
    if let Some(user) = user {
        let set = (user.tools)(&crate::seams::sim_seams(0, "agent", 0));
        for schema in set.schemas() {
            let deadline = set.get(&schema.name).and_then(|tool| tool.approval()).and_then(|p| p.deadline_ms);
            approvals.extend(deadline.map(|ms| (schema.name, ms)));
        }
    }
    let mut bound = LivenessBound::derive(heal_at_ms, workload_ms, &promises, &tools);
    if let Some((name, ms)) = approvals.into_iter().max_by_key(|(_, ms)| *ms) {
        bound.waits.push(BoundWait {
            setting: format!("tool {name} approval_deadline_ms"),
            value_ms: ms,
            default: false,
            bounds: "a call waiting for a person when the faults heal is answered at its approval deadline",
        });
    }
    bound
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `300000` as `300 000`: a bound is read by people.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(extra: &str) -> ResolvedProvider {
        super::super::setup::resolve_route(
            faultline_runtime::llm::WireFormat::Openai,
            super::super::setup::SIM_MODEL_ROOT,
            extra,
        )
        .unwrap()
    }

    #[test]
    fn the_bound_adds_each_wait_the_settings_allow_to_the_scenarios_window() {
        let route = route("");
        let promises = [ProviderPromises { route: &route, idle_written: false, max_delay_written: false }];
        let tools = vec![
            ("send".to_owned(), Some(Duration::from_millis(10_000))),
            ("quick".to_owned(), Some(Duration::from_millis(500))),
            ("hang".to_owned(), None),
        ];
        let bound = LivenessBound::derive(60_000, 60_000, &promises, &tools);
        assert_eq!(bound.total_ms(), 60_000 + 900_000 + 10_000 + 10_000);
        assert_eq!(bound.deadline_ms(), 60_000 + bound.total_ms());
        assert_eq!(bound.untimed_tools, ["hang"]);
        assert_eq!(
            bound.to_string(),
            "980 000 ms after the heal at 60 000 ms: the scenario's 60 000 ms + provider.progress_timeout_ms = 900 000 \
             ms, the default + provider.retry_policy.backoff.max_delay_ms = 10 000 ms, the default + tool send \
             timeout = 10 000 ms (no deadline: tool hang)"
        );
    }

    #[test]
    fn a_live_update_is_judged_by_the_longer_of_its_settings() {
        let (short, long) = (route("idle_timeout_ms = 1000\n"), route("idle_timeout_ms = 90000\n"));
        let promises = [
            ProviderPromises { route: &short, idle_written: true, max_delay_written: false },
            ProviderPromises { route: &long, idle_written: true, max_delay_written: false },
        ];
        let bound = LivenessBound::derive(0, 1_000, &promises, &Vec::new());
        assert_eq!(bound.wait("provider.progress_timeout_ms").map(|w| w.value_ms), Some(270_000));
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1 000");
        assert_eq!(grouped(300_000), "300 000");
        assert_eq!(grouped(1_234_567), "1 234 567");
    }
}
