//! `codebuffd resume`: one more turn in an existing session, with `exec`'s output, answers and
//! exit statuses — or, with no prompt on a terminal, the REPL on it. `--last` continues the
//! newest session of the current directory (`--all`: of any directory), as `codex resume
//! --last` does, so a session never silently works in another project; the client says which
//! session it continues and where its agent works.

use std::io::IsTerminal;
use std::path::Path;

use super::args::ResumeArgs;
use super::error::ClientError;
use super::exec::{asker, interactive, one_turn, prompt_of};
use super::format::one_line;
use super::format::Style;
use super::new_session::{directory, warn_if_unguarded};
use super::prompts::Asker;
use super::runner::{fail, resolve, run_with_client};
use super::transport::Transport;
use super::view::View;
use crate::session::SessionInfo;

/// `codebuffd resume`.
pub fn resume(args: ResumeArgs) -> u8 {
    let (settings, paint) = match resolve(&args.client, &Default::default()) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    let tty = std::io::stderr().is_terminal();
    let (session, words) = args.split();
    let repl = words.is_empty() && std::io::stdin().is_terminal() && tty;
    let prompt = if repl {
        None
    } else {
        match prompt_of(words) {
            Ok(p) => Some(p),
            Err(e) => return fail(paint, &e),
        }
    };
    run_with_client(&settings, paint, async |client| {
        let info = match session {
            Some(id) => client.info(id).await?,
            None if args.all => last_session(client, None).await?,
            None => last_session(client, Some(&directory(args.cwd.as_deref())?)).await?,
        };
        let mut view = View::new(paint, tty, args.output.quiet);
        if !args.output.quiet {
            let title = info
                .title
                .as_deref()
                .map(|t| format!(" “{}”", one_line(t, 60)))
                .unwrap_or_default();
            view.line(
                Style::Dim,
                &format!("resuming session {}{title}", info.session_id),
            );
            view.line(Style::Dim, &where_it_works(&info));
        }
        match &prompt {
            Some(prompt) => {
                let asker = asker(&args.output, interactive())?;
                if matches!(asker, Asker::Terminal) {
                    warn_if_unguarded(&mut view, &info.permission_mode);
                }
                drop(view);
                one_turn(
                    client,
                    &info.session_id,
                    prompt,
                    &args.output,
                    &asker,
                    paint,
                    tty,
                )
                .await
            }
            None => {
                drop(view);
                let id = Some(info.session_id);
                super::repl::run(client, &settings, id, &args.output, paint).await
            }
        }
    })
}

/// `in DIR · agent A · N turns`: where a session's agent works, and what it is.
pub fn where_it_works(info: &SessionInfo) -> String {
    format!(
        "in {} · agent {} · {} turns",
        info.directory, info.agent, info.turns
    )
}

/// The most recently updated session whose agent works in `dir` (any directory when `None`).
pub async fn last_session(
    transport: &dyn Transport,
    dir: Option<&Path>,
) -> Result<SessionInfo, ClientError> {
    let found = transport
        .list()
        .await?
        .into_iter()
        .filter(|s| dir.is_none_or(|dir| works_in(s, dir)))
        .max_by_key(|s| s.updated_at);
    found.ok_or_else(|| match dir {
        Some(dir) => ClientError::usage(format!(
            "no session works in {} ({}); `codebuffd sessions list` shows them all, \
             `codebuffd resume --last --all` continues the newest of any directory",
            dir.display(),
            transport.describe()
        )),
        None => ClientError::usage(format!("no session to resume ({})", transport.describe())),
    })
}

/// The session's agent works in `dir` (both without links, when the session's still exists).
fn works_in(session: &SessionInfo, dir: &Path) -> bool {
    let theirs = Path::new(&session.directory);
    theirs == dir || theirs.canonicalize().is_ok_and(|real| real == dir)
}
