//! The agent a product holds: submit, decide, cancel, wait and dispose over one session,
//! driving the turn loop (`turn.rs`) on its own task.

use super::history::History;
use super::state::{AgentConfig, Driver, Paused, Shared, TurnOutcome, INBOX_MESSAGES_MAX};
use super::{spans, turn};
use crate::event::{AbortCause, Message, Record};
use crate::llm::{Adapter, Credentials, LiveProvider};
use crate::store::{SessionId, Store, Takeover, WriteBehind};
use crate::tool::ToolSet;
use crate::{seams::Seams, Error, Result};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch, OnceCell};
use tokio_util::sync::CancellationToken;

/// A running agent over one session. Cheap to clone.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
    /// What resuming repaired (`None` for a new session or a clean one).
    repair: Option<crate::store::Repair>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("session", &self.shared.session_id).finish_non_exhaustive()
    }
}

/// How to get the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Open {
    /// Create a new session.
    Create,
    /// Open an existing one: cold load + crash repair, taking over a dead owner.
    Resume,
}

impl Agent {
    /// Starts an agent on session `id` of `store` (must be called inside a tokio runtime).
    /// Embedders use [`Agent::builder`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        seams: Seams,
        store: &dyn Store,
        id: &SessionId,
        open: Open,
        provider: Arc<LiveProvider>,
        credentials: Arc<dyn Credentials>,
        tools: ToolSet,
        config: AgentConfig,
    ) -> Result<Agent> {
        assert!((1..=1000).contains(&config.max_steps), "max_steps must be in 1..=1000");
        assert!((1..=64).contains(&config.tool_concurrency), "tool_concurrency must be in 1..=64");
        assert!(
            (1..=crate::store::ANSWER_BYTES_MAX).contains(&config.answer_bytes_max),
            "answer_bytes_max must be in 1..=ANSWER_BYTES_MAX"
        );
        let (log, records, repair) = match open {
            Open::Create => (store.create(id, seams.clock.now_ms())?, Vec::new(), None),
            Open::Resume => {
                // What was only read back is not work done again: one span says what the
                // repair found, and no span is emitted for the records it replays.
                let span = spans::recovery(&seams.secrets, id.as_str());
                let opened = span.in_scope(|| store.open_conversation(id, Takeover::IfDead))?;
                spans::recovered(&span, opened.loaded.records.len(), opened.loaded.repair.as_ref());
                (opened.log, opened.loaded.records, opened.loaded.repair)
            }
        };
        if let Some(repair) = &repair {
            tracing::info!(
                closers = repair.closers.len(),
                salvaged = repair.recovered.len(),
                truncated_bytes = repair.truncated_bytes,
                dropped_records = repair.dropped_records,
                "session repaired on resume"
            );
        }
        let (failures, _) = broadcast::channel(64);
        let reporter_failures = failures.clone();
        let reporter: crate::store::FailureReporter = Arc::new(move |e: &Error| {
            let _ = reporter_failures.send(e.to_string());
        });
        let session_epoch = log.token();
        let session = WriteBehind::start_probed(
            log,
            seams.clock.clone(),
            config.write_behind,
            Some(reporter),
            seams.probe.clone(),
        );
        let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), credentials)
            .with_scrubber(seams.secrets.clone())
            .with_fs(seams.fs.clone())
            .with_proxy_env(config.proxy_env.clone())
            .with_platform_roots(config.platform_roots.clone());
        let paused = paused_turn(&records);
        let shared = Arc::new(Shared {
            session_id: id.to_string(),
            session_epoch,
            session,
            provider,
            adapter,
            tools: Mutex::new(tools),
            config,
            driver: Mutex::default(),
            history: tokio::sync::Mutex::new(History::from_records(&records)),
            usage: Mutex::new(crate::event::Usage::of_records(&records).1),
            idle: watch::channel(true).0,
            header_written: AtomicBool::new(false),
            disposal: OnceCell::new(),
            failures,
            seams,
        });
        shared.set_paused(paused);
        Ok(Agent { shared, repair })
    }

    /// The crash repair that resuming the session committed, if it needed one: what a caller
    /// should tell a person (closers written, torn bytes and records dropped).
    pub fn startup_repair(&self) -> Option<&crate::store::Repair> {
        self.repair.as_ref()
    }

    /// Tokens the whole session's attempts reported so far (what resuming found included).
    pub fn session_usage(&self) -> crate::event::Usage {
        *self.shared.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the tool set; the next request advertises it (a `request/header` with reason
    /// `change` records the new prefix) and the next calls use it.
    pub fn set_tools(&self, tools: ToolSet) {
        *self.shared.tools.lock().unwrap_or_else(|p| p.into_inner()) = tools;
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.shared.session_id
    }

    /// Every record as it is accepted into the session log.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Record>> {
        self.shared.session.subscribe()
    }

    /// The session's durable watermark: every record below it survives a crash.
    pub fn durable_watermark(&self) -> watch::Receiver<u64> {
        self.shared.session.durable_watermark()
    }

    /// Persistence failures of the background path, as they happen.
    pub fn failures(&self) -> broadcast::Receiver<String> {
        self.shared.failures.subscribe()
    }

    /// The outcome of the last finished turn.
    pub fn last_outcome(&self) -> Option<TurnOutcome> {
        self.shared.lock().last_outcome.clone()
    }

    /// The calls the session's paused turn waits on (FAILURE-APPROVAL), in the model's order;
    /// empty when no turn is paused. A resumed session that was paused is paused again.
    pub fn awaiting_approval(&self) -> Vec<crate::approval::PendingApproval> {
        self.shared.lock().paused.as_ref().map(|p| p.calls.clone()).unwrap_or_default()
    }

    /// Decides one call the paused turn waits on, as this session's owner: the decision is
    /// checked ([`crate::approval::check_decision`]'s rules), appended as `approval/decided`
    /// and made durable before this returns. It does not continue the turn:
    /// [`Agent::continue_turn`] does, once every call is decided (or to pause again).
    ///
    /// The check, the append and the paused turn's own note of the decision happen at once,
    /// so a second decision, a continue or a cancel racing this one sees it: a decision is
    /// taken exactly once. An [`Error::Persist`] after that means the decision is queued but not
    /// yet durable — a later flush (the turn's own, or a retry of `continue_turn`) writes it;
    /// deciding again is refused.
    pub async fn decide(&self, request: &crate::approval::DecisionRequest) -> Result<crate::approval::Decided> {
        let mut request = request.clone();
        request.reason = request.reason.map(|r| self.shared.seams.secrets.scrub(&r));
        let now = self.shared.seams.clock.now_ms();
        let call_id = request.call_id.clone();
        let decided = {
            let mut driver = self.shared.lock();
            if driver.running {
                return Err(Error::ApprovalRefused("a turn is running: decide once it has paused".into()));
            }
            let waiting = driver.paused.as_ref().map(|p| p.calls.clone()).unwrap_or_default();
            let decided = crate::approval::check_against(waiting, &request, now, || {
                format!("call {call_id} is not waiting for a decision in this session's paused turn")
            })?;
            let event = crate::event::Event::ApprovalDecided(decided.record.clone());
            // Planted: the old order — checked here, queued after an await, noted after the
            // flush — where a second decision or a continue slipped in between.
            if !crate::testing::bugs::planted("decision-raced") {
                if self.shared.session.try_append_shared(event, None)?.is_none() {
                    return Err(Error::ApprovalRefused(
                        "the session's write queue is full: decide again once it drains".into(),
                    ));
                }
                note_decision(&mut driver, &call_id, &decided);
            }
            decided
        };
        if crate::testing::bugs::planted("decision-raced") {
            let event = crate::event::Event::ApprovalDecided(decided.record.clone());
            self.shared.session.append_shared(event, None).await?;
        }
        if !crate::testing::bugs::planted("dispatch-before-durable") {
            self.shared.session.flush().await?;
            // Decided and durable, nothing dispatched: the turn still waits.
            let probe = self.shared.seams.probe.as_ref();
            crate::seams::crash_point(probe, crate::seams::CrashPoint::AwaitingApproval).await;
        }
        if crate::testing::bugs::planted("decision-raced") {
            note_decision(&mut self.shared.lock(), &call_id, &decided);
        }
        Ok(decided)
    }

    /// Continues the paused turn: approved calls run once, denied and expired ones are
    /// answered as never run, and the model goes on; a call still undecided pauses it again.
    /// Await [`Agent::when_idle`], then read [`Agent::last_outcome`].
    pub fn continue_turn(&self) -> Result<()> {
        let mut driver = self.shared.lock();
        if driver.disposed {
            return Err(Error::Closed);
        }
        if driver.paused.is_none() {
            return Err(Error::ApprovalRefused("no turn of this session is paused for approval".into()));
        }
        driver.continue_paused = true;
        if !driver.running {
            driver.running = true;
            self.shared.idle.send_replace(false);
            tokio::spawn(drive(self.shared.clone()));
        }
        Ok(())
    }

    /// Queues a user message; a turn starts when the agent is idle. Input that arrives while
    /// a turn is being aborted is kept for the next turn (the wake latch). Refused while a turn
    /// is paused for approval.
    pub fn submit(&self, text: impl Into<String>) -> Result<()> {
        let mut driver = self.shared.lock();
        if driver.disposed {
            return Err(Error::Closed);
        }
        if let Some(paused) = &driver.paused {
            let calls: Vec<&str> = paused.calls.iter().map(|c| c.call_id.as_str()).collect();
            return Err(Error::AwaitingApproval { id: self.shared.session_id.clone(), calls: calls.join(", ") });
        }
        if let Some(broken) = &driver.broken {
            return Err(Error::Persist(broken.clone()));
        }
        if driver.inbox.len() >= INBOX_MESSAGES_MAX {
            return Err(Error::BadBatch(format!("the inbox holds {INBOX_MESSAGES_MAX} messages already")));
        }
        let text = text.into();
        // A message its record could not hold is refused here: accepted, it would sit at the
        // front of the write-behind queue, refused by the store on every flush, forever.
        let bytes = crate::store::json_escaped_bytes(&text);
        if bytes > crate::store::ANSWER_BYTES_MAX {
            return Err(Error::BadBatch(format!(
                "the message is {bytes} bytes as JSON, above the {}-byte limit of one record",
                crate::store::ANSWER_BYTES_MAX
            )));
        }
        driver.inbox.push_back(Message::user_text(text));
        if !driver.running {
            driver.running = true;
            self.shared.idle.send_replace(false);
            tokio::spawn(drive(self.shared.clone()));
        }
        Ok(())
    }

    /// Clears unclaimed input and aborts the current turn (a turn paused for approval too:
    /// its waiting calls are answered as never run). Returning does not mean the turn ended:
    /// await [`Agent::when_idle`].
    pub fn cancel(&self) {
        self.abort(AbortCause::User, true);
        let mut driver = self.shared.lock();
        if driver.paused.is_some() && !driver.running && !driver.disposed {
            driver.cause = Some(AbortCause::User);
            driver.continue_paused = true;
            driver.running = true;
            self.shared.idle.send_replace(false);
            tokio::spawn(drive_cancelled(self.shared.clone()));
        }
    }

    /// Aborts the current turn but keeps unclaimed input, which starts the next turn.
    pub fn cancel_keep_inbox(&self) {
        self.abort(AbortCause::User, false);
    }

    fn abort(&self, cause: AbortCause, clear_inbox: bool) {
        let mut driver = self.shared.lock();
        if clear_inbox {
            driver.inbox.clear();
        }
        abort_running(&mut driver, cause);
    }

    /// Completes when no turn is running and nothing is queued.
    pub async fn when_idle(&self) {
        let mut idle = self.shared.idle.subscribe();
        let _ = idle.wait_for(|idle| *idle).await;
    }

    /// Disposes the agent, once: cancel with cause `disposed` (new input is refused from
    /// here on), await idle, then release the session (final flush, ownership). Every caller
    /// awaits the same completion (FAILURE-AGENT-DISPOSAL).
    pub async fn dispose(&self) -> Result<()> {
        let result = self
            .shared
            .disposal
            .get_or_init(|| async {
                {
                    let mut driver = self.shared.lock();
                    driver.disposed = true;
                    driver.inbox.clear();
                    abort_running(&mut driver, AbortCause::Disposed);
                }
                self.when_idle().await;
                self.shared.session.clone().close().await.map_err(|e| match e {
                    Error::Persist(inner) => inner,
                    other => Arc::new(other),
                })
            })
            .await;
        result.clone().map_err(Error::Persist)
    }
}

/// Notes a decision taken on the paused turn that waits on `call_id`.
fn note_decision(driver: &mut Driver, call_id: &str, decided: &crate::approval::Decided) {
    if let Some(call) = driver.paused.as_mut().and_then(|p| p.calls.iter_mut().find(|c| c.call_id == call_id)) {
        call.decision = Some((decided.record.decision, decided.record.by.clone(), decided.record.reason.clone()));
    }
}

/// Aborts the running turn with `cause`: its token now, or — a paused turn asked to continue
/// whose drive has not taken it yet (a `continue_turn` just before) — that turn, the moment it
/// is taken. A cancel right after a continue is never lost; queued input a cancel keeps is
/// not the turn it aborts.
fn abort_running(driver: &mut Driver, cause: AbortCause) {
    if let Some(current) = driver.current.clone() {
        driver.cause = Some(cause);
        current.cancel();
    } else if driver.continue_paused && !crate::testing::bugs::planted("cancel-before-drive-lost") {
        driver.cause = Some(cause);
        driver.cancel_next = true;
    }
}

/// The calls the last turn of `records` waits on, as the paused turn they make.
fn paused_turn(records: &[Record]) -> Option<Paused> {
    let calls = crate::approval::awaiting_approval(records);
    let first = calls.first()?;
    Some(Paused { turn: first.turn, step: first.step, calls })
}

/// The driver of a cancel of a paused turn: its calls closed as never run.
async fn drive_cancelled(shared: Arc<Shared>) {
    drive_from(shared, true).await;
}

/// The driver: continues a paused turn when asked, else claims queued input one turn at a
/// time, each with a fresh token; nothing new starts while a turn is paused.
async fn drive(shared: Arc<Shared>) {
    drive_from(shared, false).await;
}

async fn drive_from(shared: Arc<Shared>, cancelled: bool) {
    let mut cancelled = cancelled;
    loop {
        let (start, token) = {
            let mut driver = shared.lock();
            let token = CancellationToken::new();
            let start = if driver.continue_paused {
                driver.continue_paused = false;
                driver.paused.take().map(turn::Start::Paused)
            } else if driver.paused.is_some() {
                None
            } else {
                driver.inbox.pop_front().map(turn::Start::Message)
            };
            let Some(start) = start else {
                driver.running = false;
                driver.current = None;
                driver.cancel_next = false;
                shared.idle.send_replace(true);
                return;
            };
            if std::mem::take(&mut cancelled) || std::mem::take(&mut driver.cancel_next) {
                token.cancel();
            } else {
                driver.cause = None;
            }
            driver.current = Some(token.clone());
            (start, token)
        };
        let mut history = shared.history.lock().await;
        let ended = turn::run_turn(&shared, &mut history, start, token.clone()).await;
        // A cancel that came while the turn was pausing closes it now, not at the next decision.
        if token.is_cancelled() && shared.lock().paused.is_some() {
            shared.lock().continue_paused = true;
            cancelled = true;
        }
        drop(history);
        shared.usage.lock().unwrap_or_else(|p| p.into_inner()).add(&ended.outcome.usage);
        let mut driver = shared.lock();
        driver.current = None;
        driver.last_outcome = Some(ended.outcome);
        if let Some(error) = ended.broke {
            shared.report(&error);
            // Queued input would start a turn inside the one left open: refused from here on.
            driver.inbox.clear();
            driver.broken = Some(Arc::new(error));
        }
    }
}
