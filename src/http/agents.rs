//! `/v1/agents…`: which agents exist, whether they can run, their modes and models.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::{ApiPath, OptionalJson};
use super::problem::Problem;
use super::AppState;
use crate::session::AgentKind;

/// What an agent can do; the same 19 flags as sandbox-agent, truthful for each agent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub plan_mode: bool,
    pub permissions: bool,
    pub questions: bool,
    pub tool_calls: bool,
    pub tool_results: bool,
    pub text_messages: bool,
    pub images: bool,
    pub file_attachments: bool,
    pub session_lifecycle: bool,
    pub error_events: bool,
    pub reasoning: bool,
    pub status: bool,
    pub command_execution: bool,
    pub file_changes: bool,
    pub mcp_tools: bool,
    pub streaming_deltas: bool,
    pub item_started: bool,
    pub variants: bool,
    pub shared_process: bool,
}

/// Codebuff through the adapter, and the mock agent that imitates it.
const CAPABILITIES: Capabilities = Capabilities {
    plan_mode: true,
    permissions: true,
    questions: true,
    tool_calls: true,
    tool_results: true,
    text_messages: true,
    images: false,
    file_attachments: false,
    session_lifecycle: true,
    error_events: true,
    reasoning: true,
    status: true,
    command_execution: true,
    file_changes: true,
    mcp_tools: false,
    streaming_deltas: true,
    item_started: true,
    variants: false,
    shared_process: false,
};

/// One agent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    pub id: String,
    pub installed: bool,
    pub credentials_available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub path: Option<String>,
    pub capabilities: Capabilities,
    /// **(ours)** The warm process waiting for this agent's next turn, if one waits.
    #[schema(required = true)]
    pub warm_spare: Option<WarmSpare>,
    /// While ACP servers (`/v1/acp`) of this agent are live: `running`, since the oldest.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub server_status: Option<ServerStatus>,
}

/// The ACP servers of an agent, in the shape both sandbox-agent SDK generations read: 0.4's
/// `{status, uptimeMs}` and 0.1's, which also requires `restartCount`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// `running` (listed only while a server is live).
    pub status: &'static str,
    /// Since the oldest live server was created.
    pub uptime_ms: u64,
    /// Always 0: a server is a connection in the daemon, not a process that restarts.
    pub restart_count: u64,
}

/// A warm agent process: started, libraries loaded, waiting for its turn on stdin.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmSpare {
    pub pid: u32,
    /// Its resident memory (`VmRSS`), when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub rss_bytes: Option<u64>,
}

/// `GET /v1/agents`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentInfo>,
}

#[utoipa::path(get, path = "/v1/agents", tag = "agents",
    responses((status = 200, body = AgentList)))]
pub async fn list_agents(State(state): State<AppState>) -> Json<AgentList> {
    let agents = state
        .manager
        .agents()
        .into_iter()
        .map(|a| AgentInfo {
            id: a.kind.id().to_owned(),
            installed: a.installed,
            credentials_available: a.credentials_available,
            version: a.version,
            path: a.path,
            capabilities: CAPABILITIES,
            warm_spare: a
                .warm_spare
                .map(|(pid, rss_bytes)| WarmSpare { pid, rss_bytes }),
            server_status: server_status(&state.acp_servers.of_agent(a.kind)),
        })
        .collect();
    Json(AgentList { agents })
}

/// `running` since the oldest of `created` (Unix ms), when there is one.
fn server_status(created: &[i64]) -> Option<ServerStatus> {
    let oldest = created.iter().min()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Some(ServerStatus {
        status: "running",
        uptime_ms: u64::try_from(now.saturating_sub(*oldest)).unwrap_or(0),
        restart_count: 0,
    })
}

fn agent(id: &str) -> Result<AgentKind, Problem> {
    AgentKind::parse(id).ok_or_else(|| {
        let mut p = Problem::new(
            "unsupported_agent",
            StatusCode::BAD_REQUEST,
            format!("agent `{id}` is not supported; use `codebuff` or `mock`"),
        );
        p.agent = Some(id.to_owned());
        p
    })
}

/// `POST /v1/agents/{agent}/install`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallRequest {
    #[serde(default)]
    pub reinstall: bool,
}

#[utoipa::path(post, path = "/v1/agents/{agent}/install", tag = "agents",
    params(("agent" = String, Path)), request_body = Option<InstallRequest>,
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem)))]
pub async fn install_agent(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    OptionalJson(body): OptionalJson<InstallRequest>,
) -> Result<StatusCode, Problem> {
    let kind = agent(&id)?;
    state
        .manager
        .context()
        .agents
        .launcher
        .install(kind, body.reinstall)
        .await
        .map_err(|e| {
            let mut p = Problem::new("agent_not_installed", StatusCode::NOT_FOUND, e.0);
            p.agent = Some(id.clone());
            p
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// One agent mode.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Mode {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
}

/// `GET /v1/agents/{agent}/modes`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModeList {
    pub modes: Vec<Mode>,
}

#[utoipa::path(get, path = "/v1/agents/{agent}/modes", tag = "agents",
    params(("agent" = String, Path)),
    responses((status = 200, body = ModeList), (status = 400, body = Problem)))]
pub async fn list_modes(ApiPath(id): ApiPath<String>) -> Result<Json<ModeList>, Problem> {
    agent(&id)?;
    Ok(Json(ModeList {
        modes: vec![
            Mode {
                id: "build",
                name: "Build",
                description: "The default agent (base2): plans, edits files and runs commands",
            },
            Mode {
                id: "free",
                name: "Free",
                description: "The lighter, cheaper agent (base2-lite; `--free`)",
            },
            Mode {
                id: "max",
                name: "Max",
                description: "The most capable agent (base2-max; `--max`)",
            },
            Mode {
                id: "plan",
                name: "Plan",
                description: "Plans before acting (base2-plan; `--plan`)",
            },
        ],
    }))
}

/// One model.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Model {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub name: Option<String>,
}

/// `GET /v1/agents/{agent}/models`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelList {
    pub models: Vec<Model>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub default_model: Option<String>,
}

#[utoipa::path(get, path = "/v1/agents/{agent}/models", tag = "agents",
    params(("agent" = String, Path)),
    responses((status = 200, body = ModelList), (status = 400, body = Problem)))]
pub async fn list_models(ApiPath(id): ApiPath<String>) -> Result<Json<ModelList>, Problem> {
    // Codebuff picks the model per agent mode; `model` (any OpenRouter id) overrides the
    // root agent's model. There is no fixed catalogue to list, so only the mock's own.
    Ok(Json(match agent(&id)? {
        AgentKind::Codebuff => ModelList {
            models: Vec::new(),
            default_model: None,
        },
        AgentKind::Mock => ModelList {
            models: vec![Model {
                id: "mock".into(),
                name: Some("Mock model".into()),
            }],
            default_model: Some("mock".into()),
        },
    }))
}
