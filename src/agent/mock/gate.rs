//! The mock agent's permission gate (`docs/agent-command.md` §5): with `permissionMode: "ask"`
//! it prints a `permission_request` before a tool that writes or runs something and waits for
//! the `permission_reply` on stdin; only an `allow` lets the tool run. End of input rejects.

use serde_json::{json, Value};

use super::output::{EmitError, Emitter};
use super::stdin;

/// The answer to a permission request.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    Allow,
    Reject(String),
}

/// Asks before `tool` runs (a write of `paths`, or `command`); returns the decision.
pub(super) fn ask(
    out: &mut Emitter,
    tool_call_id: &str,
    tool: &str,
    input: &Value,
    command: Option<&str>,
    paths: &[&str],
) -> Result<Decision, EmitError> {
    let request_id = format!("perm-{tool_call_id}");
    let (kind, title) = match command {
        Some(command) => ("execute", format!("Run `{command}`")),
        None => ("edit", format!("Write {}", paths.join(", "))),
    };
    out.event(&json!({
        "type": "permission_request",
        "requestId": request_id,
        "toolCallId": tool_call_id,
        "toolName": tool,
        "kind": kind,
        "title": title,
        "command": command,
        "paths": paths,
        "input": input,
    }))?;
    out.flush()?;
    loop {
        match stdin::next_line(None) {
            stdin::Next::Line(line) => {
                match parse_reply(&String::from_utf8_lossy(&line), &request_id) {
                    Some(decision) => return Ok(decision),
                    None => eprintln!(
                        "mock-agent: ignoring a stdin line while waiting for a permission"
                    ),
                }
            }
            stdin::Next::TimedOut | stdin::Next::Closed => {
                return Ok(Decision::Reject("stdin closed".into()))
            }
        }
    }
}

/// The decision a `permission_reply` line for `request_id` carries.
fn parse_reply(line: &str, request_id: &str) -> Option<Decision> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    if v["type"] != "permission_reply" || v["requestId"] != request_id {
        return None;
    }
    match v["decision"].as_str()? {
        "allow" => Some(Decision::Allow),
        _ => Some(Decision::Reject(
            v["message"].as_str().unwrap_or("").to_owned(),
        )),
    }
}

/// The tool result value of a call the user rejected, as the Codebuff adapter returns it.
pub(super) fn rejected(decision: &Decision) -> Value {
    let message = match decision {
        Decision::Reject(m) if !m.is_empty() => format!("The user rejected this tool call: {m}"),
        _ => "The user rejected this tool call.".to_owned(),
    };
    json!({"errorMessage": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_for_their_request_only() {
        let allow = r#"{"type":"permission_reply","requestId":"perm-1","decision":"allow"}"#;
        assert_eq!(parse_reply(allow, "perm-1"), Some(Decision::Allow));
        assert_eq!(parse_reply(allow, "perm-2"), None);
        let reject = r#"{"type":"permission_reply","requestId":"perm-1","decision":"reject","message":"no"}"#;
        assert_eq!(
            parse_reply(reject, "perm-1"),
            Some(Decision::Reject("no".into()))
        );
        assert_eq!(parse_reply("junk", "perm-1"), None);
    }

    #[test]
    fn a_rejection_tells_the_model_why() {
        let v = rejected(&Decision::Reject("not here".into()));
        assert_eq!(
            v["errorMessage"],
            "The user rejected this tool call: not here"
        );
    }
}
