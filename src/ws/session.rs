//! The codebuffd session behind a protocol request: finding or creating it (with the agent a
//! prompt names, or the door's default), the agent mode a `costMode` asks for, the typed
//! cause of a refused request.

use crate::session::{CreateRequest, SessionError, SessionInfo, SessionManager};

/// What a session created by this door is made with.
#[derive(Debug, Clone, Default)]
pub struct NewSession<'a> {
    /// `codebuff` or `mock`; anything else (Codebuff agent template ids) means the default.
    pub agent_id: Option<&'a str>,
    /// The mapped `costMode`.
    pub agent_mode: Option<&'static str>,
    pub model: Option<&'a str>,
    /// The protocol's `authToken`: the session's Codebuff credential (codebuff sessions).
    pub auth_token: Option<&'a str>,
}

/// The agent mode a Codebuff `costMode` asks for: `free`→free, `normal`→build, `max`→max,
/// `ask`/`plan`→plan, anything else→build.
pub fn agent_mode_for(cost_mode: &str) -> &'static str {
    match cost_mode {
        "free" => "free",
        "max" => "max",
        "ask" | "plan" => "plan",
        _ => "build",
    }
}

/// The agent of a new session: the request's `agentId` when it names one we run, else the
/// default.
pub fn agent_for<'a>(agent_id: Option<&'a str>, default_agent: &'a str) -> &'a str {
    match agent_id {
        Some(id @ ("codebuff" | "mock")) => id,
        _ => default_agent,
    }
}

/// Returns the session `id`, creating it first when it does not exist.
pub async fn ensure(
    manager: &SessionManager,
    id: &str,
    new: NewSession<'_>,
    default_agent: &str,
) -> Result<SessionInfo, SessionError> {
    match manager.info(id) {
        Ok(info) => return Ok(info),
        Err(SessionError::NotFound(_)) => {}
        Err(other) => return Err(other),
    }
    let agent = agent_for(new.agent_id, default_agent);
    let request = CreateRequest {
        agent: agent.to_owned(),
        agent_mode: new.agent_mode.map(str::to_owned),
        model: new.model.map(str::to_owned),
        api_key: new
            .auth_token
            .filter(|t| agent == "codebuff" && !t.is_empty())
            .map(str::to_owned),
        title: Some("Codebuff WebSocket session".to_owned()),
        ..CreateRequest::default()
    };
    match manager.create(id, request).await {
        Ok(info) => Ok(info),
        // Another request created it meanwhile.
        Err(SessionError::AlreadyExists(_)) => manager.info(id),
        Err(other) => Err(other),
    }
}

/// The typed cause of a refused request, as `prompt-error.error` and `action-error.error`
/// carry it: the session layer's own code ([`SessionError::code`]).
pub fn cause(error: &SessionError) -> &'static str {
    error.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_modes_map_to_agent_modes() {
        for (cost, mode) in [
            ("free", "free"),
            ("normal", "build"),
            ("max", "max"),
            ("ask", "plan"),
            ("plan", "plan"),
            ("experimental", "build"),
            ("lite", "build"),
            ("", "build"),
        ] {
            assert_eq!(agent_mode_for(cost), mode, "{cost}");
        }
    }

    #[test]
    fn only_agents_we_run_override_the_default() {
        assert_eq!(agent_for(Some("mock"), "codebuff"), "mock");
        assert_eq!(agent_for(Some("codebuff"), "mock"), "codebuff");
        assert_eq!(agent_for(Some("base2"), "mock"), "mock");
        assert_eq!(agent_for(None, "codebuff"), "codebuff");
    }

    #[test]
    fn refusals_have_stable_causes() {
        assert_eq!(
            cause(&SessionError::BudgetExhausted {
                spent: 2.0,
                budget: 1.0
            }),
            "budget_exhausted"
        );
        assert_eq!(cause(&SessionError::Terminated), "session_terminated");
        assert_eq!(
            cause(&SessionError::NotFound("x".into())),
            "session_not_found"
        );
        assert_eq!(
            cause(&SessionError::CredentialsMissing {
                places: vec![],
                get_one: "https://www.codebuff.com/api-keys"
            }),
            "credentials_missing"
        );
    }
}
