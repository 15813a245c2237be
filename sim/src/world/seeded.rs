//! Resolves a scenario and a seed into the concrete plan of one run. A `generated` scenario
//! draws its whole conversation here (`generate.rs`); one whose faults are `from_seed` draws a
//! swarm: which fault families are on for this seed and how hard.

use faultline_runtime::llm::WireFormat;
use faultline_runtime::seams::CrashPoint;
use faultline_runtime::{seams::Entropy, seams::EntropyExt};

use crate::model_server::{Dialect, Frame, Response, Script};
use crate::scenario::{
    CrashFault, DiskFull, DiskFullRefuses, Expectations, FaultPlan, FsErrorKind, FsFault, Partition, RotKind,
    RotTarget, Scenario, ScenarioTool, SessionFormat, Zombie, FS_CRASH_OP_MIN, FS_OP_MAX, PARTITION_FROM_MS_MAX,
    PARTITION_MS_MAX,
};
use crate::seams::SimEntropy;

/// The concrete plan of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tick_ms: u64,
    pub budget_ms: u64,
    /// End of the fault window: everything heals, and the workload must converge by
    /// `budget_ms`.
    pub heal_at_ms: u64,
    pub messages: Vec<String>,
    pub provider: String,
    /// The wire format the agent speaks to the model in.
    pub format: WireFormat,
    pub tools: Vec<ScenarioTool>,
    pub tool_concurrency: usize,
    /// Where the session lives.
    pub store: SessionFormat,
    pub script: Script,
    pub faults: FaultPlan,
    pub expect: Expectations,
    /// What the seed's swarm turned on (scenarios with `faults.from_seed`).
    pub swarm: Option<String>,
    /// How long after the heal the workload may take: the scenario's window plus the waits
    /// the agent's own settings allow (`budget_ms` is the scenario's, before them).
    pub liveness: super::bound::LivenessBound,
}

impl Plan {
    /// The instant the run ends if the workload has not converged: the liveness bound's
    /// deadline, never before the scenario's budget.
    pub fn end_ms(&self) -> u64 {
        self.liveness.deadline_ms().max(self.budget_ms)
    }
}

fn stream(seed: u64, family: &str) -> SimEntropy {
    crate::seed::Seed::new(seed).fault(family)
}

fn pick<'a, T>(entropy: &SimEntropy, items: &'a [T]) -> &'a T {
    &items[(entropy.next_u64() % items.len() as u64) as usize]
}

/// The kinds of failing model response the swarm can enable.
const FAILURE_KINDS: usize = 6;

/// A failing model response of kind `kind`.
fn failing_response(kind: usize) -> Response {
    match kind {
        0 => Response::status(429, &[("retry-after", "1")], "slow down"),
        1 => Response::status(503, &[], "overloaded"),
        2 => Response {
            frames: vec![Frame::Text("par".into()), Frame::Text("tial".into())],
            disconnect_after_frames: Some(1),
            ..Response::default()
        },
        3 => {
            Response { frames: vec![Frame::Text("stalled".into())], stall_after_frames: Some(1), ..Response::default() }
        }
        4 => Response { finish: Some("stop".into()), done: true, ..Response::default() },
        5 => Response { frames: vec![Frame::Raw("{\"choices\": [".into())], done: true, ..Response::default() },
        // An error after the stream began with 200 (Anthropic's `overloaded_error` event): a
        // failure, never a normal end.
        ERROR_EVENT_KIND => Response {
            frames: vec![Frame::Text("par".into()), Frame::ErrorEvent { status: 529, message: "Overloaded".into() }],
            done: false,
            ..Response::default()
        },
        // Reasoning cut right after its last frame: the signature that closes it never came.
        _ => Response {
            frames: vec![Frame::Reasoning("Let me".into()), Frame::Reasoning(" think.".into())],
            disconnect_after_frames: Some(2),
            ..Response::default()
        },
    }
}

/// The failing kind of a mid-stream error event (beyond the drawn kinds: its own family).
const ERROR_EVENT_KIND: usize = FAILURE_KINDS;
/// The failing kind of a signature lost with its stream (beyond the drawn kinds).
const SIGNATURE_LOSS_KIND: usize = FAILURE_KINDS + 1;

/// How often a stalled stream pings in a ping storm, in ms.
const PING_EVERY_MS: u64 = 1_000;

/// The reasoning a swarm's good tool-call responses think first (signed by the server).
const REASONING_TEXT: &str = "The user asked for it; the tool does it.";

/// The failures no default policy retries (FAILURE-RETRY-POLICY) that the `final-failure` family serves,
/// one per seed: each must end its step with its own code.
const FINAL_KINDS: u64 = 8;

/// A failing model response of final kind `kind`: the wording of the bodies is what real
/// providers send (DeepSeek's 402 and context-length texts among them).
fn final_response(kind: usize) -> Response {
    match kind {
        // Text, then the stream ends cleanly: no finish, no [DONE].
        0 => Response { frames: vec![Frame::Text("cut".into())], done: false, ..Response::default() },
        1 => Response::status(401, &[], "{\"error\":{\"message\":\"Authentication Fails (no such user)\"}}"),
        2 => Response::status(403, &[], "forbidden"),
        // DeepSeek's balance error, in Chinese and over the 512-byte message limit, which
        // falls inside a character.
        3 => Response::status(
            402,
            &[],
            &format!(
                "{{\"error\":{{\"message\":\"Insufficient Balance. {}\"}}}}",
                "余额不足，请充值后再试。".repeat(15)
            ),
        ),
        4 => Response::status(
            400,
            &[],
            "{\"error\":{\"message\":\"This model's maximum context length is 65536 tokens.\"}}",
        ),
        5 => Response::status(400, &[], "{\"error\":{\"message\":\"Invalid request: unknown field `foo`\"}}"),
        6 => Response::status(422, &[], "{\"error\":{\"message\":\"unprocessable entity\"}}"),
        _ => Response::status(418, &[], "I'm a teapot"),
    }
}

/// Most failing responses the swarm puts before one good response.
const FAILURES_PER_RESPONSE_MAX: u32 = 3;

/// Which fault families one seed turns on, and how hard (TigerBeetle's swarm testing: a run
/// with every fault at a fixed mix hides the bugs that need one fault often and the others
/// never). Each family is drawn from its own named stream of the seed, so adding a knob to one
/// family never reshuffles another.
#[derive(Debug, Clone)]
pub struct Swarm {
    /// Probability that a failing attempt precedes a good model response, and the enabled
    /// failure kinds (indexes into `failing_response`).
    pub model_failures: Option<(f64, Vec<usize>)>,
    /// The model refuses connections for the first 300 ms.
    pub refused: bool,
    /// A crash at a point, its hit and the restart delay.
    pub crash: Option<CrashFault>,
    /// Unsynced writes are torn at this block size when the host crashes.
    pub torn_block: Option<u64>,
    /// Mid-stream error events join the failing kinds.
    pub error_event: bool,
    /// A stalled stream pings while it stalls (a ping storm: alive, and never going on).
    pub ping_storm: bool,
    /// Reasoning cut before its signature joins the failing kinds, and the good tool-call
    /// responses think first (formats that sign reasoning: it must come back as signed).
    pub reasoning: bool,
    /// A disk operation fails (EIO or ENOSPC) once.
    pub fs_error: Option<(u64, FsErrorKind)>,
    /// A crash before a numbered disk operation.
    pub fs_crash_before_op: Option<u64>,
    /// Partitions between the agent and the model or gateway.
    pub partitions: Vec<Partition>,
    /// Failing HTTP responses echo the request's credential in their body and request id.
    pub echo: bool,
    /// A crash before a disk operation that lands on an fsync leaves a power-loss hole.
    pub power_loss_hole: bool,
    /// A crash before a disk operation that lands on an fsync tears its write mid-line (with
    /// torn writes on, and no hole).
    pub torn_mid_line: bool,
    /// Bit rot in a durable file while the host is down after its crash.
    pub bit_rot: Option<RotTarget>,
    /// The rot is the session's garbage, while the host is down after the hole's crash.
    pub rot_after_hole: bool,
    /// A small answer limit, and the first plain text answer made larger than it.
    pub oversize: bool,
    /// The first step meets one more retryable failure than its policy retries: it must give
    /// up after exactly its budget (the model server counts the requests).
    pub exhaust_retries: bool,
    /// The first step meets a clean end of stream without `[DONE]` (`STREAM_CLOSED`, which no
    /// default policy retries): its turn must end there.
    pub final_failure: bool,
    /// The session is stored as zstd frames instead of JSONL lines.
    pub zstd: bool,
    /// Whose wire shape every good response is written in.
    pub dialect: Dialect,
    /// The good responses send no `finish_reason` (the client infers it).
    pub no_finish_reason: bool,
    /// The first plain text answer is a refusal instead.
    pub refusal: bool,
    /// A window during which the disk is full.
    pub disk_full: Option<DiskFull>,
    /// The run is a fleet's: two workers on a leased store and one queue, the first stopped
    /// past its lease at a seeded instant (the zombie family; the fleet world runs it, and the
    /// disk faults drawn above have no disk there to hit).
    pub zombie: bool,
    /// Entries of the format's wire catalog are served before good responses (the `wire`
    /// family, FAILURE-WORLD-CATALOG): every behaviour the format's specification defines,
    /// drawn a few per seed.
    pub wire: bool,
}

/// Most wire catalog entries one seed serves.
const WIRE_ENTRIES_PER_SEED_MAX: u64 = 3;

/// Probability that a seed runs as a fleet with a zombie. Low: the fleet world has no disk
/// faults, crashes or person, so a zombie seed covers little else.
const ZOMBIE_PROBABILITY: f64 = 0.1;

/// The zombie a swarm draws: a 1 s lease, stopped at a seeded instant in the first 4 s for up
/// to 5 s (always past the lease and a standby poll); one store statement in ten cut (half
/// of them with the answer lost after they ran), a failover in the first 8 s, and for half
/// the seeds the answer of the takeover that succeeds lost.
fn swarm_zombie(seed: u64) -> Zombie {
    Zombie {
        lease_ms: 1_000,
        pause_at_ms: 4_000,
        pause_ms: 5_000,
        standby_poll_ms: 250,
        from_seed: true,
        cut_percent: 10,
        failover_at_ms: Some(8_000),
        takeover_answer_lost: stream(seed, "swarm/takeover-answer-lost").unit_f64() < 0.5,
    }
}

/// The answer limit of a seed whose swarm turns oversize answers on, in bytes: small, so the
/// oversize answer costs little simulated I/O.
const SWARM_ANSWER_BYTES_MAX: usize = 4096;

/// Probability that a seed with model failures also exhausts one step's retry budget. Low:
/// the step's turn ends in an error, which covers little else.
const EXHAUST_RETRIES_PROBABILITY: f64 = 0.5;

/// Probability that a seed with model failures also ends its first step with a failure no
/// policy retries. Low, for the same reason.
const FINAL_FAILURE_PROBABILITY: f64 = 0.25;

/// Probability that a seed fills the disk for a window. Lower than the other families': a
/// full disk ends the turns it catches as not kept, which covers little else.
const DISK_FULL_PROBABILITY: f64 = 0.25;

/// Probability that a seed's good responses send no `finish_reason`.
const NO_FINISH_REASON_PROBABILITY: f64 = 0.2;

/// Probability that a seed's first plain text answer is a refusal (its turn ends there).
const REFUSAL_PROBABILITY: f64 = 0.2;

/// The words of a swarm's refusal.
const REFUSAL_TEXT: &str = "I'm sorry, but I can't help with that.";

/// Latest start of a drawn disk-full window, in simulated ms.
const DISK_FULL_FROM_MS_MAX: u64 = 3_000;
/// Longest drawn disk-full window beyond its 100 ms minimum, in simulated ms.
const DISK_FULL_MS_MAX: u64 = 3_000;

/// Probability that a seed with a crash also rots a durable file while the host is down. Low:
/// a rotted run ends in a refusal, which covers nothing else.
const BIT_ROT_PROBABILITY: f64 = 0.2;

/// Probability that a seed with a power-loss hole rots the session (when its crashes drew no
/// rot of their own): high, because only a rot while the host is down after the hole's crash
/// shows whether recovery tells the hole's zeros from damage to a durable unit before it.
const BIT_ROT_AFTER_HOLE_PROBABILITY: f64 = 0.5;

/// A failing response that quotes the request's credential back, as hostile or careless
/// providers do: in its error body and its request id.
fn echoing(mut response: Response) -> Response {
    if response.status.is_some() {
        let body = response.body.take().unwrap_or_default();
        response.body = Some(format!("{body} (api key {{{{key}}}}; Authorization: {{{{authorization}}}})"));
        response.headers.insert("x-request-id".into(), "req-{{key}}".into());
    }
    response
}

impl Swarm {
    /// The partition between the agent and `other` the swarm of `seed` draws, if it draws one.
    pub fn partition(seed: u64, other: &str) -> Option<Partition> {
        let family = format!("partition-{other}");
        (stream(seed, &format!("swarm/{family}")).unit_f64() < 0.5).then(|| {
            let window = stream(seed, &family);
            let from_ms = window.next_u64() % PARTITION_FROM_MS_MAX;
            let to_ms = from_ms + 100 + window.next_u64() % PARTITION_MS_MAX;
            Partition { a: "agent".into(), b: other.into(), from_ms, to_ms }
        })
    }

    /// The swarm of `seed`.
    pub fn draw(seed: u64) -> Swarm {
        let on = |family: &str| stream(seed, &format!("swarm/{family}")).unit_f64() < 0.5;
        let model_failures = on("model").then(|| Swarm::draw_model_failures(seed));
        let crash = on("crash").then(|| Swarm::draw_crash(seed));
        let torn_block = on("torn").then(|| *pick(&stream(seed, "torn"), &[512, 4096]));
        let fs_error = on("fs-error").then(|| {
            let fs = stream(seed, "fs-error");
            (fs.next_u64() % FS_OP_MAX, *pick(&fs, &[FsErrorKind::Eio, FsErrorKind::Enospc]))
        });
        let fs_crash_before_op = on("fs-crash")
            .then(|| FS_CRASH_OP_MIN + stream(seed, "fs-crash").next_u64() % (FS_OP_MAX - FS_CRASH_OP_MIN));
        let partitions = ["model", "gateway"].into_iter().filter_map(|other| Swarm::partition(seed, other)).collect();
        let power_loss_hole = fs_crash_before_op.is_some() && on("hole");
        let torn_mid_line =
            fs_crash_before_op.is_some() && torn_block.is_some() && !power_loss_hole && on("tear-mid-line");
        let exhaust_retries =
            model_failures.is_some() && stream(seed, "exhaust").unit_f64() < EXHAUST_RETRIES_PROBABILITY;
        let final_failure = model_failures.is_some() && stream(seed, "final").unit_f64() < FINAL_FAILURE_PROBABILITY;
        let bit_rot = (crash.is_some() && stream(seed, "rot").unit_f64() < BIT_ROT_PROBABILITY)
            .then(|| *pick(&stream(seed, "rot/target"), &[RotTarget::Session, RotTarget::Journal]));
        // A hole's seed often rots the session too, so the sweep meets a durable unit damaged
        // in front of the last unit's hole (drawn from a stream of its own: the seeds without
        // a hole keep their draws).
        let rot_after_hole = bit_rot.is_none()
            && power_loss_hole
            && stream(seed, "rot/after-hole").unit_f64() < BIT_ROT_AFTER_HOLE_PROBABILITY;
        let bit_rot = bit_rot.or(rot_after_hole.then_some(RotTarget::Session));
        let disk_full =
            (stream(seed, "swarm/disk-full").unit_f64() < DISK_FULL_PROBABILITY).then(|| Swarm::draw_disk_full(seed));
        let zstd = on("zstd");
        let dialect = *pick(&stream(seed, "swarm/dialect"), &Dialect::ALL);
        let no_finish_reason = stream(seed, "swarm/no-finish").unit_f64() < NO_FINISH_REASON_PROBABILITY;
        let refusal = stream(seed, "swarm/refusal").unit_f64() < REFUSAL_PROBABILITY;
        let zombie = stream(seed, "swarm/zombie").unit_f64() < ZOMBIE_PROBABILITY;
        Swarm {
            wire: on("wire"),
            error_event: model_failures.is_some() && on("error-event"),
            ping_storm: on("ping-storm"),
            reasoning: on("reasoning"),
            model_failures,
            refused: on("refused"),
            crash,
            torn_block,
            fs_error,
            fs_crash_before_op,
            partitions,
            echo: on("echo"),
            power_loss_hole,
            torn_mid_line,
            bit_rot,
            rot_after_hole,
            oversize: on("oversize"),
            exhaust_retries,
            final_failure,
            zstd,
            dialect,
            no_finish_reason,
            refusal,
            disk_full,
            zombie,
        }
    }

    /// A seed's failing attempts: how often one precedes a good response, and their kinds.
    fn draw_model_failures(seed: u64) -> (f64, Vec<usize>) {
        let model = stream(seed, "model");
        let p = 0.1 + 0.6 * model.unit_f64();
        let kinds: Vec<usize> = (0..FAILURE_KINDS).filter(|_| model.unit_f64() < 0.5).collect();
        (p, if kinds.is_empty() { vec![(model.next_u64() % FAILURE_KINDS as u64) as usize] } else { kinds })
    }

    /// A seed's crash: the point, its hit, the restart delay.
    fn draw_crash(seed: u64) -> CrashFault {
        let crash = stream(seed, "crash");
        let points = [
            CrashPoint::BeforeDispatch,
            CrashPoint::MidStream,
            CrashPoint::AfterToolCallFlush,
            CrashPoint::AfterSideEffect,
            CrashPoint::MidFlush,
            CrashPoint::DuringOutboxFinish,
        ];
        CrashFault {
            point: *pick(&crash, &points),
            hit: 1 + (crash.next_u64() % 2) as u32,
            restart_after_ms: 100 + crash.next_u64() % 400,
        }
    }

    /// A seed's disk-full window and what the full disk refuses.
    fn draw_disk_full(seed: u64) -> DiskFull {
        let window = stream(seed, "disk-full");
        let from_ms = window.next_u64() % DISK_FULL_FROM_MS_MAX;
        let to_ms = from_ms + 100 + window.next_u64() % DISK_FULL_MS_MAX;
        let refuses =
            *pick(&window, &[DiskFullRefuses::NewBlocks, DiskFullRefuses::Everything, DiskFullRefuses::Fsync]);
        DiskFull { from_ms, to_ms, refuses }
    }

    /// Interleaves failing attempts before the good responses of `responses`; with
    /// `exhaust_retries`, the first step first meets `retries_max + 1` retryable failures.
    fn interleave(
        &self,
        seed: u64,
        format: WireFormat,
        responses: Vec<Response>,
        retries_max: Option<u32>,
    ) -> Vec<Response> {
        let Some((p, drawn)) = &self.model_failures else { return responses };
        let mut kinds = drawn.clone();
        if self.error_event {
            kinds.push(ERROR_EVENT_KIND);
        }
        if self.reasoning && format != WireFormat::Openai {
            kinds.push(SIGNATURE_LOSS_KIND);
        }
        let model = stream(seed, "model/attempts");
        let mut out = Vec::new();
        if self.final_failure {
            let failing = final_response((stream(seed, "final/kind").next_u64() % FINAL_KINDS) as usize);
            out.push(if self.echo { echoing(failing) } else { failing });
        }
        if let (true, Some(max)) = (self.exhaust_retries, retries_max) {
            for _ in 0..=max {
                let failing = failing_response(1);
                out.push(if self.echo { echoing(failing) } else { failing });
            }
        }
        for good in responses {
            let mut failures = 0;
            while failures < FAILURES_PER_RESPONSE_MAX && model.unit_f64() < *p {
                let mut failing = failing_response(*pick(&model, &kinds));
                // Gemini sends no keep-alives: its stalls stay silent.
                if self.ping_storm && format != WireFormat::Gemini && failing.stall_after_frames.is_some() {
                    failing.ping_every_ms = Some(PING_EVERY_MS);
                }
                out.push(if self.echo { echoing(failing) } else { failing });
                failures += 1;
            }
            out.push(good);
        }
        out
    }

    /// One line for the trace: what this seed turned on.
    pub fn describe(&self) -> String {
        let mut on = Vec::new();
        if let Some((p, kinds)) = &self.model_failures {
            on.push(format!("model-failures p={p:.2} kinds={kinds:?}"));
        }
        for (flag, name) in
            [(self.error_event, "error-event"), (self.ping_storm, "ping-storm"), (self.reasoning, "reasoning")]
        {
            if flag {
                on.push(name.into());
            }
        }
        if self.refused {
            on.push("refused".into());
        }
        if let Some(c) = &self.crash {
            on.push(format!("crash {}#{}", c.point, c.hit));
        }
        if let Some(block) = self.torn_block {
            on.push(format!("torn-write {block}"));
        }
        if let Some((op, kind)) = self.fs_error {
            on.push(format!("{} at op {op}", kind.family()));
        }
        if let Some(op) = self.fs_crash_before_op {
            on.push(format!("crash before op {op}"));
        }
        for p in &self.partitions {
            on.push(format!("partition {}<->{} {}..{} ms", p.a, p.b, p.from_ms, p.to_ms));
        }
        if self.echo {
            on.push("echoed-secret".into());
        }
        if self.power_loss_hole {
            on.push("power-loss-hole".into());
        }
        if self.torn_mid_line {
            on.push("torn-mid-line".into());
        }
        if let Some(target) = self.bit_rot {
            on.push(format!("bit-rot {target:?}{}", if self.rot_after_hole { " after the hole" } else { "" }));
        }
        if let Some(full) = &self.disk_full {
            on.push(format!("disk-full {}..{}ms {}", full.from_ms, full.to_ms, full.refuses.name()));
        }
        if self.zstd {
            on.push("zstd".into());
        }
        if self.dialect != Dialect::Openai {
            on.push(format!("dialect {}", self.dialect.name()));
        }
        for (flag, name) in [
            (self.no_finish_reason, "no-finish-reason"),
            (self.refusal, "refusal"),
            (self.oversize, "oversize-output"),
            (self.exhaust_retries, "retry-exhaustion"),
            (self.final_failure, "final-failure"),
            (self.zombie, "zombie"),
            (self.wire, "wire"),
        ] {
            if flag {
                on.push(name.into());
            }
        }
        if on.is_empty() {
            "swarm: no faults".into()
        } else {
            format!("swarm: {}", on.join(", "))
        }
    }
}

/// Serves one to [`WIRE_ENTRIES_PER_SEED_MAX`] entries of `format`'s wire catalog, each
/// before a good response drawn from the seed (an answer the client keeps ends its turn there,
/// and the good response goes to the next request; a failure is recovered from or ends its
/// turn as the entry's reading says).
fn serve_wire_entries(seed: u64, format: WireFormat, tool: &str, responses: &mut Vec<Response>) {
    let entries = crate::catalog::wire_entries(format);
    if entries.is_empty() {
        return;
    }
    let wire = stream(seed, "wire");
    let count = 1 + wire.next_u64() % WIRE_ENTRIES_PER_SEED_MAX;
    for draw in 0..count as usize {
        let entry = pick(&wire, entries);
        let good: Vec<usize> = (0..responses.len()).filter(|&i| !responses[i].fails()).collect();
        let at = if good.is_empty() { responses.len() } else { *pick(&wire, &good) };
        responses.insert(at, crate::catalog::drawn_response(entry, tool, draw));
    }
}

/// The two-step conversation of the `mixed` scenario: per message a side effect, then an
/// answer.
fn standard_responses(messages: usize) -> Vec<Response> {
    let mut responses = Vec::new();
    for turn in 0..messages {
        responses.push(Response::tool_call(&format!("call_{turn}"), "send", "{\"text\":\"hi\"}"));
        responses.push(Response::text(&["Done", " for now."]));
    }
    responses.push(Response::text(&["Nothing left to do."]));
    responses
}

impl Swarm {
    /// The swarm's failing attempts, refusal window and response shapes, in `script`.
    fn shape_script(&self, seed: u64, scenario: &Scenario, format: WireFormat, script: &mut Script) {
        // The budget of the scenario's own policy (a policy without one is not exhausted).
        let retries_max = super::setup::resolve_route(format, super::setup::SIM_MODEL_ROOT, &scenario.provider)
            .ok()
            .and_then(|route| match route.retry {
                faultline_runtime::llm::RetryPolicy::Normal { max_retries, .. } => Some(max_retries),
                _ => None,
            });
        if self.reasoning && format != WireFormat::Openai {
            for good in script.responses.iter_mut().filter(|r| !r.fails() && r.recorded.is_none()) {
                if good.frames.iter().any(|f| matches!(f, Frame::ToolCall { .. })) {
                    good.frames.insert(0, Frame::Reasoning(REASONING_TEXT.into()));
                }
            }
        }
        script.responses = self.interleave(seed, format, std::mem::take(&mut script.responses), retries_max);
        if self.refused {
            script.refuse_until_ms = 300;
        }
        for response in script.responses.iter_mut().filter(|r| !r.fails() && r.recorded.is_none()) {
            response.dialect = self.dialect;
            if self.no_finish_reason && response.usage.is_none() {
                response.finish = None;
            }
        }
        let plain = |r: &&mut Response| !r.fails() && r.frames.iter().all(|f| matches!(f, Frame::Text(_)));
        if self.refusal {
            if let Some(answer) = script.responses.iter_mut().find(plain) {
                answer.frames = vec![Frame::Refusal(REFUSAL_TEXT.into())];
                answer.finish = Some("stop".into());
            }
        }
        if self.oversize {
            // The first plain text answer grows past the limit (`add_faults` sets it): its turn
            // must end RESPONSE_TOO_LARGE with nothing oversize stored, and the run converge.
            if let Some(answer) = script.responses.iter_mut().find(plain) {
                answer.frames = vec![Frame::Filler(SWARM_ANSWER_BYTES_MAX), Frame::Filler(SWARM_ANSWER_BYTES_MAX / 2)];
            }
        }
        // Last: a catalog entry is served exactly as its catalog writes it.
        if self.wire {
            let tool = scenario.tools.first().map_or("send", |t| t.name.as_str());
            serve_wire_entries(seed, format, tool, &mut script.responses);
        }
    }

    /// The swarm's crashes, partitions (the agent's services' too), disk faults, rot, full
    /// disk, echo and answer limit, in `faults`.
    fn add_faults(&self, seed: u64, user: Option<&super::user::AgentUnderTest>, faults: &mut FaultPlan) {
        faults.crashes.extend(self.crash.clone());
        // A conversation with a person in it: a third of its seeds crash while a turn waits for
        // them (on a stream of its own, so the swarm's other draws stay what they were).
        if faults.person.is_some() {
            let crash = stream(seed, "crash/approval");
            if crash.next_u64() % 3 == 0 {
                faults.crashes.push(CrashFault {
                    point: CrashPoint::AwaitingApproval,
                    hit: 1 + (crash.next_u64() % 2) as u32,
                    restart_after_ms: 100 + crash.next_u64() % 400,
                });
            }
        }
        faults.partitions.extend(self.partitions.clone());
        for service in user.map_or(&[][..], |u| u.services()) {
            faults.partitions.extend(Swarm::partition(seed, &service.name));
        }
        if self.torn_block.is_some() || self.fs_error.is_some() || self.fs_crash_before_op.is_some() {
            faults.fs = Some(FsFault {
                block_size: self.torn_block,
                fail_op: self.fs_error.map(|(op, _)| op),
                fail_kind: self.fs_error.map(|(_, kind)| kind),
                crash_before_op: self.fs_crash_before_op,
                power_loss_hole: self.power_loss_hole,
                torn_mid_line: self.torn_mid_line,
            });
        }
        faults.bit_rot = faults.bit_rot.or(self.bit_rot);
        if self.rot_after_hole {
            // The damage a hole could be mistaken for: a durable frame's checksum, a line's
            // bytes (garbage).
            faults.rot_after_hole = true;
            faults.rot_kinds = vec![RotKind::Garbage];
        }
        faults.disk_full = faults.disk_full.or(self.disk_full);
        faults.gateway_echo |= self.echo;
        // An embedder's agent runs in the fleet world with its own tools, unless one of them
        // waits for a person (the fleet world has none).
        if self.zombie && user.is_none_or(|u| !u.needs_person()) && faults.zombie.is_none() {
            faults.zombie = Some(swarm_zombie(seed));
        }
        if self.oversize {
            faults.answer_bytes_max = Some(SWARM_ANSWER_BYTES_MAX);
        }
    }
}

/// Resolves `scenario` for `seed`.
pub fn resolve(scenario: &Scenario, seed: u64) -> Plan {
    resolve_for(scenario, seed, None)
}

/// Resolves `scenario` for `seed` on `user`'s agent when one is given: a generated
/// conversation calls the agent's own tools, and the swarm's partitions reach its services.
///
/// A generated scenario is expanded first, above the world (`generate::expand`): the world
/// runs a conversation, it never draws one.
pub fn resolve_for(scenario: &Scenario, seed: u64, user: Option<&super::user::AgentUnderTest>) -> Plan {
    assert!(!scenario.generated, "scenario {}: a generated scenario is expanded before its plan", scenario.name);
    // An embedder's agent speaks its own preset's format; a scenario's seeds cycle through
    // the formats it declares.
    let format = user.map_or_else(|| scenario.format_for(seed), |u| u.format);
    let mut script = scenario.script();
    let mut faults = scenario.faults.clone();
    if scenario.model.from_seed {
        script = Script {
            refuse_until_ms: 0,
            responses: standard_responses(scenario.messages.len()),
            repeat_last: true,
            after_tool_result: None,
        };
    }
    let mut swarm_line = None;
    let mut store = scenario.store;
    if faults.from_seed {
        let swarm = Swarm::draw(seed);
        swarm_line = Some(swarm.describe());
        swarm.shape_script(seed, scenario, format, &mut script);
        swarm.add_faults(seed, user, &mut faults);
        if swarm.zstd {
            store = SessionFormat::Zstd;
        }
        faults.from_seed = false;
    }
    // One rot kind per seed, from the scenario's list (the swarm's rot: any kind); a plan
    // holds the one drawn, so a materialised plan replays it.
    if faults.bit_rot.is_some() {
        let kinds: &[RotKind] = match (&faults.rot_kinds[..], scenario.faults.from_seed) {
            ([], true) => &RotKind::ALL,
            ([], false) => &[RotKind::Garbage],
            (kinds, _) => kinds,
        };
        faults.rot_kinds = vec![*pick(&stream(seed, "rot/kind"), kinds)];
    }
    let heal_at_ms = scenario.heal_at_ms.unwrap_or(scenario.budget_ms / 2);
    let mut providers = vec![scenario.provider.as_str()];
    providers.extend(faults.config_update.as_ref().map(|update| update.provider.as_str()));
    let liveness = super::bound::of_run(
        format,
        heal_at_ms,
        scenario.budget_ms.saturating_sub(heal_at_ms),
        &providers,
        &scenario.tools,
        user,
    );
    Plan {
        tick_ms: scenario.tick_ms,
        budget_ms: scenario.budget_ms,
        heal_at_ms,
        messages: scenario.messages.clone(),
        provider: scenario.provider.clone(),
        format,
        tools: scenario.tools.clone(),
        tool_concurrency: scenario.tool_concurrency.unwrap_or(4),
        store,
        script,
        faults,
        expect: scenario.expect.clone(),
        swarm: swarm_line,
        liveness,
    }
}

/// The fault families a served response exercises: coverage counts what the model server
/// actually answered with, not what the script holds (a response never requested never ran).
pub(crate) fn response_families(r: &Response, format: WireFormat) -> Vec<&'static str> {
    let mut out = Vec::new();
    if let Some(status) = r.status {
        out.push("http-status");
        if status == 429 && r.headers.keys().any(|k| k.starts_with("retry-after")) {
            out.push("retry-after");
        }
    }
    if r.disconnect_after_frames.is_some() {
        out.push("disconnect");
    }
    if r.stall_after_frames.is_some() {
        out.push("stall");
        // Gemini sends no keep-alives: its stalls are silent.
        if r.ping_every_ms.is_some() && format != WireFormat::Gemini {
            out.push("ping-storm");
        }
    }
    if r.frames.iter().any(|f| matches!(f, Frame::ErrorEvent { .. })) {
        out.push("error-event");
    }
    // Reasoning cut right after its last frame, in a format that signs it when it closes.
    let last_reasoning = r.frames.iter().rposition(|f| matches!(f, Frame::Reasoning(_)));
    if format != WireFormat::Openai && last_reasoning.is_some_and(|i| r.disconnect_after_frames == Some(i + 1)) {
        out.push("signature-loss");
    }
    if !r.done && r.status.is_none() && r.body.is_none() {
        out.push("partial-eof");
    }
    if r.body.as_deref() == Some("") && r.status.is_none() {
        out.push("empty-body");
    }
    for raw in r.frames.iter().filter_map(|f| if let Frame::Raw(raw) = f { Some(raw) } else { None }) {
        // A well-formed error event inside a 200 stream is the provider speaking, not noise.
        let error_event = serde_json::from_str::<serde_json::Value>(raw).is_ok_and(|v| v.get("error").is_some());
        out.push(if error_event { "error-event" } else { "malformed" });
    }
    if r.frames.is_empty() && r.status.is_none() && r.body.is_none() && r.done {
        out.push("empty-completion");
    }
    if r.dialect != crate::model_server::Dialect::Openai && format == WireFormat::Openai {
        out.push(match r.dialect {
            crate::model_server::Dialect::Mistral => "dialect-mistral",
            _ => "dialect-openrouter",
        });
    }
    if r.frames.iter().any(|f| matches!(f, Frame::Refusal(_))) {
        out.push("refusal");
    }
    if r.finish.is_none()
        && r.done
        && r.status.is_none()
        && r.body.is_none()
        && r.recorded.is_none()
        && !r.frames.is_empty()
    {
        out.push("no-finish-reason");
    }
    if crate::model_server::echoes_credential(r) {
        out.push("echoed-secret");
    }
    if r.frames.iter().any(|f| matches!(f, Frame::Filler(_))) {
        out.push("oversize-output");
    }
    out
}
