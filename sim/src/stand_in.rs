//! The CLI user's agent file under the harness (`faultline sweep --agent FILE`): its provider
//! settings and `[agent]` knobs as they are, and for each `[[tools]]` command — which never
//! runs in the simulator — a stand-in built from its `[tools.sim]` table, or from
//! `side_effects` and `via_outbox` when it has none (FAILURE-USER-HARNESS); each
//! `[[mcp_servers]]` entry is the runtime's MCP client against a simulated server
//! (`stand_in_mcp.rs`).
//!
//! An `external` stand-in POSTs to a simulated service of its own over the runtime's
//! `ToolHttp`, retrying `retries` times what failed or timed out, with the execution id as its
//! idempotency key when the service deduplicates by it: the same shape of code a user's
//! command has, with the same mistakes available.

use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::agent::AgentConfig;

use faultline_runtime::config::{AgentFile, CommandToolConfig};

use crate::tool_sim::{SimDedup, SimEffect};

use faultline_runtime::event::ToolSchema;
use faultline_runtime::seams::{BoxFuture, Clock, Entropy, EntropyExt, Seams};
use faultline_runtime::tool::{HttpFailure, Tool, ToolHttp, ToolInvocation, ToolOutput, ToolSet};
use tokio_util::sync::CancellationToken;

use crate::world::{AgentUnderTest, Service, ServiceFaults};

/// The header a deduplicating stand-in service reads.
const KEY_HEADER: &str = "idempotency-key";
/// How long one attempt of a stand-in waits for its service, in ms (less when the tool's own
/// timeout, shared by its attempts, is shorter).
const ATTEMPT_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// Latency of a stand-in without `latency_ms`, in ms.
const LATENCY_MS_DEFAULT: u64 = 5;
/// The pause between a stand-in's attempts, in ms.
const RETRY_DELAY_MS: u64 = 200;

/// What stands in for one command tool.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// Delivered through the runtime's queue to the gateway.
    Outbox,
    /// A POST to its own service (`dedup`: the service deduplicates by the key).
    External { service: String, dedup: bool },
    /// A GET from its own read-only service.
    Read { service: String },
    /// Local work.
    Local,
}

/// One command tool's stand-in, as decided from the file.
#[derive(Debug, Clone)]
struct StandInPlan {
    schema: ToolSchema,
    kind: Kind,
    latency_ms: u64,
    retries: u32,
    timeout_ms: Option<u64>,
    faults: Option<ServiceFaults>,
    failure_rate: Option<f64>,
}

/// `text` as a scenario whose agent file, if it names one, is one the harness can run (a
/// scenario's file format knows nothing of agents: the check lives here, above both).
pub fn scenario_with_agent(text: &str) -> Result<crate::scenario::Scenario, String> {
    let scenario = crate::scenario::Scenario::parse(text)?;
    if let Some(agent) = &scenario.agent {
        agent_from_file(&scenario.name, agent).map_err(|e| format!("scenario {}: agent: {e}", scenario.name))?;
    }
    Ok(scenario)
}

/// The agent of an agent file (`agent run`'s format), its tools replaced by stand-ins.
pub fn agent_from_file(name: &str, text: &str) -> Result<AgentUnderTest, String> {
    let file = AgentFile::parse(text).map_err(|e| e.to_string())?;
    let mut config = AgentConfig::default();
    config.system = file.agent.system.clone();
    config.max_steps = file.agent.max_steps.unwrap_or(config.max_steps);
    config.tool_concurrency = file.agent.tool_concurrency.unwrap_or(config.tool_concurrency);
    let plans = plans(&file.tools)?;
    // A tool that waits for a person waits under the harness too (the person is the seed's).
    let approvals: Vec<_> = file.tools.iter().map(|t| t.approval_policy()).collect();
    let mcp = file.mcp_servers.iter().enumerate().map(crate::stand_in_mcp::stand_in).collect::<Result<Vec<_>, _>>()?;
    let mut agent = {
        let (plans, mcp) = (plans.clone(), mcp.clone());
        AgentUnderTest::new(name, move |seams: &Seams| {
            let served = mcp.iter().flat_map(|m| m.tools(seams)).fold(ToolSet::new(), |set, tool| set.with(tool));
            plans.iter().zip(&approvals).filter(|(p, _)| p.kind != Kind::Outbox).fold(
                served,
                |set, (plan, approval)| {
                    let tool: Arc<dyn faultline_runtime::tool::Tool> = Arc::new(StandIn::new(plan.clone(), seams));
                    match approval {
                        Some(policy) => {
                            set.with(Arc::new(faultline_runtime::approval::NeedsApproval::new(tool, policy.clone())))
                        }
                        None => set.with(tool),
                    }
                },
            )
        })
    }
    .provider_toml(text)?
    .config(config);
    for (plan, tool) in plans.iter().zip(&file.tools) {
        agent = agent.stand_in(describe(plan, tool));
        match &plan.kind {
            Kind::Outbox => agent = agent.outbox_tool(plan.schema.clone()),
            Kind::External { service, dedup } => {
                let mut declared = Service::new(service).latency_ms(plan.latency_ms);
                if *dedup {
                    declared = declared.dedup_by_header(KEY_HEADER);
                }
                if let Some(faults) = plan.faults {
                    declared = declared.faults(faults);
                }
                agent = agent.service(declared);
                agent = agent.hint(&tool.name, "at-most-once", at_most_once_advice(&tool.name, *dedup, plan.retries));
            }
            Kind::Read { service } => {
                let mut declared = Service::new(service).latency_ms(plan.latency_ms).read_only();
                if let Some(faults) = plan.faults {
                    declared = declared.faults(faults);
                }
                agent = agent.service(declared);
            }
            Kind::Local => {}
        }
    }
    for server in mcp {
        // Every header value is held as a secret (FAILURE-MCP-TOOLS), and so is the
        // credential after its scheme: a server that quotes its request back must not put
        // either in the transcript.
        for (name, value) in &server.headers {
            let what = format!("the {name} header of MCP server {}", server.service.server);
            if let Some((_, credential)) = value.split_once(' ').filter(|(_, c)| c.len() >= 8) {
                agent = agent.holds_secret(format!("{what} (its credential)"), credential.to_owned());
            }
            if value.len() >= 8 {
                agent = agent.holds_secret(what, value.clone());
            }
        }
        agent = agent.stand_in(server.describe()).mcp_service(server.service);
    }
    agent.validate()?;
    Ok(agent)
}

fn at_most_once_advice(tool: &str, dedup: bool, retries: u32) -> String {
    match (dedup, retries) {
        (false, 0) => format!(
            "tools.{tool}: its receiver does not deduplicate; pass FAULTLINE_EXECUTION_ID as the idempotency key and \
             declare sim.dedup = \"execution-id\", or set via_outbox = true"
        ),
        (false, _) => format!(
            "tools.{tool}: it retries ({retries} times) a call whose reply was lost, and its receiver does not \
             deduplicate; send FAULTLINE_EXECUTION_ID as the idempotency key and declare sim.dedup = \"execution-id\", \
             or set sim.retries = 0, or set via_outbox = true"
        ),
        (true, _) => format!("tools.{tool}: the receiver deduplicates, yet the effect came twice: a harness bug"),
    }
}

/// The stand-in of each tool, with a service host name of its own for those that need one.
fn plans(tools: &[CommandToolConfig]) -> Result<Vec<StandInPlan>, String> {
    let mut hosts: Vec<String> = Vec::new();
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let sim = crate::tool_sim::tool_sim(tool, index)?;
            let mut host = || {
                let base: String =
                    tool.name.to_ascii_lowercase().chars().map(|c| if c == '_' { '-' } else { c }).collect();
                let mut name = format!("svc-{base}");
                let mut n = 2;
                while hosts.contains(&name) {
                    name = format!("svc-{base}-{n}");
                    n += 1;
                }
                hosts.push(name.clone());
                name
            };
            let effect = sim.effect.unwrap_or(if tool.side_effects { SimEffect::External } else { SimEffect::Read });
            let kind = match (tool.via_outbox, effect) {
                (true, _) => Kind::Outbox,
                (false, SimEffect::External) => {
                    Kind::External { service: host(), dedup: sim.dedup == Some(SimDedup::ExecutionId) }
                }
                (false, SimEffect::Read) => Kind::Read { service: host() },
                (false, SimEffect::Local) => Kind::Local,
            };
            let faults = (sim.failure_rate.is_some() || sim.timeout_rate.is_some()).then(|| ServiceFaults {
                error_rate: sim.failure_rate.unwrap_or(0.0),
                lost_reply_rate: sim.timeout_rate.unwrap_or(0.0),
            });
            Ok(StandInPlan {
                schema: ToolSchema {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                },
                kind,
                latency_ms: sim.latency_ms.unwrap_or(LATENCY_MS_DEFAULT),
                retries: sim.retries.unwrap_or(0),
                timeout_ms: tool.timeout_ms,
                faults,
                failure_rate: sim.failure_rate,
            })
        })
        .collect()
}

/// One line for the report: what stands in for `tool`, and where that came from.
fn describe(plan: &StandInPlan, tool: &CommandToolConfig) -> String {
    let from = if tool.sim.is_some() {
        "[tools.sim]".to_owned()
    } else {
        format!("no [tools.sim]: from side_effects = {}, via_outbox = {}", tool.side_effects, tool.via_outbox)
    };
    let what = match &plan.kind {
        Kind::Outbox => "delivered through the delivery queue to the gateway (keyed by execution id)".to_owned(),
        Kind::External { service, dedup } => format!(
            "external effect on service {service} ({}), {} retries",
            if *dedup { "dedup by execution id" } else { "no dedup" },
            plan.retries
        ),
        Kind::Read { service } => format!("read from service {service}, {} retries", plan.retries),
        Kind::Local => "local work, no network".to_owned(),
    };
    let faults = match plan.faults {
        Some(f) => format!(", failure_rate {} timeout_rate {}", f.error_rate, f.lost_reply_rate),
        None if matches!(plan.kind, Kind::External { .. } | Kind::Read { .. }) => {
            ", service faults drawn per seed".into()
        }
        None => String::new(),
    };
    format!("{}: {what}, latency {} ms{faults} ({from})", tool.name, plan.latency_ms)
}

/// A command tool's stand-in on one host incarnation's seams.
struct StandIn {
    plan: StandInPlan,
    http: ToolHttp,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
}

impl StandIn {
    fn new(plan: StandInPlan, seams: &Seams) -> Self {
        Self { plan, http: ToolHttp::new(seams), clock: seams.clock.clone(), entropy: seams.entropy.clone() }
    }

    fn attempt_timeout(&self) -> Duration {
        let share = self.plan.timeout_ms.map_or(ATTEMPT_TIMEOUT_MS_DEFAULT, |t| t / u64::from(self.plan.retries + 1));
        Duration::from_millis(share.clamp(1, ATTEMPT_TIMEOUT_MS_DEFAULT))
    }
}

impl Tool for StandIn {
    fn schema(&self) -> ToolSchema {
        self.plan.schema.clone()
    }

    fn timeout(&self) -> Option<Duration> {
        self.plan.timeout_ms.map(Duration::from_millis)
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (plan, http, clock) = (self.plan.clone(), self.http.clone(), self.clock.clone());
        let attempt_timeout = self.attempt_timeout();
        // Local work fails at its own rate, drawn from the host's seeded entropy.
        let local_fails = self.plan.failure_rate.is_some_and(|rate| self.entropy.unit_f64() < rate);
        Box::pin(async move {
            let work = async {
                match &plan.kind {
                    Kind::Local => {
                        clock.sleep(Duration::from_millis(plan.latency_ms)).await;
                        if local_fails {
                            ToolOutput::Failed("the local work failed (sim.failure_rate)".into())
                        } else {
                            ToolOutput::Ok(format!("done {}", invocation.arguments))
                        }
                    }
                    Kind::External { service, dedup } => {
                        let key = dedup.then_some(invocation.execution_id.as_str());
                        let body = invocation.arguments.to_string();
                        let url = format!("http://{service}/effects");
                        attempts(&http, clock.as_ref(), &url, Some(body), key, plan.retries, attempt_timeout).await
                    }
                    Kind::Read { service } => {
                        let url = format!("http://{service}/read");
                        attempts(&http, clock.as_ref(), &url, None, None, plan.retries, attempt_timeout).await
                    }
                    Kind::Outbox => ToolOutput::Failed("delivered by the queue, not by this stand-in".into()),
                }
            };
            tokio::select! {
                output = work => output,
                () = cancel.cancelled() => match plan.kind {
                    Kind::External { .. } => ToolOutput::Unknown("stopped with a request possibly in flight".into()),
                    _ => ToolOutput::Aborted("stopped on request".into()),
                },
            }
        })
    }
}

/// Up to `1 + retries` requests: a POST of `body` (or a GET), with `key` as the idempotency
/// key when given. A reply that may have been lost makes the outcome unknown, never failed.
async fn attempts(
    http: &ToolHttp,
    clock: &dyn Clock,
    url: &str,
    body: Option<String>,
    key: Option<&str>,
    retries: u32,
    timeout: Duration,
) -> ToolOutput {
    let mut may_have_arrived = false;
    let mut last = String::new();
    for attempt in 0..=retries {
        if attempt > 0 {
            clock.sleep(Duration::from_millis(RETRY_DELAY_MS)).await;
        }
        let headers: Vec<(&str, &str)> = key.map(|k| (KEY_HEADER, k)).into_iter().collect();
        let reply = match &body {
            Some(body) => http.post(url, &headers, body.clone(), timeout).await,
            None => http.get(url, &headers, timeout).await,
        };
        match reply {
            Ok(reply) if (200..300).contains(&reply.status) => return ToolOutput::Ok(reply.body),
            Ok(reply) if reply.status >= 500 => last = format!("the service answered {}", reply.status),
            Ok(reply) => return ToolOutput::Failed(format!("the service refused ({}): {}", reply.status, reply.body)),
            Err(failure @ HttpFailure::Invalid(_)) => return ToolOutput::Failed(failure.to_string()),
            Err(failure) => {
                may_have_arrived |= failure.may_have_arrived() && body.is_some();
                last = failure.to_string();
            }
        }
    }
    if may_have_arrived {
        ToolOutput::Unknown(format!("the effect may have happened: {last}"))
    } else {
        ToolOutput::Failed(format!("failed after {} attempts: {last}", retries + 1))
    }
}
