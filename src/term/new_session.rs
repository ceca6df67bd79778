//! What a session the terminal creates is created with: the client's settings, the directory
//! the agent works in, a title (the first prompt, so `sessions list` and `resume --last` can
//! say which session is which), the budget, and the permission mode.
//!
//! The permission mode: the one set (flag, `CODEBUFFD_PERMISSION_MODE`, a config file), else
//! `default` — ask before every edit and command — when someone at the terminal answers the
//! requests, else none (the engine's, `bypass` unless configured: a script has no one to ask).
//! A session at a terminal that runs without asking says so plainly, once, before its turn.

use std::path::{Path, PathBuf};

use super::error::ClientError;
use super::format::one_line;
use super::format::Style;
use super::settings::Settings;
use super::view::View;
use crate::session::CreateRequest;

/// The longest title the client gives a session.
const TITLE: usize = 80;

/// The directory `cwd` names, else the current one, as an absolute path without links.
pub fn directory(cwd: Option<&Path>) -> Result<PathBuf, ClientError> {
    let dir = match cwd {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| ClientError::usage(format!("no current directory: {e}")))?,
    };
    dir.canonicalize().map_err(|e| {
        ClientError::usage(format!(
            "the directory {} is not usable: {e}",
            dir.display()
        ))
    })
}

/// The request for a new session whose first prompt is `prompt`, the agent working in `cwd`
/// (else the current directory); `at_terminal`: someone at the terminal answers its requests.
pub fn create_request(
    settings: &Settings,
    cwd: Option<&Path>,
    prompt: &str,
    at_terminal: bool,
) -> Result<CreateRequest, ClientError> {
    let dir = directory(cwd)?;
    Ok(CreateRequest {
        agent: settings.agent.clone(),
        agent_mode: settings.mode.clone(),
        permission_mode: permission_mode(settings, at_terminal),
        model: settings.model.clone(),
        directory: Some(dir.display().to_string()),
        title: Some(one_line(prompt, TITLE)).filter(|t| !t.is_empty()),
        timeout_seconds: settings.timeout,
        max_credits: settings.max_credits,
        ..CreateRequest::default()
    })
}

/// The permission mode a new session asks for (see the module's documentation).
pub fn permission_mode(settings: &Settings, at_terminal: bool) -> Option<String> {
    match &settings.permission_mode {
        Some(mode) => Some(mode.clone()),
        None if at_terminal => Some("default".to_owned()),
        None => None,
    }
}

/// Says, at a terminal, that a session in `mode` runs tools without asking.
pub fn warn_if_unguarded(view: &mut View, mode: &str) {
    if mode == "bypass" {
        view.notice(
            Style::Warn,
            "⚠ permission mode bypass (--yolo): the agent edits files and runs commands without \
             asking",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::args::{ClientArgs, SessionArgs};

    fn settings(session: SessionArgs) -> Settings {
        let env = |_: &str| None;
        Settings::resolve(&ClientArgs::default(), &session, &env).unwrap()
    }

    #[test]
    fn a_terminal_asks_unless_a_mode_is_set() {
        let unset = settings(SessionArgs::default());
        assert_eq!(permission_mode(&unset, true).as_deref(), Some("default"));
        assert_eq!(permission_mode(&unset, false), None);
        let yolo = settings(SessionArgs {
            yolo: true,
            ..SessionArgs::default()
        });
        assert_eq!(permission_mode(&yolo, true).as_deref(), Some("bypass"));
        let edits = settings(SessionArgs {
            permission_mode: Some("acceptEdits".into()),
            ..SessionArgs::default()
        });
        assert_eq!(
            permission_mode(&edits, false).as_deref(),
            Some("acceptEdits")
        );
    }

    #[test]
    fn the_first_prompt_is_the_title() {
        let s = settings(SessionArgs::default());
        let req = create_request(&s, Some(Path::new("/")), "fix\nthe   tests", false).unwrap();
        assert_eq!(req.title.as_deref(), Some("fix the tests"));
        assert_eq!(req.directory.as_deref(), Some("/"));
    }
}
