//! Permission requests (`permission.requested`, issue 12's gating) as ACP
//! `session/request_permission`, and the client's choice as the session's reply. Pure.
//!
//! The title shows a command whole (the agent's own title may shorten it). The options, by kind:
//! `allow_once` ("Allow"), `allow_always` ("Always allow": the session allows this tool, or this
//! command's prefix, from now on; for a command the name says which prefix — "Always allow `git
//! status …`" — or "Always allow this exact command line" when the line is more than one simple
//! command), `reject_once` ("Reject"),
//! `reject_always` ("Always reject": rejects this call; codebuffd keeps no reject rules, so the
//! next one asks again). A `cancelled` outcome (the turn is being cancelled) rejects.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;

use super::tools;
use crate::universal::PermissionData;

/// The session's reply to a permission request (`once`, `always`, `reject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Once,
    Always,
    Reject,
}

impl Reply {
    /// The reply's name in the HTTP API (`POST …/permissions/{id}/reply`).
    pub fn name(self) -> &'static str {
        match self {
            Reply::Once => "once",
            Reply::Always => "always",
            Reply::Reject => "reject",
        }
    }
}

const OPTIONS: [(&str, &str, PermissionOptionKind); 4] = [
    ("allow_once", "Allow", PermissionOptionKind::AllowOnce),
    (
        "allow_always",
        "Always allow",
        PermissionOptionKind::AllowAlways,
    ),
    ("reject_once", "Reject", PermissionOptionKind::RejectOnce),
    (
        "reject_always",
        "Always reject",
        PermissionOptionKind::RejectAlways,
    ),
];

fn kind(name: Option<&str>) -> ToolKind {
    match name {
        Some("edit") => ToolKind::Edit,
        Some("delete") => ToolKind::Delete,
        Some("move") => ToolKind::Move,
        Some("execute") => ToolKind::Execute,
        Some("read") => ToolKind::Read,
        _ => ToolKind::Other,
    }
}

/// The `session/request_permission` for a request; `tool_call_id` is the ACP id of the call it
/// gates (when the log shows that call), else the request gets an id of its own.
pub fn request(
    session_id: &str,
    cwd: &Path,
    tool_call_id: Option<&str>,
    p: &PermissionData,
) -> RequestPermissionRequest {
    let empty = Value::Null;
    let m = p.metadata.as_ref().unwrap_or(&empty);
    let s = |key: &str| m.get(key).and_then(Value::as_str);
    let id = tool_call_id.map_or_else(|| format!("permission-{}", p.permission_id), str::to_owned);
    let title = s("title")
        .map(str::to_owned)
        .or_else(|| s("toolName").map(|t| tools::title(t, m.get("input").unwrap_or(&empty))))
        .unwrap_or_else(|| p.action.clone());
    let title = match s("command") {
        Some(command) if !title.contains(command) => format!("Run `{command}`"),
        _ => title,
    };
    let always = match (s("command"), s("alwaysPrefix")) {
        (Some(_), Some(prefix)) => format!("Always allow `{prefix} …`"),
        (Some(_), None) => "Always allow this exact command line".to_owned(),
        (None, _) => "Always allow".to_owned(),
    };
    let mut fields = ToolCallUpdateFields::new()
        .title(title)
        .kind(kind(s("kind")));
    if let Some(input) = m.get("input").filter(|v| !v.is_null()) {
        fields = fields.raw_input(input.clone());
    }
    let paths: Vec<_> = m
        .get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|p| {
                    agent_client_protocol::v1::schema::ToolCallLocation::new(tools::absolute(
                        cwd, p,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if !paths.is_empty() {
        fields = fields.locations(paths);
    }
    RequestPermissionRequest::new(
        SessionId::new(session_id),
        ToolCallUpdate::new(id, fields),
        OPTIONS
            .iter()
            .map(|(id, name, kind)| {
                let name = if *id == "allow_always" {
                    always.clone()
                } else {
                    (*name).to_owned()
                };
                PermissionOption::new(*id, name, *kind)
            })
            .collect(),
    )
}

/// The session's reply for the client's outcome.
pub fn reply(outcome: &RequestPermissionOutcome) -> Reply {
    match outcome {
        RequestPermissionOutcome::Selected(s) => match s.option_id.to_string().as_str() {
            "allow_once" => Reply::Once,
            "allow_always" => Reply::Always,
            _ => Reply::Reject,
        },
        _ => Reply::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::PermissionStatus;
    use agent_client_protocol::v1::schema::SelectedPermissionOutcome;
    use serde_json::json;

    fn data() -> PermissionData {
        PermissionData {
            permission_id: "perm-1".into(),
            action: "run_terminal_command".into(),
            status: PermissionStatus::Requested,
            metadata: Some(json!({
                "toolCallId": "c1", "toolName": "run_terminal_command", "kind": "execute",
                "title": "Run `rm -rf build`", "command": "rm -rf build", "paths": ["build"],
                "input": {"command": "rm -rf build"}, "alwaysPrefix": "rm"
            })),
        }
    }

    #[test]
    fn a_request_names_the_call_and_offers_the_four_options() {
        let req = request("s", Path::new("/w"), Some("itm_7"), &data());
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(
            json["toolCall"],
            json!({"toolCallId":"itm_7","kind":"execute","title":"Run `rm -rf build`",
                "locations":[{"path":"/w/build"}],"rawInput":{"command":"rm -rf build"}})
        );
        let kinds: Vec<&str> = json["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
        assert_eq!(json["options"][1]["name"], "Always allow `rm …`");
        let own = request("s", Path::new("/w"), None, &data());
        assert_eq!(own.tool_call.tool_call_id.to_string(), "permission-perm-1");
    }

    #[test]
    fn a_command_is_shown_whole_and_always_says_what_it_allows() {
        let long = format!("ls -la; {}", "x".repeat(200));
        let mut p = data();
        p.metadata = Some(json!({
            "toolName": "run_terminal_command", "kind": "execute",
            "title": "Run `ls -la; xxxxxxxx…`", "command": long, "alwaysPrefix": null,
            "input": {"command": long}
        }));
        let json = serde_json::to_value(request("s", Path::new("/w"), None, &p)).unwrap();
        assert_eq!(json["toolCall"]["title"], format!("Run `{long}`"));
        assert_eq!(
            json["options"][1]["name"],
            "Always allow this exact command line"
        );
    }

    #[test]
    fn outcomes_become_replies() {
        let pick = |id: &str| {
            reply(&RequestPermissionOutcome::Selected(
                SelectedPermissionOutcome::new(id.to_owned()),
            ))
        };
        assert_eq!(pick("allow_once"), Reply::Once);
        assert_eq!(pick("allow_always"), Reply::Always);
        assert_eq!(pick("reject_once"), Reply::Reject);
        assert_eq!(pick("reject_always"), Reply::Reject);
        assert_eq!(pick("something"), Reply::Reject);
        assert_eq!(reply(&RequestPermissionOutcome::Cancelled), Reply::Reject);
    }
}
