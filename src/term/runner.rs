//! Every client command runs the same way: settings resolved, a runtime built, the engine
//! reached ([`connect`](super::connect::connect): in-process or a daemon), the command run,
//! the engine closed (an in-process one records its running turns' endings and syncs the
//! store), the runtime shut down, and an error printed with its exit status. This file is
//! that one sequence.

use std::time::Duration;

use super::args::{ClientArgs, SessionArgs};
use super::connect::connect;
use super::error::ClientError;
use super::format::Style;
use super::paint::Paint;
use super::settings::Settings;
use super::transport::Transport;
use super::visible::visible;

/// How long the runtime waits for stray tasks at exit.
const SHUTDOWN: Duration = Duration::from_millis(500);

/// The environment, as the settings read it.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Prints an error of the client on stderr and returns its exit status.
pub fn fail(paint: Paint, e: &ClientError) -> u8 {
    let line = format!("codebuffd: {e}");
    eprintln!("{}", paint.paint(Style::Error, &visible(&line)));
    e.exit_code()
}

/// The settings of a command and the colour of its stderr; the exit status of a bad setting
/// (printed) otherwise.
pub fn resolve(client: &ClientArgs, session: &SessionArgs) -> Result<(Settings, Paint), u8> {
    use std::io::IsTerminal;
    match Settings::resolve(client, session, &env) {
        Ok(settings) => {
            let paint = Paint::new(settings.color, std::io::stderr().is_terminal(), &env);
            Ok((settings, paint))
        }
        Err(e) => Err(fail(Paint::plain(), &e.into())),
    }
}

/// Runs `command` with the engine `settings` name and returns the exit status: the command's,
/// or its error's (printed on stderr).
pub fn run_with_client<F>(settings: &Settings, paint: Paint, command: F) -> u8
where
    F: AsyncFnOnce(&dyn Transport) -> Result<u8, ClientError>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return fail(
                paint,
                &ClientError::failed(format!("cannot start the runtime: {e}")),
            )
        }
    };
    let code = runtime.block_on(async {
        let client = connect(settings, &env, paint)?;
        let result = command(client.as_ref()).await;
        client.close().await;
        result
    });
    runtime.shutdown_timeout(SHUTDOWN);
    match code {
        Ok(code) => code,
        Err(e) => fail(paint, &e),
    }
}
