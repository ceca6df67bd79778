//! `codebuffd resume`: one more turn in an existing session, with `exec`'s output, answers and
//! exit statuses — or, with no prompt on a terminal, the REPL on it.

use std::io::IsTerminal;

use super::args::ResumeArgs;
use super::error::ClientError;
use super::exec::{asker, interactive, one_turn, prompt_of};
use super::runner::{fail, resolve, run_with_client};
use super::transport::Transport;

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
        let id = match session {
            Some(id) => client.info(id).await?.session_id,
            None => last_session(client).await?,
        };
        match &prompt {
            Some(prompt) => {
                let asker = asker(&args.output, interactive())?;
                one_turn(client, &id, prompt, &args.output, &asker, paint, tty).await
            }
            None => super::repl::run(client, &settings, Some(id), &args.output, paint).await,
        }
    })
}

/// The most recently updated session.
pub async fn last_session(transport: &dyn Transport) -> Result<String, ClientError> {
    transport
        .list()
        .await?
        .into_iter()
        .max_by_key(|s| s.updated_at)
        .map(|s| s.session_id)
        .ok_or_else(|| {
            ClientError::usage(format!("no session to resume ({})", transport.describe()))
        })
}
