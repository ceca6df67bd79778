//! The session actor: one task per session that owns its converter and runs its turns.
//!
//! Everything that changes a session goes through the actor's command channel, so the log has
//! exactly one writer and the lifecycle rules (`universal-events.md` §3) are enforced in one
//! place: messages queue and run one turn at a time; each turn runs one agent process to its
//! exit; every turn gets exactly one `turn.ended` and a session at most one `session.ended`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

use super::context::SessionContext;
use super::info::{EndState, SessionStatus};
use super::recovery::LogSummary;
use super::{SessionError, SessionSettings};
use crate::agent::{
    agent_args, agent_env, credentials, procfs, AgentKind, AgentProcess, ExitInfo, OutputStream,
    ProcessEvent, SpawnSpec, TurnCommand,
};
use crate::codebuff::{CodebuffConverter, QuestionError, Stream, TurnOutcome};
use crate::store::{RunningProcess, SessionRecord};
use crate::universal::{
    format_time, Cost, EventData, EventDraft, QuestionData, SessionEndReason, SessionEndedData,
    StderrCollector, TerminatedBy, TurnStatus,
};

/// Output events handled before the log is appended to (batching bounds append cost).
const BATCH: usize = 512;

/// A request to a session actor.
pub(crate) enum Command {
    /// Queue a user message; `started` gets the sequence of its `turn.started`.
    Message {
        prompt: String,
        started: Option<oneshot::Sender<Result<u64, SessionError>>>,
    },
    Answer {
        question_id: String,
        answers: Vec<Vec<String>>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Reject {
        question_id: String,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Cancel {
        reply: oneshot::Sender<()>,
    },
    Terminate {
        reply: oneshot::Sender<()>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// The live part of `SessionInfo`, written by the actor, read by anyone.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub status: SessionStatus,
    pub end: Option<EndState>,
    pub native_session_id: Option<String>,
    pub cost: Cost,
    pub turns: u64,
    pub event_count: u64,
    pub updated_at: u64,
}

/// Shared between the actor and the manager.
pub(crate) type Shared = Arc<Mutex<Live>>;

struct Queued {
    prompt: String,
    started: Option<oneshot::Sender<Result<u64, SessionError>>>,
}

/// Why the daemon stopped a running turn.
#[derive(Debug, Clone, PartialEq)]
enum StopReason {
    Cancelled,
    Terminated,
    Shutdown,
    TimedOut(String),
}

pub(crate) struct Actor {
    id: Arc<str>,
    settings: Arc<SessionSettings>,
    ctx: Arc<SessionContext>,
    shared: Shared,
    converter: CodebuffConverter,
    queue: VecDeque<Queued>,
    rx: mpsc::UnboundedReceiver<Command>,
    drafts: Vec<EventDraft>,
    /// Replies owed once the running turn has ended (terminate, shutdown).
    waiting: Vec<oneshot::Sender<()>>,
    exit: bool,
    created_at: u64,
    /// Set for a session loaded from the store: recover before serving commands.
    restore: Option<Option<RunningProcess>>,
    /// Whether the store's write queue has room (a store whose appends can wait; see
    /// [`crate::store::EventStore::room`]).
    room: Option<watch::Receiver<bool>>,
}

/// Milliseconds since the epoch, for `SessionInfo`.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Actor {
    pub(crate) fn new(
        id: Arc<str>,
        settings: Arc<SessionSettings>,
        ctx: Arc<SessionContext>,
        shared: Shared,
        rx: mpsc::UnboundedReceiver<Command>,
        created_at: u64,
    ) -> Self {
        Actor {
            restore: None,
            room: ctx.store.room(),
            created_at,
            id,
            settings,
            ctx,
            shared,
            converter: CodebuffConverter::new(),
            queue: VecDeque::new(),
            rx,
            drafts: Vec::new(),
            waiting: Vec::new(),
            exit: false,
        }
    }

    /// Marks the actor as restoring a stored session whose record names `running`.
    pub(crate) fn restoring(mut self, running: Option<RunningProcess>) -> Self {
        self.restore = Some(running);
        self
    }

    /// Runs until the daemon shuts down (or every handle to the session is gone).
    pub(crate) async fn run(mut self) {
        if let Some(running) = self.restore.take() {
            self.recover(running).await;
        }
        while !self.exit {
            if self.ended().is_none() {
                if let Some(next) = self.queue.pop_front() {
                    self.run_turn(next).await;
                    continue;
                }
            }
            match self.rx.recv().await {
                Some(cmd) => self.handle_idle(cmd),
                None => break,
            }
        }
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
    }

    fn ended(&self) -> Option<EndState> {
        self.live().end.clone()
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_status(&self, status: SessionStatus) {
        let mut live = self.live();
        if live.end.is_none() {
            live.status = status;
        }
    }

    /// The error a message to an ended session gets.
    fn ended_error(end: &EndState) -> SessionError {
        match end {
            EndState::Terminated => SessionError::Terminated,
            EndState::Error(message) => SessionError::AgentExited(message.clone()),
        }
    }

    /// Waits while the store's write queue is full, so the append after it does not block
    /// a runtime thread (other sessions' tasks go on meanwhile); the agent's output waits in
    /// its pipe.
    async fn wait_for_room(&mut self) {
        if let Some(room) = &mut self.room {
            let _ = room.wait_for(|room| *room).await;
        }
    }

    /// Appends the pending drafts to the log and refreshes the live info.
    fn flush(&mut self) {
        if self.drafts.is_empty() {
            return;
        }
        let time: Arc<str> = format_time(time::OffsetDateTime::now_utc()).into();
        let native = self.converter.native_session_id();
        match self
            .ctx
            .store
            .append(&self.id, &mut self.drafts, time, native)
        {
            Ok(last) => {
                let mut live = self.shared.lock().unwrap_or_else(|p| p.into_inner());
                live.event_count = last;
                live.updated_at = now_ms();
                // The conversation id changes once; don't copy it on every append.
                if live.native_session_id.as_deref() != native {
                    live.native_session_id = native.map(str::to_owned);
                }
                live.cost = self.converter.session_cost();
            }
            Err(error) => {
                tracing::error!(session = %self.id, %error, "appending to the event log failed");
                self.drafts.clear();
            }
        }
    }

    /// The session's record as the store keeps it.
    fn record(&self, running: Option<RunningProcess>) -> SessionRecord {
        let live = self.live().clone();
        let (end_reason, end_message) = match &live.end {
            None => (None, None),
            Some(EndState::Terminated) => (Some("terminated".to_owned()), None),
            Some(EndState::Error(m)) => (Some("error".to_owned()), Some(m.clone())),
        };
        SessionRecord {
            session_id: self.id.to_string(),
            agent: self.settings.agent.id().to_owned(),
            created_at: self.created_at,
            updated_at: live.updated_at,
            settings: self.settings.to_json(),
            native_session_id: live.native_session_id.clone(),
            status: status_name(live.status).to_owned(),
            ended: live.end.is_some(),
            end_reason,
            end_message,
            cost_credits: live.cost.credits,
            turns: live.turns,
            event_count: live.event_count,
            running,
            // Also adopts a restored session written before sessions had owners.
            owner: self.ctx.instance_id.clone(),
        }
    }

    /// Writes the session's record (with the running agent process, if any).
    fn persist(&self, running: Option<RunningProcess>) {
        if let Err(error) = self.ctx.store.put_session(&self.record(running)) {
            tracing::error!(session = %self.id, %error, "saving the session record failed");
        }
    }

    /// Brings a stored session back: kills the agent of a turn the previous daemon left running
    /// (only if it is still the same process), ends that turn as interrupted, and restores the
    /// converter's state from the log.
    async fn recover(&mut self, running: Option<RunningProcess>) {
        if let Some(p) = &running {
            if procfs::kill_group_if_same(p.pid, p.pgid, p.start_ticks) {
                tracing::warn!(session = %self.id, pid = p.pid, "killed the agent a previous daemon left running");
            }
        }
        let store = self.ctx.store.clone();
        let id = self.id.clone();
        let summary = tokio::task::spawn_blocking(move || {
            let mut summary = LogSummary::default();
            loop {
                match store.read(&id, summary.last_sequence, 1024) {
                    Ok(page) if !page.is_empty() => {
                        for stored in &page {
                            match stored.decode() {
                                Ok(event) => summary.observe(&event),
                                Err(error) => {
                                    tracing::error!(session = %id, %error, "an event of the log cannot be read back");
                                    summary.last_sequence = stored.sequence;
                                }
                            }
                        }
                    }
                    Ok(_) => break,
                    Err(error) => {
                        tracing::error!(session = %id, %error, "reading the log to restore the session failed");
                        break;
                    }
                }
            }
            summary
        })
        .await
        .unwrap_or_default();
        self.converter = CodebuffConverter::restored(
            summary.last_item,
            summary.turns,
            summary.native_session_id.clone(),
            summary.cost,
            summary.pending_questions.values().cloned().collect(),
            summary.resolved_questions.clone(),
        );
        self.drafts.extend(
            summary.interrupted_turn("the daemon stopped during this turn and was restarted"),
        );
        self.flush();
        {
            let mut live = self.live();
            live.cost = summary.cost;
            live.turns = summary.turns;
            live.native_session_id = summary.native_session_id.clone();
            if live.end.is_none() {
                live.status = SessionStatus::Idle;
            }
        }
        self.persist(None);
    }

    /// Handles a command while no turn runs.
    fn handle_idle(&mut self, cmd: Command) {
        match cmd {
            Command::Message { prompt, started } => match self.ended() {
                Some(end) => {
                    if let Some(tx) = started {
                        let _ = tx.send(Err(Self::ended_error(&end)));
                    }
                }
                None => self.queue.push_back(Queued { prompt, started }),
            },
            Command::Answer {
                question_id,
                answers,
                reply,
            } => {
                let result = self.resolve_question(&question_id, Some(answers));
                let result = result.map(|(question, _line)| {
                    // The run that asked is over: the answer becomes the next turn's prompt,
                    // which resumes the conversation with `--continue`.
                    if self.ended().is_none() {
                        self.queue.push_front(Queued {
                            prompt: answer_prompt(&question),
                            started: None,
                        });
                    }
                });
                let _ = reply.send(result);
            }
            Command::Reject { question_id, reply } => {
                let result = self.resolve_question(&question_id, None).map(|_| ());
                let _ = reply.send(result);
            }
            Command::Cancel { reply } => {
                let _ = reply.send(());
            }
            Command::Terminate { reply } => {
                self.end_session_terminated();
                let _ = reply.send(());
            }
            Command::Shutdown { reply } => {
                self.waiting.push(reply);
                self.exit = true;
            }
        }
    }

    /// Records `question.resolved` and returns the resolved question and the stdin line.
    fn resolve_question(
        &mut self,
        question_id: &str,
        answers: Option<Vec<Vec<String>>>,
    ) -> Result<(QuestionData, String), SessionError> {
        let resolved = match answers {
            Some(answers) => self.converter.answer_question(question_id, answers),
            None => self.converter.reject_question(question_id),
        };
        let (draft, line) = resolved.map_err(|e| match e {
            QuestionError::Unknown(_) | QuestionError::AlreadyResolved(_) => {
                SessionError::InvalidRequest(e.to_string())
            }
            QuestionError::InvalidAnswers(_) => SessionError::InvalidRequest(e.to_string()),
        })?;
        let EventData::QuestionResolved(question) = &draft.data else {
            unreachable!("resolving a question drafts question.resolved")
        };
        let question = question.clone();
        self.drafts.push(draft);
        self.flush();
        Ok((question, line))
    }

    /// Drafts `question.resolved` (rejected) for every question still pending from a run that
    /// is over, when the conversation moves on (a new turn) or the session ends: nobody can
    /// answer them any more (rule 7: one `question.resolved` per `question.requested`).
    fn reject_stale_questions(&mut self) {
        for id in self.converter.pending_question_ids() {
            if let Ok((draft, _skip_line)) = self.converter.reject_question(&id) {
                self.drafts.push(draft);
            }
        }
    }

    fn end_session_terminated(&mut self) {
        if self.ended().is_some() {
            return;
        }
        self.reject_stale_questions();
        self.drafts
            .push(EventDraft::synthetic(EventData::SessionEnded(
                SessionEndedData {
                    reason: SessionEndReason::Terminated,
                    terminated_by: TerminatedBy::Daemon,
                    message: None,
                    exit_code: None,
                    stderr: None,
                    cost: self.converter.session_cost(),
                },
            )));
        self.flush();
        let mut live = self.live();
        live.end = Some(EndState::Terminated);
        live.status = SessionStatus::Ended;
        drop(live);
        self.persist(None);
        for q in self.queue.drain(..) {
            if let Some(tx) = q.started {
                let _ = tx.send(Err(SessionError::Terminated));
            }
        }
    }

    fn end_session_error(&mut self, message: String) {
        let mut live = self.live();
        live.end = Some(EndState::Error(message.clone()));
        live.status = SessionStatus::Ended;
        drop(live);
        self.persist(None);
        for q in self.queue.drain(..) {
            if let Some(tx) = q.started {
                let _ = tx.send(Err(SessionError::AgentExited(message.clone())));
            }
        }
    }

    /// Runs one turn: the user item, one agent process to its exit, the turn's ending.
    async fn run_turn(&mut self, queued: Queued) {
        {
            let mut live = self.live();
            live.status = SessionStatus::Running;
            live.turns += 1;
        }
        self.reject_stale_questions();
        self.flush();
        // The last appended event, which a store may not show readers yet (it shows events
        // once committed): the turn's stream starts right after it either way.
        let first = self.live().event_count + 1;
        self.converter
            .begin_turn(Some(&queued.prompt), &mut self.drafts);
        self.flush();
        if let Some(tx) = queued.started {
            let _ = tx.send(Ok(first));
        }

        let (outcome, stop) = match self.spawn(&queued.prompt) {
            Ok(process) => {
                let pid = process.pid();
                self.persist(Some(RunningProcess {
                    pid,
                    pgid: pid,
                    start_ticks: procfs::start_ticks(pid).unwrap_or(0),
                }));
                // The agent's pid must be on disk before a crash could orphan it.
                if let Err(error) = self.ctx.store.flush() {
                    tracing::error!(session = %self.id, %error, "saving the running agent failed");
                }
                self.supervise(process).await
            }
            Err(message) => {
                self.converter
                    .fail_to_start("agent_start_failed", &message, &mut self.drafts);
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
        // A fatal failure (credentials, credits, cannot start) ends the session with the turn.
        let fatal = self.converter.fatal_error().map(|(_, m)| m.to_owned());
        if fatal.is_some() {
            self.reject_stale_questions();
        }
        let session_ended = self.converter.end_turn(outcome, &mut self.drafts);
        self.flush();
        if session_ended {
            self.end_session_error(fatal.unwrap_or_else(|| "the agent failed fatally".to_owned()));
        }
        match stop {
            Some(StopReason::Terminated) => self.end_session_terminated(),
            Some(StopReason::Shutdown) => self.exit = true,
            _ => {}
        }
        self.set_status(SessionStatus::Idle);
        self.persist(None);
        for w in self.waiting.drain(..) {
            let _ = w.send(());
        }
    }

    /// Starts the agent process for a turn, or says why it cannot start.
    fn spawn(&self, prompt: &str) -> Result<AgentProcess, String> {
        let s = &self.settings;
        let credential = credentials::resolve(
            s.api_key.as_deref(),
            self.ctx.env_api_key.as_deref(),
            self.ctx.home.as_deref(),
        );
        if s.agent == AgentKind::Codebuff && credential.is_none() {
            return Err("no Codebuff credential: set CODEBUFF_API_KEY for the daemon, pass `apiKey` when creating the session, or log in with the Codebuff CLI".into());
        }
        let timeout = s.turn_timeout.or(self.ctx.limits.turn_timeout);
        let (program, mut args) = self.ctx.launcher.program(s.agent);
        args.extend(agent_args(&TurnCommand {
            agent_mode: Some(&s.agent_mode),
            model: s.model.as_deref(),
            continue_session: self.converter.native_session_id(),
            timeout,
            cwd: &s.directory,
            prompt,
        }));
        let mut env = agent_env(
            self.ctx.parent_env.iter().cloned(),
            &s.env,
            credential.as_ref(),
        );
        env.retain(|(k, _)| k != "CODEBUFF_STATE_DIR");
        env.push((
            "CODEBUFF_STATE_DIR".into(),
            self.ctx.agent_state_dir.clone().into(),
        ));
        let spec = SpawnSpec {
            program,
            args,
            cwd: s.directory.clone(),
            env,
            max_line_bytes: self.ctx.limits.max_line_bytes,
        };
        tracing::info!(session = %self.id, agent = s.agent.id(), "starting a turn");
        AgentProcess::spawn(spec).map_err(|e| format!("the agent command cannot start: {e}"))
    }

    /// Reads the process to its exit while serving commands and watching the clocks.
    async fn supervise(&mut self, mut process: AgentProcess) -> (TurnOutcome, Option<StopReason>) {
        let limits = self.ctx.limits.clone();
        let timeout = self.settings.turn_timeout.or(limits.turn_timeout);
        // The agent enforces `--timeout` itself; the daemon's deadline is a backstop after it.
        let deadline = timeout.map(|t| Instant::now() + t + Duration::from_secs(5));
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        // Both clocks are armed once: output moves `last_output` on, and the idle timer,
        // when it fires early, re-arms itself for the real deadline (no timer is registered
        // per line, which a steady trickle of output would pay for every line).
        let mut last_output = Instant::now();
        let turn_timer = sleep_until(deadline.unwrap_or(far));
        let idle_timer = sleep_until(limits.inactivity_timeout.map_or(far, |t| last_output + t));
        tokio::pin!(turn_timer, idle_timer);
        let mut stderr = StderrCollector::default();
        let mut stop: Option<StopReason> = None;
        let mut exit: Option<ExitInfo> = None;

        while exit.is_none() {
            tokio::select! {
                event = process.next_event() => {
                    let mut event = event;
                    let mut handled = 0;
                    while let Some(ev) = event.take() {
                        if let ProcessEvent::Exited(info) = ev {
                            exit = Some(info);
                            break;
                        }
                        self.handle_output(ev, &mut stderr);
                        handled += 1;
                        if handled >= BATCH {
                            break;
                        }
                        event = process.next_event().now_or_never().flatten();
                    }
                    self.wait_for_room().await;
                    self.flush();
                    last_output = Instant::now();
                    // After the run's `finish` (its `turn.ended`) the process only winds down:
                    // the session is idle for whoever saw that event.
                    let status = if self.converter.turn_ended() {
                        SessionStatus::Idle
                    } else if self.converter.has_pending_questions() {
                        SessionStatus::AwaitingInput
                    } else {
                        SessionStatus::Running
                    };
                    self.set_status(status);
                }
                cmd = self.rx.recv() => {
                    match cmd {
                        Some(cmd) => self.handle_running(cmd, &mut process, &mut stop).await,
                        None => {
                            stop = Some(StopReason::Shutdown);
                            process.stop(Signal::SIGTERM, limits.stop_grace);
                        }
                    }
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
        let info = exit.unwrap_or(ExitInfo {
            code: None,
            signal: None,
        });
        let (status, message) = match &stop {
            Some(StopReason::Cancelled) => (TurnStatus::Cancelled, "cancelled".to_owned()),
            Some(StopReason::Terminated) => (
                TurnStatus::Cancelled,
                "the session was terminated".to_owned(),
            ),
            Some(StopReason::Shutdown) => (
                TurnStatus::Interrupted,
                "the daemon shut down during the turn".to_owned(),
            ),
            Some(StopReason::TimedOut(m)) => (TurnStatus::TimedOut, m.clone()),
            None => match (info.code, info.signal) {
                (Some(0), _) => (TurnStatus::Completed, "the agent exited".to_owned()),
                (_, Some(sig)) => (
                    TurnStatus::Failed,
                    format!("the agent was killed by signal {sig}"),
                ),
                (Some(code), _) => (
                    self.converter.failure_status(),
                    format!("the agent exited with status {code}"),
                ),
                (None, None) => (TurnStatus::Failed, "the agent vanished".to_owned()),
            },
        };
        let outcome = TurnOutcome {
            status,
            exit_code: info.code,
            signal: info.signal,
            message: Some(message),
            stderr: stderr.output(),
        };
        (outcome, stop)
    }

    /// Converts one output event of the running agent.
    fn handle_output(&mut self, event: ProcessEvent, stderr: &mut StderrCollector) {
        match event {
            ProcessEvent::Line {
                stream: OutputStream::Stdout,
                line,
            } => {
                if !line.iter().all(u8::is_ascii_whitespace) {
                    self.converter.convert_stdout_line(&line, &mut self.drafts);
                }
            }
            ProcessEvent::Line {
                stream: OutputStream::Stderr,
                line,
            } => {
                if !self.converter.convert_stderr_line(&line, &mut self.drafts) {
                    stderr.push(String::from_utf8_lossy(&line).trim_end_matches('\r'));
                }
            }
            ProcessEvent::Oversized {
                stream,
                length,
                prefix,
            } => {
                let stream = match stream {
                    OutputStream::Stdout => Stream::Stdout,
                    OutputStream::Stderr => Stream::Stderr,
                };
                let limit = self.ctx.limits.max_line_bytes;
                let draft = self
                    .converter
                    .oversized_line(stream, length, limit, &prefix);
                self.drafts.push(draft);
            }
            ProcessEvent::Exited(_) => {}
        }
    }

    /// Handles a command while a turn runs.
    async fn handle_running(
        &mut self,
        cmd: Command,
        process: &mut AgentProcess,
        stop: &mut Option<StopReason>,
    ) {
        let limits = &self.ctx.limits;
        match cmd {
            Command::Message { prompt, started } => {
                self.queue.push_back(Queued { prompt, started });
            }
            Command::Answer {
                question_id,
                answers,
                reply,
            } => {
                let result = match self.resolve_question(&question_id, Some(answers)) {
                    Ok((question, line)) => {
                        if let Err(error) = process.write_line(&line).await {
                            tracing::warn!(session = %self.id, %error, "the agent no longer reads answers; the answer goes into the next turn");
                            self.queue.push_front(Queued {
                                prompt: answer_prompt(&question),
                                started: None,
                            });
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::Reject { question_id, reply } => {
                let result = match self.resolve_question(&question_id, None) {
                    Ok((_, line)) => {
                        let _ = process.write_line(&line).await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::Cancel { reply } => {
                if stop.is_none() {
                    *stop = Some(StopReason::Cancelled);
                    process.stop(Signal::SIGINT, limits.cancel_grace);
                }
                let _ = reply.send(());
            }
            Command::Terminate { reply } => {
                if !matches!(stop, Some(StopReason::Terminated | StopReason::Shutdown)) {
                    *stop = Some(StopReason::Terminated);
                    process.stop(Signal::SIGTERM, limits.stop_grace);
                }
                self.waiting.push(reply);
            }
            Command::Shutdown { reply } => {
                if stop.as_ref() != Some(&StopReason::Terminated) {
                    *stop = Some(StopReason::Shutdown);
                }
                process.stop(Signal::SIGTERM, limits.stop_grace);
                self.waiting.push(reply);
            }
        }
    }
}

/// The stored name of a status.
pub(crate) fn status_name(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::AwaitingInput => "awaiting_input",
        SessionStatus::Ended => "ended",
    }
}

/// The prompt that carries an answer to a run that is no longer waiting for it.
fn answer_prompt(question: &QuestionData) -> String {
    let mut text = String::from("Answers to your questions:");
    let answers = question.answers.clone().unwrap_or_default();
    for (i, q) in question.questions.iter().enumerate() {
        let answer = answers
            .get(i)
            .filter(|a| !a.is_empty())
            .map(|a| a.join(", "))
            .unwrap_or_else(|| "(no answer)".to_owned());
        text.push_str(&format!("\n- {}: {}", q.question, answer));
    }
    if question.questions.is_empty() {
        text.push_str(&format!(" {}", answers.concat().join(", ")));
    }
    text
}
