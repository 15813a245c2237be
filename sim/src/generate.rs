//! Generated workloads: proptest strategies for whole conversations (random numbers of turns
//! and steps, tool calls with and without side effects, parallel calls, slow tools with their
//! own deadlines, cancels), so the harness explores beyond the hand-written scenario files.
//!
//! Seeds stay the unit of replay: [`workload`] draws one value of the strategy from a
//! proptest RNG seeded by the run's seed, so `faultline run generated --seed N` is the same
//! conversation every time. The integration tests drive the same strategy through proptest's
//! runner, which also shrinks a failing conversation.

pub use crate::world::seeded::Swarm;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

use faultline_runtime::seams::CRASH_POINTS;

use crate::model_server::{Frame, Response};
use crate::scenario::{
    CrashFault, DiskFull, DiskFullRefuses, FaultPlan, FsErrorKind, FsFault, Partition, Scenario, ScenarioTool,
    ToolKind, FS_CRASH_OP_MIN, FS_OP_MAX, PARTITION_FROM_MS_MAX, PARTITION_MS_MAX,
};

/// Most turns (user messages) of one generated conversation.
pub const TURNS_MAX: usize = 4;
/// Most tool-calling steps of one generated turn before its final answer.
pub const STEPS_PER_TURN_MAX: usize = 2;
/// Most parallel calls of one generated step.
pub const CALLS_PER_STEP_MAX: usize = 3;
/// Longest a generated slow tool works, in ms.
pub const SLOW_WORK_MS_MAX: u64 = 3_000;
/// Latest generated cancel, in simulated ms.
pub const CANCEL_AT_MS_MAX: u64 = 4_000;

/// The tools a generated conversation may call (`refund` waits for the person's approval).
const SEND: &str = "send";
const ECHO: &str = "echo";
const SLOW: &str = "slow";
const REFUND: &str = "refund";
/// The approval deadline of the generated `refund`, in simulated ms.
pub const REFUND_APPROVAL_DEADLINE_MS: u64 = 2_000;
/// Longest a generated person thinks before deciding, in simulated ms: past the deadline
/// sometimes, so that decisions come late.
pub const PERSON_THINK_MS_GENERATED_MAX: u64 = 2_500;

/// One generated conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Per turn, per step, the tools called in parallel.
    pub turns: Vec<Vec<Vec<&'static str>>>,
    /// How long the slow tool works, and whether it ignores the abort signal.
    pub slow_work_ms: u64,
    /// The slow tool's own deadline.
    pub slow_timeout_ms: u64,
    /// The slow tool keeps working after the abort (slow cleanup).
    pub slow_ignores_abort: bool,
    /// Tool calls run at once.
    pub tool_concurrency: usize,
    /// A cancel at this simulated time, and whether queued input is kept with a new message.
    pub cancel: Option<(u64, bool)>,
    /// Who decides the `refund` calls.
    pub person: crate::Person,
}

/// The strategy of the person deciding approvals: mostly approving, sometimes late, denying,
/// silent, deciding twice, racing a second worker, cancelling first, cancelling right after
/// continuing or deciding while the host is down.
fn person_strategy() -> impl Strategy<Value = crate::Person> {
    use crate::PersonDecision;
    let decision = prop_oneof![6 => Just(PersonDecision::Approve), 2 => Just(PersonDecision::Deny), 1 => Just(PersonDecision::Never)];
    (decision, 0..=PERSON_THINK_MS_GENERATED_MAX, prop::bool::weighted(0.2), prop::bool::weighted(0.2)).prop_flat_map(
        |(decision, think_ms, twice, race)| {
            // Drawn last, so the rest of a seed's person stays what it was.
            (prop::bool::weighted(0.1), prop::bool::weighted(0.5), prop::bool::weighted(0.1)).prop_map(
                move |(cancel_first, while_down, cancel_after_continue)| crate::Person {
                    decision,
                    think_ms,
                    twice,
                    race,
                    cancel_first,
                    cancel_after_continue,
                    while_down,
                },
            )
        },
    )
}

/// The strategy of whole conversations.
pub fn workload_strategy() -> impl Strategy<Value = Workload> {
    let call = prop_oneof![3 => Just(SEND), 2 => Just(ECHO), 1 => Just(SLOW), 2 => Just(REFUND)];
    let step = prop::collection::vec(call, 1..=CALLS_PER_STEP_MAX);
    let turn = prop::collection::vec(step, 0..=STEPS_PER_TURN_MAX);
    (
        prop::collection::vec(turn, 1..=TURNS_MAX),
        10..=SLOW_WORK_MS_MAX,
        200..=2_000u64,
        any::<bool>(),
        1..=4usize,
        prop::option::weighted(0.25, (0..=CANCEL_AT_MS_MAX, any::<bool>())),
        person_strategy(),
    )
        .prop_map(
            |(turns, slow_work_ms, slow_timeout_ms, slow_ignores_abort, tool_concurrency, cancel, person)| Workload {
                turns,
                slow_work_ms,
                slow_timeout_ms,
                slow_ignores_abort,
                tool_concurrency,
                cancel,
                person,
            },
        )
}

/// Most planned crashes in one generated fault plan.
pub const CRASHES_MAX: usize = 2;
/// Most partitions in one generated fault plan.
pub const PARTITIONS_MAX: usize = 2;

/// The strategy of fault plans: crashes at any crash point (which hit, how long the host
/// stays down), a torn-write block size, a disk error, a crash before a disk operation, and
/// partitions to the model or the gateway. Proptest shrinks a failing plan structurally
/// (fewer crashes, no disk fault, shorter partitions).
pub fn fault_plan_strategy() -> impl Strategy<Value = FaultPlan> {
    let crash = (prop::sample::select(CRASH_POINTS.to_vec()), 1..=2u32, 100..500u64)
        .prop_map(|(point, hit, restart_after_ms)| CrashFault { point, hit, restart_after_ms });
    let fs = (
        prop::option::of(prop::sample::select(vec![512u64, 4096])),
        prop::option::of((0..FS_OP_MAX, prop::sample::select(vec![FsErrorKind::Eio, FsErrorKind::Enospc]))),
        prop::option::of(FS_CRASH_OP_MIN..FS_OP_MAX),
    )
        .prop_map(|(block_size, error, crash_before_op)| FsFault {
            block_size,
            fail_op: error.map(|(op, _)| op),
            fail_kind: error.map(|(_, kind)| kind),
            crash_before_op,
            power_loss_hole: false,
            torn_mid_line: false,
        });
    let partition =
        (prop::sample::select(vec!["model", "gateway"]), 0..PARTITION_FROM_MS_MAX, 100..100 + PARTITION_MS_MAX)
            .prop_map(|(other, from_ms, length_ms)| Partition {
                a: "agent".into(),
                b: other.into(),
                from_ms,
                to_ms: from_ms + length_ms,
            });
    let refuses =
        prop::sample::select(vec![DiskFullRefuses::NewBlocks, DiskFullRefuses::Everything, DiskFullRefuses::Fsync]);
    let disk_full = (0..PARTITION_FROM_MS_MAX, 100..100 + PARTITION_MS_MAX, refuses)
        .prop_map(|(from_ms, length_ms, refuses)| DiskFull { from_ms, to_ms: from_ms + length_ms, refuses });
    (
        prop::collection::vec(crash, 0..=CRASHES_MAX),
        prop::option::of(fs),
        prop::collection::vec(partition, 0..=PARTITIONS_MAX),
        prop::option::of(disk_full),
    )
        .prop_map(|(crashes, fs, partitions, disk_full)| FaultPlan {
            crashes,
            fs,
            partitions,
            disk_full,
            ..FaultPlan::default()
        })
}

/// `scenario` with its conversation for `seed` when it is generated (on `user`'s own tools
/// when an agent under test is given), any other scenario as it is. The world runs only
/// expanded scenarios: it never draws a conversation itself.
pub(crate) fn expand<'a>(
    scenario: &'a Scenario,
    seed: u64,
    user: Option<&crate::world::AgentUnderTest>,
) -> std::borrow::Cow<'a, Scenario> {
    match (scenario.generated, user) {
        (true, Some(user)) => {
            std::borrow::Cow::Owned(user_workload(seed, &user.schemas()).apply(scenario, user.outbox_tools()))
        }
        (true, None) => std::borrow::Cow::Owned(workload(seed).apply(scenario)),
        (false, _) => std::borrow::Cow::Borrowed(scenario),
    }
}

/// The conversation seed `seed` stands for.
pub fn workload(seed: u64) -> Workload {
    let mut runner = TestRunner::new_with_rng(Config::default(), crate::seed::Seed::new(seed).workload_rng());
    workload_strategy().new_tree(&mut runner).expect("the workload strategy never rejects").current()
}

impl Workload {
    /// Puts this conversation into `base` (which keeps its name, provider, timing and fault
    /// plan): messages, tools and the model's script of good responses. Faults drawn from
    /// the seed are interleaved later, when the run's plan is resolved.
    pub fn apply(&self, base: &Scenario) -> Scenario {
        let mut scenario = base.clone();
        scenario.generated = false;
        scenario.messages = (0..self.turns.len()).map(|t| format!("task {t}")).collect();
        scenario.tools = vec![
            ScenarioTool { name: SEND.into(), kind: ToolKind::Gateway, ..ScenarioTool::default() },
            ScenarioTool { name: ECHO.into(), kind: ToolKind::Echo, ..ScenarioTool::default() },
            ScenarioTool {
                name: SLOW.into(),
                kind: ToolKind::Sleep,
                timeout_ms: Some(self.slow_timeout_ms),
                work_ms: self.slow_work_ms,
                ignore_abort: self.slow_ignores_abort,
                ..ScenarioTool::default()
            },
            ScenarioTool {
                name: REFUND.into(),
                kind: ToolKind::Echo,
                approval: true,
                approval_deadline_ms: Some(REFUND_APPROVAL_DEADLINE_MS),
                ..ScenarioTool::default()
            },
        ];
        if self.turns.iter().flatten().flatten().any(|name| *name == REFUND) {
            scenario.faults.person = Some(self.person.clone());
        }
        scenario.tool_concurrency = Some(self.tool_concurrency);
        let turns: Vec<Vec<Vec<(String, String)>>> = self
            .turns
            .iter()
            .enumerate()
            .map(|(t, steps)| {
                let calls = |(s, calls): (usize, &Vec<&str>)| {
                    let text = |i| format!("{{\"text\":\"turn {t} step {s} call {i}\"}}");
                    calls.iter().enumerate().map(|(i, name)| ((*name).to_owned(), text(i))).collect()
                };
                steps.iter().enumerate().map(calls).collect()
            })
            .collect();
        script_and_cancel(scenario, &turns, self.cancel)
    }
}

/// The model's script for `turns`: per turn, one response per step calling its tools in
/// parallel (`(name, arguments JSON)`), then a text answer.
fn script_of_calls(turns: &[Vec<Vec<(String, String)>>]) -> Vec<Response> {
    let mut responses = Vec::new();
    for (t, steps) in turns.iter().enumerate() {
        for (s, calls) in steps.iter().enumerate() {
            let frames = calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| Frame::ToolCall {
                    index: i as u32,
                    id: Some(format!("call_{t}_{s}_{i}")),
                    name: Some(name.clone()),
                    arguments: arguments.clone(),
                })
                .collect();
            responses.push(Response { frames, finish: Some("tool_calls".into()), done: true, ..Response::default() });
        }
        responses.push(Response::text(&["Turn ", "done."]));
    }
    responses
}

/// Most turns of a conversation over an embedder's tools.
pub const USER_TURNS_MAX: u64 = 3;

/// A conversation over an embedder's own tools, drawn from the seed: turns of one or two
/// steps of one or two parallel calls, arguments drawn from each tool's JSON schema, and
/// sometimes a cancel (FAILURE-USER-HARNESS).
#[derive(Debug, Clone, PartialEq)]
pub struct UserWorkload {
    /// Per turn, per step, the calls made in parallel: tool name and arguments (JSON).
    pub turns: Vec<Vec<Vec<(String, String)>>>,
    /// A cancel at this simulated time, and whether queued input is kept with a new message.
    pub cancel: Option<(u64, bool)>,
    /// Who decides the `refund` calls.
    pub person: crate::Person,
}

/// The conversation seed `seed` stands for over `schemas` (not empty).
pub fn user_workload(seed: u64, schemas: &[faultline_runtime::event::ToolSchema]) -> UserWorkload {
    use faultline_runtime::seams::{Entropy, EntropyExt};
    assert!(!schemas.is_empty(), "an agent under test has tools");
    let draw = crate::seed::Seed::new(seed).fault("workload/user");
    let below = |n: u64| draw.next_u64() % n;
    let turns = (0..=below(USER_TURNS_MAX))
        .map(|_| {
            (0..=below(2))
                .map(|_| {
                    (0..=below(2))
                        .map(|_| {
                            let schema = &schemas[below(schemas.len() as u64) as usize];
                            let arguments = crate::arguments::draw(&schema.parameters, &draw);
                            (schema.name.clone(), arguments.to_string())
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let cancel = (draw.unit_f64() < 0.15).then(|| (below(CANCEL_AT_MS_MAX + 1), draw.next_u64() % 2 == 0));
    // Drawn last, so the conversation and the cancel of a seed stay what they were.
    let decision = match below(10) {
        0 => crate::PersonDecision::Never,
        1 | 2 => crate::PersonDecision::Deny,
        _ => crate::PersonDecision::Approve,
    };
    let chance = |percent: u64| below(100) < percent;
    let person = crate::Person {
        decision,
        think_ms: below(PERSON_THINK_MS_GENERATED_MAX + 1),
        twice: chance(20),
        race: chance(20),
        cancel_first: chance(10),
        while_down: chance(50),
        // Drawn last, so the rest of a seed's person stays what it was.
        cancel_after_continue: chance(10),
    };
    UserWorkload { turns, cancel, person }
}

impl UserWorkload {
    /// Puts this conversation into `base` (which keeps its name, timing and fault plan): the
    /// tools are the agent's own, so the scenario names only those the delivery queue
    /// delivers (`outbox`) to the gateway.
    pub fn apply(&self, base: &Scenario, outbox: &[faultline_runtime::event::ToolSchema]) -> Scenario {
        let mut scenario = base.clone();
        scenario.generated = false;
        scenario.messages = (0..self.turns.len()).map(|t| format!("task {t}")).collect();
        scenario.tools = outbox
            .iter()
            .map(|s| ScenarioTool { name: s.name.clone(), kind: ToolKind::Gateway, ..ScenarioTool::default() })
            .collect();
        scenario.tool_concurrency = None;
        scenario.faults.person = Some(self.person.clone());
        script_and_cancel(scenario, &self.turns, self.cancel)
    }
}

/// `scenario` with the model's script for `turns` (the last response repeated) and `cancel`.
fn script_and_cancel(
    mut scenario: Scenario,
    turns: &[Vec<Vec<(String, String)>>],
    cancel: Option<(u64, bool)>,
) -> Scenario {
    scenario.model.responses = script_of_calls(turns);
    scenario.model.repeat_last = true;
    scenario.model.from_seed = false;
    if let Some((at_ms, then_submit)) = cancel {
        scenario.faults.cancel_at_ms = Some(at_ms);
        scenario.faults.cancel_then_submit = then_submit;
    }
    scenario
}
