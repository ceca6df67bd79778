//! `codebuffd sessions …`: list, show, events (`--follow`), send, answer, approve/reject,
//! cancel, terminate, delete — against a running daemon or the local data directory (the
//! same transports as `exec`). Data goes to stdout (tables, JSON), messages to stderr.

use std::io::{IsTerminal, Write};

use futures_util::StreamExt;
use time::OffsetDateTime;

use super::args::{SessionsArgs, SessionsCommand};
use super::error::{exit, ClientError};
use super::format::{cost_text, one_line};
use super::local::Local;
use super::paint::Paint;
use super::render::{Piece, Renderer};
use super::runner::{env, fail, resolve, run_with_client};
use super::transport::Transport;
use super::view::View;
use super::visible::visible;
use crate::session::{PermissionReply, SessionInfo};
use crate::universal::{EventData, QuestionData};

/// `codebuffd sessions …`.
pub fn run(args: SessionsArgs) -> u8 {
    let (settings, paint) = match resolve(&args.client, &Default::default()) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    // Listing needs no engine: read the store, even while other engines run on it.
    if let (SessionsCommand::List { json }, None) = (&args.command, &settings.url) {
        let listed = settings
            .engine(&env)
            .map_err(ClientError::from)
            .and_then(|config| Local::stored_sessions(&config));
        return match listed {
            Ok(sessions) => {
                print_list(sessions, *json);
                0
            }
            Err(e) => fail(paint, &e),
        };
    }
    run_with_client(&settings, paint, async |client| {
        command(client, args.command, paint).await
    })
}

/// `sessions list`'s output: most recently updated first, a table or JSON lines.
fn print_list(mut sessions: Vec<SessionInfo>, json: bool) {
    sessions.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    if json {
        for s in &sessions {
            out(&serde_json::to_string(s).unwrap_or_default());
        }
    } else {
        for line in table(&sessions) {
            show(&line);
        }
    }
}

/// A line of data (JSON) on stdout, as it is.
fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// A line of a table for a person on stdout: what the agent influenced (titles, directories)
/// is shown, never obeyed.
fn show(text: &str) {
    out(&visible(text));
}

fn done(what: &str) {
    eprintln!("{what}");
}

async fn command(t: &dyn Transport, cmd: SessionsCommand, paint: Paint) -> Result<u8, ClientError> {
    match cmd {
        SessionsCommand::List { json } => print_list(t.list().await?, json),
        SessionsCommand::Show { id, json } => {
            let s = t.info(&id).await?;
            if json {
                out(&serde_json::to_string_pretty(&s).unwrap_or_default());
            } else {
                for (key, value) in details(&s) {
                    show(&format!("{key:<16} {value}"));
                }
            }
        }
        SessionsCommand::Events {
            id,
            follow,
            json,
            after,
        } => return events(t, &id, follow, json, after, paint).await,
        SessionsCommand::Send { id, prompt } => {
            let prompt = super::exec::prompt_of(&prompt)?;
            t.queue(&id, &prompt).await?;
            done(&format!(
                "queued; follow it with: codebuffd sessions events {id} --follow"
            ));
        }
        SessionsCommand::Answer { id, args } => {
            let (qid, answers) = answer_args(t, &id, args).await?;
            t.answer(&id, &qid, answers).await?;
            done("answered");
        }
        SessionsCommand::Approve {
            id,
            permission_id,
            always,
        } => {
            let reply = if always {
                PermissionReply::Always
            } else {
                PermissionReply::Once
            };
            t.permission(&id, &permission_id, reply).await?;
            done(&format!("approved ({})", reply.as_str()));
        }
        SessionsCommand::Reject { id, permission_id } => {
            t.permission(&id, &permission_id, PermissionReply::Reject)
                .await?;
            done("rejected");
        }
        SessionsCommand::Cancel { id } => {
            t.cancel(&id).await?;
            done("cancelled");
        }
        SessionsCommand::Terminate { id } => {
            t.terminate(&id).await?;
            done("terminated");
        }
        SessionsCommand::Delete { id } => {
            t.delete(&id).await?;
            done("deleted");
        }
    }
    Ok(exit::OK)
}

/// `answer ID [QID] ANSWER…`: without a question id, the session's open question (the last
/// `question.requested` without its `question.resolved`). Each answer is typed as at the
/// terminal: option numbers (`1,3` for several) or free text.
async fn answer_args(
    t: &dyn Transport,
    id: &str,
    args: Vec<String>,
) -> Result<(String, Vec<Vec<String>>), ClientError> {
    let open = open_questions(t, id).await?;
    let (question, rest) = match args.split_first() {
        Some((first, rest)) if open.iter().any(|q| q.question_id == *first) => (
            open.iter().find(|q| q.question_id == *first).cloned(),
            rest.to_vec(),
        ),
        _ => (open.last().cloned(), args),
    };
    let Some(question) = question else {
        return Err(ClientError::usage("the session has no open question"));
    };
    let specs = question.specs();
    if rest.len() != specs.len() {
        return Err(ClientError::usage(format!(
            "give one answer per question ({} here)",
            specs.len()
        )));
    }
    let answers = specs
        .iter()
        .zip(&rest)
        .map(|(spec, typed)| super::prompts::parse_choice(spec, typed))
        .collect();
    Ok((question.question_id, answers))
}

/// The session's open questions, oldest first.
async fn open_questions(t: &dyn Transport, id: &str) -> Result<Vec<QuestionData>, ClientError> {
    let last = t.info(id).await?.event_count;
    let mut open: Vec<QuestionData> = Vec::new();
    if last == 0 {
        return Ok(open);
    }
    let mut events = t.events(id, 0).await?;
    while let Some(event) = events.next().await.transpose()? {
        match &event.data {
            EventData::QuestionRequested(q) => open.push(QuestionData::clone(q)),
            EventData::QuestionResolved(q) => open.retain(|o| o.question_id != q.question_id),
            _ => {}
        }
        if event.sequence >= last {
            break;
        }
    }
    Ok(open)
}

/// `sessions events`: the log from `after`, shown or as JSON lines; with `follow`, until
/// Ctrl-C (the remote stream reconnects after the last event it saw).
async fn events(
    t: &dyn Transport,
    id: &str,
    follow: bool,
    json: bool,
    after: u64,
    paint: Paint,
) -> Result<u8, ClientError> {
    let last = t.info(id).await?.event_count;
    if !follow && last <= after {
        return Ok(exit::OK);
    }
    let mut events = t.events(id, after).await?;
    // The events are the data here: their human view goes to stdout.
    let paint = if std::io::stdout().is_terminal() {
        paint
    } else {
        Paint::plain()
    };
    let mut view = View::new(paint, false, false).to_stdout();
    let mut renderer = Renderer::new(true, true);
    let mut pieces = Vec::new();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let event = tokio::select! {
            e = events.next() => e.transpose()?,
            _ = &mut interrupted => break,
        };
        let Some(event) = event else { break };
        if json {
            out(&event.to_json(false));
        } else {
            pieces.clear();
            renderer.apply(&event, &mut pieces);
            pieces.retain(|p| !matches!(p, Piece::Activity(_)));
            view.show(&pieces);
        }
        if !follow && event.sequence >= last {
            break;
        }
    }
    view.finish();
    Ok(exit::OK)
}

/// `updatedAt` (epoch ms) as UTC time.
fn when(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute]:[second]"
            ))
            .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// The `list` table: which session is which (its title — the first prompt of the sessions
/// the terminal creates — and the directory its agent works in) and where each stands.
pub fn table(sessions: &[SessionInfo]) -> Vec<String> {
    let home = std::env::var("HOME").ok().filter(|h| h.len() > 1);
    let mut lines = vec![format!(
        "{:<36}  {:<19}  {:<14}  {:>5}  {:>8}  {:<8}  {:<30}  {}",
        "ID", "UPDATED (UTC)", "STATUS", "TURNS", "CREDITS", "AGENT", "DIRECTORY", "TITLE"
    )];
    for s in sessions {
        lines.push(format!(
            "{:<36}  {:<19}  {:<14}  {:>5}  {:>8.2}  {:<8}  {:<30}  {}",
            s.session_id,
            when(s.updated_at),
            s.status.as_str(),
            s.turns,
            s.cost.credits,
            s.agent,
            short_path(&s.directory, home.as_deref(), 30),
            s.title
                .as_deref()
                .map_or_else(|| "-".to_owned(), |t| one_line(t, 50)),
        ));
    }
    lines
}

/// `path` with the home directory as `~`, its start cut (`…`) to at most `max` characters.
fn short_path(path: &str, home: Option<&str>, max: usize) -> String {
    let path = match home.and_then(|h| path.strip_prefix(h)) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("~{rest}"),
        _ => path.to_owned(),
    };
    let count = path.chars().count();
    if count <= max {
        return path;
    }
    let tail: String = path.chars().skip(count - (max - 1)).collect();
    format!("…{tail}")
}

fn details(s: &SessionInfo) -> Vec<(&'static str, String)> {
    let mut rows = vec![
        ("id", s.session_id.clone()),
        ("title", s.title.clone().unwrap_or_else(|| "-".into())),
        ("agent", s.agent.clone()),
        ("status", s.status.as_str().to_owned()),
        ("mode", s.agent_mode.clone()),
        ("permission mode", s.permission_mode.clone()),
        ("model", s.model.clone().unwrap_or_else(|| "-".into())),
        ("directory", s.directory.clone()),
        ("turns", s.turns.to_string()),
        ("cost", cost_text(s.cost)),
        ("events", s.event_count.to_string()),
        ("created (UTC)", when(s.created_at)),
        ("updated (UTC)", when(s.updated_at)),
    ];
    if let (Some(budget), Some(remaining)) = (s.budget, s.remaining) {
        rows.push(("budget", format!("{budget} credits, {remaining} left")));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_short() {
        assert_eq!(
            short_path("/home/me/src/app", Some("/home/me"), 30),
            "~/src/app"
        );
        assert_eq!(
            short_path("/home/meg/x", Some("/home/me"), 30),
            "/home/meg/x"
        );
        assert_eq!(
            short_path("/a/very/long/path/to/a/project", None, 12),
            "…o/a/project"
        );
    }
}
