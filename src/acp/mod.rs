//! The ACP door: codebuffd as an Agent Client Protocol (v1) agent, on the official
//! `agent-client-protocol` crate (`docs/acp.md`).
//!
//! ACP is one more projection of the session log: `session/new` creates an ordinary session,
//! `session/prompt` sends it a message and follows the turn in the log ([`prompt`]), turning
//! universal events into `session/update`s ([`project`], pure); `session/load` replays the log
//! ([`replay`]). The door owns no turns, processes or storage: the engine's
//! [`SessionManager`] does.
//!
//! Tasks: the connection's dispatch loop (the crate's, on the caller's task) runs the handlers,
//! which answer at once or hand the work to a task of [`Door::spawn`] (prompts, loads, closes:
//! anything that waits), so `session/cancel` and the client's answers are read while a turn
//! runs. A prompt's task may start one task per question or permission request it asks the
//! client ([`requests`]). The stdio transport has a reader and a writer thread
//! ([`transport`]). When stdin ends, the connection ends, its tasks are stopped, and the caller
//! shuts the engine down.

pub mod coalesce;
pub mod content;
pub mod diff;
pub mod door;
pub mod errors;
pub mod initialize;
pub mod permissions;
pub mod project;
pub mod prompt;
pub mod questions;
pub mod remote;
pub mod replay;
pub mod requests;
pub mod sessions;
pub mod tools;
pub mod transport;

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    AuthenticateRequest, CancelNotification, CloseSessionRequest, InitializeRequest,
    ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PromptRequest,
    ResumeSessionRequest, SetSessionModeRequest,
};
use agent_client_protocol::{
    on_receive_notification, on_receive_request, Agent, Client, ConnectTo,
};

pub use door::{AcpOptions, Door};
pub use transport::{Outbox, StdioTransport};

use crate::session::SessionManager;

/// Serves one ACP connection over `transport` until the client goes away (its input ends).
/// `outbox` counts the updates not yet written (the transport's).
pub async fn serve(
    manager: Arc<SessionManager>,
    options: AcpOptions,
    outbox: Arc<Outbox>,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), agent_client_protocol::Error> {
    let door = Arc::new(Door::new(manager, options, outbox));
    let result = agent(door.clone()).connect_to(transport).await;
    door.stop_tasks();
    result
}

/// The agent side of the connection: one handler per method.
fn agent(door: Arc<Door>) -> impl ConnectTo<Client> {
    let (d1, d2, d3, d4, d5, d6, d7, d8, d9, d10) = (
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door.clone(),
        door,
    );
    Agent
        .v1()
        .name("codebuffd")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| {
                responder.respond(initialize::initialize(&d1, &req))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: AuthenticateRequest, responder, _cx| {
                responder.respond_with_result(initialize::authenticate(&d2, &req))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| {
                let door = d3.clone();
                d3.spawn(async move {
                    let result = sessions::new_session(&door, req).await;
                    let _ = responder.respond_with_result(result);
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx| {
                let door = d4.clone();
                d4.spawn(async move {
                    let result = sessions::load_session(&door, &cx, req).await;
                    let _ = responder.respond_with_result(result);
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest, responder, _cx| {
                responder.respond_with_result(sessions::resume_session(&d5, &req))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest, responder, _cx| {
                responder.respond_with_result(sessions::list_sessions(&d6, &req))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest, responder, _cx| {
                let door = d7.clone();
                d7.spawn(async move {
                    let result = sessions::close_session(&door, &req).await;
                    let _ = responder.respond_with_result(result);
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionModeRequest, responder, cx| {
                let door = d8.clone();
                d8.spawn(async move {
                    let result = sessions::set_mode(&door, &cx, &req).await;
                    let _ = responder.respond_with_result(result);
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx| {
                // Its place in the session's queue is taken now, in the order prompts came.
                let queued = match prompt::queue(&d9, &req).await {
                    Ok(queued) => queued,
                    Err(e) => return responder.respond_with_error(e),
                };
                let door = d9.clone();
                d9.spawn(async move {
                    let result = prompt::run(door, cx, req.session_id, queued).await;
                    let _ = responder.respond_with_result(result);
                });
                Ok(())
            },
            on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                sessions::cancel(&d10, &n.session_id);
                Ok(())
            },
            on_receive_notification!(),
        )
}
