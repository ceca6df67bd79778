//! `initialize` and `authenticate`: what this agent can do, and how it is signed in.
//!
//! Capabilities are only what works: `loadSession`; prompts with images and embedded context
//! (no audio); `session/list`, `session/resume`, `session/close`. No MCP transports: MCP servers
//! a client passes are accepted and ignored (the Codebuff agent command takes none). The
//! `codebuff` agent names one auth method, the Codebuff API key, found the way the daemon finds
//! it (`CODEBUFF_API_KEY`, then the Codebuff CLI's credential files); `authenticate` succeeds
//! when one is found.

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
    Implementation, InitializeRequest, InitializeResponse, Meta, PromptCapabilities,
    SessionCapabilities, SessionCloseCapabilities, SessionListCapabilities,
    SessionResumeCapabilities,
};
use agent_client_protocol::Error;
use serde_json::json;

use super::door::{ClientAbilities, Door};
use super::project::META_KEY;
use crate::session::AgentKind;

/// The id of the Codebuff API key auth method.
pub const API_KEY_METHOD: &str = "codebuff-api-key";

/// Where the key is looked for, as the sign-in help says it.
const KEY_HELP: &str = "Set CODEBUFF_API_KEY in the agent's environment, or sign in with the \
    Codebuff CLI (~/.config/manicode/credentials.json); ~/.codebuff/config.json and \
    ~/.codebuff/auth.json are read too.";

/// The answer to `initialize` (the protocol version is already negotiated to 1).
pub fn initialize(door: &Door, req: &InitializeRequest) -> InitializeResponse {
    door.set_client(ClientAbilities::of(&req.client_capabilities));
    let mut meta = Meta::new();
    meta.insert(
        META_KEY.to_owned(),
        json!({"agent": door.options.agent.id(), "modes": crate::session::AGENT_MODES}),
    );
    InitializeResponse::new(req.protocol_version)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().image(true).embedded_context(true))
                .session_capabilities(
                    SessionCapabilities::new()
                        .list(SessionListCapabilities::new())
                        .resume(SessionResumeCapabilities::new())
                        .close(SessionCloseCapabilities::new()),
                )
                .meta(meta),
        )
        .auth_methods(auth_methods(door.options.agent))
        .agent_info(
            Implementation::new("codebuffd", env!("CARGO_PKG_VERSION"))
                .title("Codebuff".to_owned()),
        )
}

/// The sign-in methods of an agent: the API key for `codebuff`, none for `mock`.
pub fn auth_methods(agent: AgentKind) -> Vec<AuthMethod> {
    match agent {
        AgentKind::Codebuff => vec![AuthMethod::Agent(
            AuthMethodAgent::new(API_KEY_METHOD, "Codebuff API key")
                .description(KEY_HELP.to_owned()),
        )],
        AgentKind::Mock => Vec::new(),
    }
}

/// True when the agent can run: it needs no key, or a key is found.
pub fn signed_in(door: &Door) -> bool {
    door.manager
        .context()
        .agents
        .has_credential(door.options.agent, None)
}

/// The error of a request that needs a key when none is found (`-32000`): the same text as
/// the engine's refusal of a session (where it looked, where to get a key, the mock).
pub fn auth_required(door: &Door) -> Error {
    let missing = door.manager.credentials_missing();
    super::errors::auth_required_because(&missing)
        .data(json!({"message": missing.to_string(), "authMethods": [API_KEY_METHOD]}))
}

/// `authenticate`: succeeds when a key is found (the agent cannot ask for one itself).
pub fn authenticate(door: &Door, req: &AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
    let known = auth_methods(door.options.agent)
        .iter()
        .any(|m| m.id().to_string() == req.method_id.to_string());
    if !known {
        return Err(super::errors::invalid_params(format!(
            "unknown auth method `{}`",
            req.method_id
        )));
    }
    if signed_in(door) {
        Ok(AuthenticateResponse::new())
    } else {
        Err(auth_required(door))
    }
}
