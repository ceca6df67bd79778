//! One turn: from the user's message to its `turn.ended`, the actor's turn loop
//! ([`Actor::run_turn`]): start the agent, read it to its exit while serving commands and
//! watching the turn's clocks, record the ending. What its output becomes and how the turn
//! ended are decided by the pure [`super::driver`], which `codebuffd convert` shares.

use std::time::Duration;

use futures_util::FutureExt;
use nix::sys::signal::Signal;
use tokio::time::{sleep_until, Instant};

use super::actor::Actor;
use super::driver::{Ending, StopReason, TurnDriver, FINISH_GRACE};
use super::info::SessionStatus;
use super::message::UserMessage;
use super::queue::Queued;
use super::SessionError;
use crate::agent::{procfs, AgentProcess, ExitInfo, TurnLaunch};
use crate::codebuff::TurnOutcome;
use crate::codebuff::{DecidedBy, PermissionReply};
use crate::store::RunningProcess;
use crate::universal::{ErrorData, EventData, EventDraft, TurnStatus};

/// Output events handled before the log is appended to (batching bounds append cost). Each
/// session keeps room for this many drafts (144 bytes each) while its turn runs: 512 held 2.9
/// MB for twenty flooding sessions, and appends of 128 cost no more per event.
const BATCH: usize = 128;
/// How long after its own `--timeout` the daemon lets a turn run before stopping it.
const TIMEOUT_BACKSTOP: Duration = Duration::from_secs(5);

impl Actor {
    /// The status of a running turn: awaiting input while a question or a permission request
    /// waits for its answer.
    fn show_progress(&self) {
        let status =
            if self.converter.has_pending_questions() || self.converter.has_pending_permissions() {
                SessionStatus::AwaitingInput
            } else {
                SessionStatus::Running
            };
        let current = self.shared.lock().status;
        if current != status {
            self.set_status(status);
            // Other engines list and filter sessions by their records.
            self.persist_status();
        }
    }

    /// Gives each newly open permission request its deadline, forgets answered ones, and arms
    /// `timer` for the earliest.
    fn arm_permission_deadlines(
        &self,
        deadlines: &mut Vec<(String, Instant)>,
        timer: std::pin::Pin<&mut tokio::time::Sleep>,
        far: Instant,
    ) {
        let open = self.converter.pending_permission_ids();
        deadlines.retain(|(id, _)| open.contains(id));
        for id in open {
            if !deadlines.iter().any(|(known, _)| *known == id) {
                deadlines.push((id, Instant::now() + self.ctx.limits.permission_timeout));
            }
        }
        let next = deadlines.iter().map(|(_, at)| *at).min().unwrap_or(far);
        if timer.deadline() != next {
            timer.reset(next);
        }
    }

    /// Runs one turn: the user item, one agent process to its exit, the turn's ending.
    pub(super) async fn run_turn(&mut self, queued: Queued) {
        if let Some(refused) = self.over_budget() {
            // A message queued before the budget ran out: it is not run, and the log says so.
            self.drafts
                .push(EventDraft::synthetic(EventData::Error(Box::new(
                    ErrorData {
                        message: format!("a queued message was not run: {refused}"),
                        code: Some("budget_exhausted".to_owned()),
                        details: None,
                    },
                ))));
            self.flush().await;
            if let Some(tx) = queued.started {
                let _ = tx.send(Err(refused));
            }
            return;
        }
        self.reject_stale_questions();
        self.flush().await;
        // The last appended event, which a store may not show readers yet (it shows events
        // once committed): the turn's stream starts right after it either way.
        let first = self.shared.lock().event_count + 1;
        self.converter
            .begin_turn_with(queued.message.content(), &mut self.drafts);
        if !self.flush().await {
            // Not even the turn's start could be recorded: no agent runs; the run loop waits
            // for the log and records the turn as failed.
            if let Some(tx) = queued.started {
                let why = self.store_failure.clone().unwrap_or_default();
                let _ = tx.send(Err(SessionError::StoreUnavailable(why)));
            }
            return;
        }
        // Counted and running once the log holds the turn's start (`turn.started` waits for
        // its commit): whoever sees the turn begun, or the session running, reads a log with
        // the turn open (a turn the log refused is counted from the log by `resync`).
        {
            let mut live = self.shared.lock();
            live.turns += 1;
            if live.first_prompt.is_none() {
                live.first_prompt = Some(super::info::prompt_preview(&queued.message.text));
            }
        }
        self.set_status(SessionStatus::Running);
        if let Some(tx) = queued.started {
            let _ = tx.send(Ok(first));
        }

        let started = Instant::now();
        let mut driver = TurnDriver::new(self.ctx.agents.max_line_bytes);
        let (outcome, stop) = match self.start_agent(&queued.message) {
            Ok(started) => {
                let pid = started.pid();
                self.persist(Some(RunningProcess {
                    pid,
                    pgid: pid,
                    start_ticks: procfs::start_ticks(pid).unwrap_or(0),
                }));
                // The agent's pid must be on disk before it gets its turn: an engine killed
                // sooner leaves an agent that reads end-of-file before any turn and exits,
                // later one whose pid a survivor reads to kill it (waited for off the
                // runtime's threads).
                let store = self.ctx.store.clone();
                let flushed = tokio::task::spawn_blocking(move || store.flush()).await;
                if let Ok(Err(error)) = flushed {
                    tracing::error!(session = %self.id, %error, "saving the running agent failed");
                }
                let process = started.begin();
                let (stop, exit) = self.supervise(process, &mut driver).await;
                // A spare for the next turn if the agent never spoke (none when nothing will
                // take another turn).
                if !matches!(stop, Some(StopReason::Terminated | StopReason::Shutdown)) {
                    self.ctx.agents.prewarm(self.settings.agent);
                }
                let outcome = driver.outcome(&self.converter, stop.as_ref(), Ending::Exited(exit));
                (outcome, stop)
            }
            Err(error) => {
                let message = error.to_string();
                self.converter
                    .fail_to_start(error.code(), &message, &mut self.drafts);
                let outcome = TurnOutcome {
                    status: TurnStatus::Failed,
                    exit_code: None,
                    signal: None,
                    message: Some(message),
                    stderr: None,
                };
                (outcome, None)
            }
        };
        // Requests nobody answered end with the turn.
        let why = match &stop {
            Some(StopReason::Cancelled) => "the turn was cancelled",
            Some(StopReason::Terminated) => "the session was terminated",
            Some(StopReason::Shutdown) => "the daemon shut down",
            _ => "the turn ended",
        };
        for id in self.converter.pending_permission_ids() {
            let _ = self.converter.resolve_permission(
                &id,
                PermissionReply::Reject,
                DecidedBy::Daemon,
                Some(why),
                &mut self.drafts,
            );
        }
        if self.store_failure.is_some() {
            // The log lost part of this turn: the run loop ends it from the log once the log
            // can be written (`resync`).
            match stop {
                Some(StopReason::Terminated) => self.mark_terminated(),
                Some(StopReason::Shutdown) => self.exit = true,
                _ => {}
            }
            return;
        }
        self.converter.end_turn(outcome, &mut self.drafts);
        if let Some(reached) = self.over_budget() {
            // Say once, where it happened, why the session takes no more messages.
            self.drafts
                .push(EventDraft::synthetic(EventData::Error(Box::new(
                    ErrorData {
                        message: reached.to_string(),
                        code: Some("budget_exhausted".to_owned()),
                        details: None,
                    },
                ))));
        }
        super::observe::turn_ended(
            &self.id,
            self.settings.agent,
            Some(started.into_std()),
            &self.drafts,
        );
        self.flush().await;
        match stop {
            Some(StopReason::Terminated) => self.end_session_terminated().await,
            Some(StopReason::Shutdown) => self.exit = true,
            _ => {}
        }
        // Idle only once the log holds the turn's end: a refused append leaves the session
        // failed until `resync` has recorded how the turn ended.
        if self.store_failure.is_none() {
            self.set_status(SessionStatus::Idle);
        }
        self.persist(None);
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
    }

    /// The refusal a message gets when the session has spent its budget.
    pub(super) fn over_budget(&self) -> Option<SessionError> {
        let budget = self.settings.max_credits?;
        let spent = self.converter.cost_with_running_turn().credits;
        (spent >= budget).then_some(SessionError::BudgetExhausted { spent, budget })
    }

    /// Starts the agent process of a turn.
    fn start_agent(
        &self,
        message: &UserMessage,
    ) -> Result<crate::agent::StartedAgent, crate::agent::LaunchError> {
        let s = &self.settings;
        tracing::info!(session = %self.id, agent = s.agent.id(), "starting a turn");
        // Checked at every turn, on the real path the agent will get: a directory that was fine
        // at create may be a symbolic link pointed since into the daemon's own directories.
        let cwd = self
            .ctx
            .policy
            .turn_directory(&s.directory)
            .map_err(crate::agent::LaunchError::DirectoryProtected)?;
        // Plan mode is read-only: the agent plans too.
        let agent_mode = if s.permission_mode == "plan" {
            "plan".to_owned()
        } else {
            self.shared.lock().agent_mode.clone()
        };
        self.ctx.agents.start(&TurnLaunch {
            kind: s.agent,
            agent_mode: &agent_mode,
            model: s.model.as_deref(),
            continue_session: self.converter.native_session_id(),
            timeout: s.turn_timeout.or(self.ctx.limits.turn_timeout),
            cwd: &cwd,
            prompt: &message.text,
            env: &s.env,
            api_key: s.api_key.as_deref(),
            permission_mode: if s.permission_mode == "bypass" {
                "bypass"
            } else {
                "ask"
            },
            images: &message.images,
        })
    }

    /// Reads the process to its exit while serving commands and watching the clocks; returns
    /// why the daemon stopped it (if it did) and how it exited.
    async fn supervise(
        &mut self,
        mut process: AgentProcess,
        driver: &mut TurnDriver,
    ) -> (Option<StopReason>, ExitInfo) {
        let limits = self.ctx.limits.clone();
        let timeout = self.settings.turn_timeout.or(limits.turn_timeout);
        // The agent enforces `--timeout` itself; the daemon's deadline is a backstop after it.
        let deadline = timeout.map(|t| Instant::now() + t + TIMEOUT_BACKSTOP);
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        // Both clocks are armed once: output moves `last_output` on, and the idle timer,
        // when it fires early, re-arms itself for the real deadline (no timer is registered
        // per line, which a steady trickle of output would pay for every line).
        let mut last_output = Instant::now();
        let turn_timer = sleep_until(deadline.unwrap_or(far));
        let idle_timer = sleep_until(limits.inactivity_timeout.map_or(far, |t| last_output + t));
        // Armed when the run says `finish`.
        let finish_timer = sleep_until(far);
        let mut finish_armed = false;
        // Armed for the earliest deadline of the open permission requests.
        let permission_timer = sleep_until(far);
        let mut permission_deadlines: Vec<(String, Instant)> = Vec::new();
        tokio::pin!(turn_timer, idle_timer, finish_timer, permission_timer);
        let mut stop: Option<StopReason> = None;
        let mut exit: Option<ExitInfo> = None;
        // A store that can fail says so here, even while the agent prints nothing.
        let mut health = self.ctx.store.health();
        // The next turn's spare starts once this agent has printed something (it has loaded).
        let mut spare_due = true;

        while exit.is_none() {
            if stop.is_none() {
                if let Some(why) = self.store_failure.clone() {
                    stop = Some(StopReason::StoreFailed(format!(
                        "the event log could not take this turn's events: {why}"
                    )));
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
            }
            tokio::select! {
                event = process.next_event() => {
                    let mut event = event;
                    let mut handled = 0;
                    while let Some(ev) = event.take() {
                        if let Some(info) = driver.take(&mut self.converter, ev, &mut self.drafts) {
                            exit = Some(info);
                            break;
                        }
                        handled += 1;
                        if handled >= BATCH {
                            break;
                        }
                        event = process.next_event().now_or_never().flatten();
                    }
                    if spare_due {
                        spare_due = false;
                        self.ctx.agents.prewarm(self.settings.agent);
                    }
                    self.wait_for_room().await;
                    self.flush().await;
                    last_output = Instant::now();
                    if self.converter.run_finished() && !finish_armed {
                        // Nothing more can be asked of the agent: its stdin closes (a wrapper
                        // reading it ends too), and it has a moment to exit.
                        finish_armed = true;
                        process.close_stdin();
                        finish_timer.as_mut().reset(Instant::now() + FINISH_GRACE);
                    }
                    // The policy's answers go to the agent.
                    for line in self.converter.take_outbox() {
                        if let Err(error) = process.queue_line(&line) {
                            tracing::warn!(session = %self.id, %error, "the agent no longer reads its stdin");
                        }
                    }
                    self.arm_permission_deadlines(&mut permission_deadlines, permission_timer.as_mut(), far);
                    if stop.is_none() {
                        if let Some(reached) = self.over_budget() {
                            stop = Some(StopReason::BudgetExhausted(reached.to_string()));
                            process.stop(Signal::SIGINT, limits.cancel_grace);
                        }
                    }
                    self.show_progress();
                }
                _ = &mut permission_timer, if !permission_deadlines.is_empty() => {
                    let now = Instant::now();
                    let expired: Vec<String> = permission_deadlines
                        .iter()
                        .filter(|(_, at)| *at <= now)
                        .map(|(id, _)| id.clone())
                        .collect();
                    let why = format!(
                        "nobody answered within {} s",
                        limits.permission_timeout.as_secs_f64()
                    );
                    for id in expired {
                        let _ = self.resolve_permission(&mut process, &id, PermissionReply::Reject, DecidedBy::Timeout, Some(&why)).await;
                    }
                    self.arm_permission_deadlines(&mut permission_deadlines, permission_timer.as_mut(), far);
                    self.show_progress();
                }
                cmd = self.rx.recv() => {
                    match cmd {
                        Some(cmd) => {
                            self.handle_running(cmd, &mut process, &mut stop).await;
                            self.arm_permission_deadlines(&mut permission_deadlines, permission_timer.as_mut(), far);
                            self.show_progress();
                        }
                        None => {
                            stop = Some(StopReason::Shutdown);
                            process.stop(Signal::SIGTERM, limits.stop_grace);
                        }
                    }
                }
                changed = async { health.as_mut()?.changed().await.ok() }, if health.is_some() && stop.is_none() => {
                    let Some(()) = changed else {
                        health = None;
                        continue;
                    };
                    let trouble = health.as_ref().and_then(|h| h.borrow().as_deref().map(str::to_owned));
                    if let Some(why) = trouble {
                        // The log refused queued events, this session's among them, maybe.
                        self.store_failure = Some(why);
                        self.set_status(SessionStatus::Failed);
                    }
                }
                _ = &mut finish_timer, if finish_armed && stop.is_none() => {
                    stop = Some(StopReason::Lingered);
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
                _ = &mut turn_timer, if deadline.is_some() && stop.is_none() => {
                    let secs = timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                    stop = Some(StopReason::TimedOut(format!("the turn exceeded its timeout of {secs} s")));
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
                _ = &mut idle_timer, if limits.inactivity_timeout.is_some() && stop.is_none() => {
                    let idle = limits.inactivity_timeout.unwrap_or_default();
                    let due = last_output + idle;
                    if due > Instant::now() {
                        idle_timer.as_mut().reset(due);
                        continue;
                    }
                    let secs = idle.as_secs_f64();
                    stop = Some(StopReason::TimedOut(format!("the agent printed nothing for {secs} s")));
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
            }
        }
        let exit = exit.unwrap_or(ExitInfo {
            code: None,
            signal: None,
        });
        (stop, exit)
    }
}
