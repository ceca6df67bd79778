//! Permission requests: the agent asks before a tool that changes files or runs code
//! (`docs/agent-command.md` §5); the session's policy answers some by itself, the user the
//! others. The book keeps the open requests so each `permission.requested` gets exactly one
//! `permission.resolved`, and an answer reaches only a request that waits.
//!
//! The policy: `bypass` never asks (the agent runs without gates); `plan` is read-only (every
//! request is rejected); `acceptEdits` lets edits run and asks for commands; `default` asks for
//! everything. An `always` answer is remembered for the session: for that tool, or for a
//! command, for that command's prefix (its program and subcommand, e.g. `npm test`, `git
//! status`, `ls`) — but only when the command is one simple command (`shell.rs`); a later
//! command matches the rule only when it is one too. For any other command line (`ls; touch x`,
//! `ls $(…)`, `sh -c …`) `always` remembers that exact line and nothing else.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::shell::command_prefix;
use crate::universal::{EventData, EventDraft, PermissionData, PermissionStatus};

/// The session's permission mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// Tools run without asking.
    Bypass,
    /// Every tool that changes files or runs code asks.
    Default,
    /// File edits run; commands ask.
    AcceptEdits,
    /// Read-only: every change is rejected without asking.
    Plan,
}

impl PermissionMode {
    /// Parses a mode name (`bypass`, `default`, `acceptEdits`, `plan`).
    pub fn parse(name: &str) -> Option<PermissionMode> {
        match name {
            "bypass" => Some(PermissionMode::Bypass),
            "default" => Some(PermissionMode::Default),
            "acceptEdits" => Some(PermissionMode::AcceptEdits),
            "plan" => Some(PermissionMode::Plan),
            _ => None,
        }
    }
}

pub use crate::universal::PermissionReply;

/// Who answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// A person or a client, through the API.
    User,
    /// The session's mode or an earlier `always`.
    Policy,
    /// Nobody answered in time.
    Timeout,
    /// The daemon, because the turn ended (cancel, terminate, the agent exited …).
    Daemon,
}

impl DecidedBy {
    fn name(self) -> &'static str {
        match self {
            DecidedBy::User => "user",
            DecidedBy::Policy => "policy",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Daemon => "daemon",
        }
    }
}

/// Why a permission request could not be answered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PermissionError {
    #[error("unknown permission id `{0}`")]
    Unknown(String),
    #[error("permission `{0}` is already resolved")]
    AlreadyResolved(String),
}

/// What an agent asks permission for.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    pub request_id: String,
    pub tool_call_id: Option<String>,
    pub tool_name: String,
    /// `edit`, `delete`, `move` or `execute`.
    pub kind: String,
    pub title: String,
    pub command: Option<String>,
    pub paths: Vec<String>,
    pub input: Value,
}

impl PermissionRequest {
    /// True for a command (anything else changes files).
    fn is_command(&self) -> bool {
        self.kind == "execute" || self.command.is_some()
    }

    /// The `always` rule this request falls under.
    fn rule(&self) -> Rule {
        match &self.command {
            Some(command) if self.is_command() => match command_prefix(command) {
                Some(prefix) => Rule::Command(prefix),
                None => Rule::Line(command.clone()),
            },
            _ => Rule::Tool(self.tool_name.clone()),
        }
    }

    fn metadata(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("toolCallId".into(), json!(self.tool_call_id));
        m.insert("toolName".into(), json!(self.tool_name));
        m.insert("kind".into(), json!(self.kind));
        m.insert("title".into(), json!(self.title));
        m.insert("command".into(), json!(self.command));
        m.insert("paths".into(), json!(self.paths));
        m.insert("input".into(), self.input.clone());
        m.insert("options".into(), json!(["once", "always", "reject"]));
        if let Some(command) = self.command.as_ref().filter(|_| self.is_command()) {
            // What `always` would allow: the prefix, or null for "this exact line only".
            let prefix = command_prefix(command).map(|p| p.join(" "));
            m.insert("alwaysPrefix".into(), json!(prefix));
        }
        m
    }
}

/// An `always` the user gave.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// Every call of this tool.
    Tool(String),
    /// Every simple command with this program and subcommand (`shell::command_prefix`).
    Command(Vec<String>),
    /// This exact command line (one that is not a simple command).
    Line(String),
}

/// The session's permission mode, its `always` rules and its open requests.
#[derive(Debug)]
pub(crate) struct PermissionBook {
    mode: PermissionMode,
    always: Vec<Rule>,
    open: HashMap<String, PermissionRequest>,
    resolved: std::collections::HashSet<String>,
}

impl Default for PermissionBook {
    fn default() -> Self {
        PermissionBook {
            mode: PermissionMode::Bypass,
            always: Vec::new(),
            open: HashMap::new(),
            resolved: Default::default(),
        }
    }
}

impl PermissionBook {
    pub(crate) fn set_mode(&mut self, mode: PermissionMode) {
        self.mode = mode;
    }

    /// What the policy answers by itself, and why; `None`: the user decides.
    fn policy(&self, request: &PermissionRequest) -> Option<(PermissionReply, &'static str)> {
        if self.always.contains(&request.rule()) {
            return Some((
                PermissionReply::Once,
                "allowed always earlier in this session",
            ));
        }
        match self.mode {
            PermissionMode::Bypass => {
                Some((PermissionReply::Once, "the session runs without asking"))
            }
            PermissionMode::Plan => Some((
                PermissionReply::Reject,
                "the session is in plan mode, which is read-only",
            )),
            PermissionMode::AcceptEdits if !request.is_command() => {
                Some((PermissionReply::Once, "the session accepts edits"))
            }
            PermissionMode::AcceptEdits | PermissionMode::Default => None,
        }
    }

    /// Takes a request: answered by the policy (`permission.resolved`, decided by `policy`, and
    /// the reply line for the agent), or opened (`permission.requested`).
    pub(crate) fn request(&mut self, request: PermissionRequest) -> (EventDraft, Option<String>) {
        if let Some((reply, reason)) = self.policy(&request) {
            let id = request.request_id.clone();
            self.resolved.insert(id.clone());
            let draft = resolved(&request, reply, DecidedBy::Policy, Some(reason));
            return (draft, Some(reply_line(&id, reply, Some(reason))));
        }
        let draft =
            EventDraft::synthetic(EventData::PermissionRequested(Box::new(PermissionData {
                permission_id: request.request_id.clone(),
                action: request.tool_name.clone(),
                status: PermissionStatus::Requested,
                metadata: Some(Value::Object(request.metadata())),
            })));
        self.open.insert(request.request_id.clone(), request);
        (draft, None)
    }

    /// Answers an open request: `permission.resolved` and the reply line for the agent. An
    /// `always` from the user is remembered for later requests.
    pub(crate) fn resolve(
        &mut self,
        id: &str,
        reply: PermissionReply,
        decided_by: DecidedBy,
        reason: Option<&str>,
    ) -> Result<(EventDraft, String), PermissionError> {
        let Some(request) = self.open.remove(id) else {
            return Err(if self.resolved.contains(id) {
                PermissionError::AlreadyResolved(id.to_owned())
            } else {
                PermissionError::Unknown(id.to_owned())
            });
        };
        self.resolved.insert(id.to_owned());
        if reply == PermissionReply::Always {
            self.always.push(request.rule());
        }
        Ok((
            resolved(&request, reply, decided_by, reason),
            reply_line(id, reply, reason),
        ))
    }

    /// True while some request waits for an answer.
    pub(crate) fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// How many are open.
    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The ids of the open requests, sorted.
    pub(crate) fn open_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.open.keys().cloned().collect();
        ids.sort();
        ids
    }
}

/// `permission.resolved` for a request.
fn resolved(
    request: &PermissionRequest,
    reply: PermissionReply,
    decided_by: DecidedBy,
    reason: Option<&str>,
) -> EventDraft {
    let mut metadata = request.metadata();
    metadata.insert("reply".into(), json!(reply.as_str()));
    metadata.insert("decidedBy".into(), json!(decided_by.name()));
    if let Some(reason) = reason {
        metadata.insert("reason".into(), json!(reason));
    }
    EventDraft::synthetic(EventData::PermissionResolved(Box::new(PermissionData {
        permission_id: request.request_id.clone(),
        action: request.tool_name.clone(),
        status: reply.status(),
        metadata: Some(Value::Object(metadata)),
    })))
}

/// The `permission_reply` line for the agent's stdin.
fn reply_line(id: &str, reply: PermissionReply, reason: Option<&str>) -> String {
    let decision = match reply {
        PermissionReply::Once | PermissionReply::Always => "allow",
        PermissionReply::Reject => "reject",
    };
    let mut line = json!({"type": "permission_reply", "requestId": id, "decision": decision});
    if let (PermissionReply::Reject, Some(reason)) = (reply, reason) {
        line["message"] = json!(reason);
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(id: &str) -> PermissionRequest {
        PermissionRequest {
            request_id: id.into(),
            tool_call_id: Some(format!("call-{id}")),
            tool_name: "write_file".into(),
            kind: "edit".into(),
            title: "Write a.txt".into(),
            command: None,
            paths: vec!["a.txt".into()],
            input: json!({"path": "a.txt"}),
        }
    }

    fn command(id: &str, cmd: &str) -> PermissionRequest {
        PermissionRequest {
            request_id: id.into(),
            tool_call_id: None,
            tool_name: "run_terminal_command".into(),
            kind: "execute".into(),
            title: format!("Run `{cmd}`"),
            command: Some(cmd.into()),
            paths: Vec::new(),
            input: json!({"command": cmd}),
        }
    }

    fn book(mode: PermissionMode) -> PermissionBook {
        let mut b = PermissionBook::default();
        b.set_mode(mode);
        b
    }

    fn data(draft: &EventDraft) -> (&'static str, &PermissionData) {
        match &draft.data {
            EventData::PermissionRequested(p) => ("requested", p),
            EventData::PermissionResolved(p) => ("resolved", p),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_mode_asks_for_everything_and_the_answer_resolves_once() {
        let mut b = book(PermissionMode::Default);
        let (draft, line) = b.request(edit("p1"));
        assert_eq!(data(&draft).0, "requested");
        assert_eq!(line, None);
        assert!(b.has_open());
        let (draft, line) = b
            .resolve("p1", PermissionReply::Reject, DecidedBy::User, Some("no"))
            .unwrap();
        let (kind, p) = data(&draft);
        assert_eq!((kind, p.status), ("resolved", PermissionStatus::Reject));
        assert_eq!(p.metadata.as_ref().unwrap()["decidedBy"], "user");
        assert!(line.contains("\"decision\":\"reject\"") && line.contains("\"message\":\"no\""));
        assert_eq!(
            b.resolve("p1", PermissionReply::Once, DecidedBy::User, None),
            Err(PermissionError::AlreadyResolved("p1".into()))
        );
        assert_eq!(
            b.resolve("nope", PermissionReply::Once, DecidedBy::User, None),
            Err(PermissionError::Unknown("nope".into()))
        );
    }

    #[test]
    fn accept_edits_runs_edits_and_asks_for_commands() {
        let mut b = book(PermissionMode::AcceptEdits);
        let (draft, line) = b.request(edit("p1"));
        let (kind, p) = data(&draft);
        assert_eq!((kind, p.status), ("resolved", PermissionStatus::Accept));
        assert_eq!(p.metadata.as_ref().unwrap()["decidedBy"], "policy");
        assert!(line.unwrap().contains("\"decision\":\"allow\""));
        let (draft, line) = b.request(command("p2", "rm -rf build"));
        assert_eq!(data(&draft).0, "requested");
        assert_eq!(line, None);
    }

    #[test]
    fn plan_mode_rejects_every_change_without_asking() {
        let mut b = book(PermissionMode::Plan);
        for request in [edit("p1"), command("p2", "ls")] {
            let (draft, line) = b.request(request);
            let (kind, p) = data(&draft);
            assert_eq!((kind, p.status), ("resolved", PermissionStatus::Reject));
            let line = line.unwrap();
            assert!(line.contains("plan mode"), "{line}");
        }
        assert!(!b.has_open());
    }

    #[test]
    fn always_is_remembered_per_tool_and_per_command_prefix() {
        let mut b = book(PermissionMode::Default);
        b.request(command("p1", "npm test"));
        let (draft, _) = b
            .resolve("p1", PermissionReply::Always, DecidedBy::User, None)
            .unwrap();
        assert_eq!(data(&draft).1.status, PermissionStatus::AcceptForSession);
        // The same prefix: allowed by the policy; another command: asked.
        let (draft, line) = b.request(command("p2", "npm test -- --watch"));
        let (kind, p) = data(&draft);
        assert_eq!((kind, p.status), ("resolved", PermissionStatus::Accept));
        assert_eq!(p.metadata.as_ref().unwrap()["decidedBy"], "policy");
        assert!(line.is_some());
        assert_eq!(
            data(&b.request(command("p3", "npm publish")).0).0,
            "requested"
        );
        // Once does not stick.
        b.request(edit("p4"));
        b.resolve("p4", PermissionReply::Once, DecidedBy::User, None)
            .unwrap();
        assert_eq!(data(&b.request(edit("p5")).0).0, "requested");
        b.resolve("p5", PermissionReply::Always, DecidedBy::User, None)
            .unwrap();
        assert_eq!(data(&b.request(edit("p6")).0).0, "resolved");
    }

    #[test]
    fn the_requested_event_carries_what_a_client_needs() {
        let mut b = book(PermissionMode::Default);
        let (draft, _) = b.request(command("p1", "rm -rf build"));
        let (_, p) = data(&draft);
        assert_eq!(p.permission_id, "p1");
        assert_eq!(p.action, "run_terminal_command");
        let m = p.metadata.as_ref().unwrap();
        assert_eq!(m["command"], "rm -rf build");
        assert_eq!(m["kind"], "execute");
        assert_eq!(m["options"], json!(["once", "always", "reject"]));
        assert_eq!(m["alwaysPrefix"], "rm");
        assert_eq!(b.open_ids(), vec!["p1"]);
        let (draft, _) = b.request(command("p2", "ls; rm -rf build"));
        assert_eq!(
            data(&draft).1.metadata.as_ref().unwrap()["alwaysPrefix"],
            Value::Null
        );
    }

    #[test]
    fn always_for_a_simple_command_allows_only_simple_commands_of_that_prefix() {
        let mut b = book(PermissionMode::Default);
        let mut n = 0;
        let mut ask = |b: &mut PermissionBook, cmd: &str| {
            n += 1;
            let (draft, line) = b.request(command(&format!("p{n}"), cmd));
            (data(&draft).0, line.is_some(), format!("p{n}"))
        };
        for first in ["git status", "ls"] {
            let (kind, _, id) = ask(&mut b, first);
            assert_eq!(kind, "requested");
            b.resolve(&id, PermissionReply::Always, DecidedBy::User, None)
                .unwrap();
        }
        for allowed in ["git status --short", "ls -la", "'ls' -l", "ls"] {
            assert_eq!(ask(&mut b, allowed).0, "resolved", "{allowed}");
        }
        for asked in [
            "git status --short || touch x",
            "git status; touch x",
            "ls -la; touch x",
            "ls $(touch x)",
            "ls `touch x`",
            "ls | sh -c 'touch x'",
            "ls > /dev/null; touch x",
            "ls > x",
            "ls\ntouch x",
            "ls
touch x",
            "ls && touch x",
            "PATH=. ls",
            "git push",
        ] {
            let (kind, _, id) = ask(&mut b, asked);
            assert_eq!(kind, "requested", "{asked:?}");
            b.resolve(&id, PermissionReply::Once, DecidedBy::User, None)
                .unwrap();
        }
    }

    #[test]
    fn always_for_a_compound_command_allows_that_exact_line_only() {
        let mut b = book(PermissionMode::Default);
        b.request(command("p1", "echo gated-ok > gated-cmd.txt"));
        b.resolve("p1", PermissionReply::Always, DecidedBy::User, None)
            .unwrap();
        let (draft, _) = b.request(command("p2", "echo gated-ok > gated-cmd.txt"));
        assert_eq!(data(&draft).0, "resolved");
        let (draft, _) = b.request(command("p3", "echo gated-ok > other.txt"));
        assert_eq!(data(&draft).0, "requested");
        let (draft, _) = b.request(command("p4", "echo gated-ok"));
        assert_eq!(data(&draft).0, "requested");
        // A runner's `always` is its exact line too.
        b.request(command("p5", "sh -c 'ls'"));
        b.resolve("p5", PermissionReply::Always, DecidedBy::User, None)
            .unwrap();
        let (draft, _) = b.request(command("p6", "sh -c 'touch x'"));
        assert_eq!(data(&draft).0, "requested");
    }
}
