//! The engine in this process: `Engine::start` with `codebuffd server`'s own settings, on the
//! same data directory and store, so what a turn records here is the daemon's (resumable from
//! it and from `codebuffd resume`). Any number of engines share a data directory: a server,
//! editors' `codebuffd acp`s and terminals each run their own, on one log.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;

use super::error::ClientError;
use super::transport::{Events, Transport};
use crate::config::DaemonConfig;
use crate::engine::Engine;
use crate::session::{
    AgentKind, CreateRequest, LoggedEvent, PermissionReply, SessionInfo, SessionManager,
};

/// The running in-process engine.
pub struct Local {
    engine: Engine,
    data_dir: PathBuf,
}

impl Local {
    /// Starts the engine (must be called within a tokio runtime). No warm agent processes: a
    /// one-shot command starts its turn right after creating its session.
    pub fn start(config: &DaemonConfig) -> Result<Local, ClientError> {
        let mut engine_config = config.engine();
        engine_config.warm_start = false;
        match Engine::start(&engine_config) {
            Ok(engine) => Ok(Local {
                engine,
                data_dir: config.data_dir.clone(),
            }),
            Err(error) => Err(ClientError::failed(format!("{error:#}"))),
        }
    }

    /// The data directory's sessions without starting an engine (see
    /// [`Engine::stored_sessions`]).
    pub fn stored_sessions(config: &DaemonConfig) -> Result<Vec<SessionInfo>, ClientError> {
        Engine::stored_sessions(&config.engine())
            .map_err(|error| ClientError::failed(format!("{error:#}")))
    }

    fn manager(&self) -> &Arc<SessionManager> {
        &self.engine.manager
    }
}

#[async_trait]
impl Transport for Local {
    fn describe(&self) -> String {
        format!("in-process on {}", self.data_dir.display())
    }

    fn is_local(&self) -> bool {
        true
    }

    async fn create(&self, id: &str, req: &CreateRequest) -> Result<(), ClientError> {
        self.manager().create(id, req.clone()).await?;
        Ok(())
    }

    async fn info(&self, id: &str) -> Result<SessionInfo, ClientError> {
        Ok(self.manager().info(id)?)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, ClientError> {
        Ok(self.manager().list())
    }

    async fn send(&self, id: &str, text: &str) -> Result<u64, ClientError> {
        let started = self.manager().send_message_and_wait(id, text).await?;
        Ok(started.saturating_sub(1))
    }

    async fn queue(&self, id: &str, text: &str) -> Result<(), ClientError> {
        Ok(self.manager().send_message(id, text).await?)
    }

    /// The engine's cursor on the session's log ([`crate::session::Follow`]), as a stream.
    async fn events(&self, id: &str, after: u64) -> Result<Events, ClientError> {
        // The terminal shows no raw agent lines.
        let follow = self.manager().follow(id, after)?.with_raw(false);
        let state = (follow, VecDeque::<LoggedEvent>::new());
        Ok(
            futures_util::stream::unfold(state, |(mut follow, mut page)| async move {
                loop {
                    if let Some(logged) = page.pop_front() {
                        let event = logged.event().map_err(ClientError::from);
                        return Some((event, (follow, page)));
                    }
                    match follow.next().await {
                        Ok(Some(next)) => page.extend(next),
                        Ok(None) => return None,
                        Err(e) => return Some((Err(e.into()), (follow, page))),
                    }
                }
            })
            .boxed(),
        )
    }

    async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), ClientError> {
        Ok(self.manager().answer(id, question_id, answers).await?)
    }

    async fn reject_question(&self, id: &str, question_id: &str) -> Result<(), ClientError> {
        Ok(self.manager().reject(id, question_id).await?)
    }

    async fn permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: PermissionReply,
    ) -> Result<(), ClientError> {
        Ok(self
            .manager()
            .reply_permission(id, permission_id, reply)
            .await?)
    }

    async fn cancel(&self, id: &str) -> Result<(), ClientError> {
        Ok(self.manager().cancel(id).await?)
    }

    async fn terminate(&self, id: &str) -> Result<(), ClientError> {
        Ok(self.manager().terminate(id).await?)
    }

    async fn delete(&self, id: &str) -> Result<(), ClientError> {
        Ok(self.manager().delete(id).await?)
    }

    async fn has_credential(&self, agent: &str) -> Result<bool, ClientError> {
        let kind = AgentKind::parse(agent).ok_or_else(|| {
            ClientError::usage(format!("the agent `{agent}` is not `codebuff` or `mock`"))
        })?;
        Ok(self.manager().has_credential(kind))
    }

    async fn set_mode(&self, id: &str, mode: &str) -> Result<(), ClientError> {
        Ok(self.manager().set_agent_mode(id, mode).await?)
    }

    /// Ends running turns (their agents killed, their endings recorded) and makes the store
    /// durable, as `codebuffd server` does at SIGTERM.
    async fn close(&self) {
        self.engine.shutdown().await;
    }
}
