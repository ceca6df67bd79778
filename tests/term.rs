//! The terminal client without a terminal (`codebuffd exec`, `resume`, `sessions`), the real
//! binary with the `mock` agent: stdout carries only the answer (or `--json` events), stderr
//! the human view and the closing line, exit statuses, `--answers`, resume continuing the same
//! session, `--url` against a running daemon, and in-process runs on a daemon's data directory.
//! Every command runs in its own process session and leaves no process behind.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::daemon::{binary, free_port, wait_session_empty, Daemon, TempDir};

/// A user of the client: a home of their own (no user config, no history of others), a data
/// directory and a working directory beside it.
struct User {
    home: TempDir,
}

impl User {
    fn new(tag: &str) -> User {
        let home = TempDir::new(tag);
        std::fs::create_dir_all(home.path().join("work")).unwrap();
        User { home }
    }

    fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    fn work(&self) -> PathBuf {
        self.home.path().join("work")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("XDG_STATE_HOME", self.home.path().join("state"))
            .env("CODEBUFFD_DATA_DIR", self.data_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::other)?;
                Ok(())
            });
        }
        cmd
    }

    /// Runs the client to its end with `stdin`, and checks it left no process behind.
    fn run_with(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self.command(args).spawn().expect("start codebuffd");
        let pid = child.id() as i32;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        let output = child.wait_with_output().unwrap();
        let left = wait_session_empty(pid, Duration::from_secs(10));
        assert!(
            left.is_empty(),
            "processes outlived `codebuffd {args:?}`: {left:?}"
        );
        output
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, "")
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The session id the closing line names.
fn resume_id(o: &Output) -> String {
    let err = stderr(o);
    let at = err
        .find("resume with: codebuffd resume ")
        .unwrap_or_else(|| panic!("no closing line in: {err}"));
    err[at + "resume with: codebuffd resume ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn exec_prints_only_the_answer_on_stdout_and_the_rest_on_stderr() {
    let u = User::new("term-exec");
    let o = u.run(&["exec", "--agent", "mock", "tools", "hi there"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "Wrote hello.txt, could not patch missing.txt, and ran the command.\n"
    );
    let err = stderr(&o);
    // The human view: streamed text, one line per tool call, the closing line; no colour or
    // spinner without a terminal.
    assert!(
        err.contains("I will write the file, patch another and run a command."),
        "{err}"
    );
    assert!(err.contains("⏺ write hello.txt"), "{err}");
    assert!(err.contains("⏺ edit missing.txt"), "{err}");
    assert!(err.contains("⏺ $ echo mock-tools"), "{err}");
    assert!(err.contains("  ⎿ hello.txt +1 −0"), "{err}");
    assert!(
        err.contains("str_replace failed: The file does not exist"),
        "{err}"
    );
    assert!(err.contains("✓ completed in "), "{err}");
    assert!(err.contains("7.50 credits ($0.07)"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no escape codes without a terminal: {err:?}"
    );
    let id = resume_id(&o);
    assert_eq!(
        std::fs::read_to_string(u.work().join("hello.txt")).unwrap(),
        "hi there\n"
    );
    // `run` is `exec`; the session is recorded in the data directory.
    let o = u.run(&["run", "--agent", "mock", "echo", "two", "words"]);
    assert_eq!(stdout(&o), "two words\n");
    let o = u.run(&["sessions", "show", &id, "--json"]);
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(info["turns"], 1);
    assert_eq!(info["status"], "idle");
    assert_eq!(info["agent"], "mock");
}

#[test]
fn json_prints_every_event_of_the_turn_as_a_line() {
    let u = User::new("term-json");
    let o = u.run(&["exec", "--agent", "mock", "--json", "stream one two three"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let events: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"turn.started"));
    assert_eq!(types.last(), Some(&"turn.ended"));
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    assert!(types.contains(&"item.delta"));
    // Each a universal event of one session, in sequence.
    for pair in events.windows(2) {
        assert_eq!(pair[0]["session_id"], pair[1]["session_id"]);
        assert_eq!(
            pair[1]["sequence"].as_u64().unwrap(),
            pair[0]["sequence"].as_u64().unwrap() + 1
        );
    }
    for line in stdout(&o).lines() {
        let _: codebuffd::universal::UniversalEvent = serde_json::from_str(line).unwrap();
    }
    assert!(stderr(&o).contains("✓ completed"));
}

#[test]
fn exit_statuses_say_how_the_turn_ended() {
    let u = User::new("term-exit");
    let o = u.run(&["exec", "--agent", "mock", "fail"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(
        err.contains("Codebuff backend unreachable (mock failure)"),
        "{err}"
    );
    assert!(err.contains("✗ failed in "), "{err}");

    // A turn that fails mid-answer: its text is no answer, stdout stays empty unless
    // `--partial` asks for it.
    let o = u.run(&["exec", "--agent", "mock", "crash"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("About to crash"), "{}", stderr(&o));
    assert!(stderr(&o).contains("✗ failed"));
    assert_eq!(stdout(&o), "");
    let o = u.run(&["exec", "--agent", "mock", "--partial", "crash"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(stdout(&o), "About to crash\n");

    // A budget the turn reaches (the engine's own setting, read as the daemon reads it).
    let mut cmd = u.command(&["exec", "--agent", "mock", "spend 10"]);
    cmd.env("CODEBUFFD_MAX_SESSION_CREDITS", "3");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("✗ budget exhausted"), "{}", stderr(&o));

    // No Codebuff credential (the user's home has none, the environment neither).
    let o = u.run(&["exec", "hello"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // It says where it looked, where to get a key, and the agent that needs none.
    for said in [
        "no Codebuff credential",
        "https://www.codebuff.com/api-keys",
        "--agent mock",
    ] {
        assert!(stderr(&o).contains(said), "{}", stderr(&o));
    }
    // A budget of the session's own (`--max-credits`).
    let o = u.run(&["exec", "--agent", "mock", "--max-credits", "2", "spend 10"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("✗ budget exhausted"), "{}", stderr(&o));

    // Usage: no prompt, an unknown agent, a directory that does not exist.
    let o = u.run_with(&["exec", "--agent", "mock"], "  \n");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no prompt"), "{}", stderr(&o));
    let o = u.run(&["exec", "--agent", "claude", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    let o = u.run(&["exec", "--agent", "mock", "--cwd", "/no/such/dir", "hi"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A session that does not exist.
    let o = u.run(&["resume", "nope", "echo hi"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not found"), "{}", stderr(&o));
}

/// The agent's text reaches a person as text, never as terminal commands: OSC 52 (clipboard),
/// OSC 0 (title), CSI 2J (clear screen) and OSC 8 (hyperlink) from the agent are shown as
/// visible escapes in the live view and in `sessions events`, while the client's own colours
/// still work; stdout that is not a terminal carries the answer as data, byte for byte.
#[test]
fn control_sequences_from_the_agent_are_shown_never_obeyed() {
    let u = User::new("term-escapes");
    let evil = "pwn \x1b]52;c;cHduZWQ=\x07 \x1b]0;owned\x07\x1b[2J \x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\";
    let visible =
        "pwn \\e]52;c;cHduZWQ=\\a \\e]0;owned\\a\\e[2J \\e]8;;http://evil\\e\\x\\e]8;;\\e\\";
    let o = u.run(&[
        "exec",
        "--agent",
        "mock",
        "--color",
        "always",
        &format!("echo {evil}"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // stdout is a pipe: the answer as the agent wrote it.
    assert_eq!(stdout(&o), format!("{evil}\n"));
    let err = stderr(&o);
    assert!(err.contains(visible), "{err:?}");
    // The only escapes left on stderr are the client's own colours (SGR `ESC [ … m`).
    let mut rest = err.as_str();
    while let Some(at) = rest.find('\x1b') {
        let after = &rest[at + 1..];
        let end = after
            .find('m')
            .unwrap_or_else(|| panic!("a raw escape: {err:?}"));
        assert!(
            after.starts_with('[')
                && after[1..end]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ';'),
            "a raw escape that is not a colour: {err:?}"
        );
        rest = &after[end..];
    }
    assert!(err.contains("\x1b[32m✓ completed"), "{err:?}");
    // The log's human view (stdout here, for a person) and its JSON (data).
    // (The closing line's colour ends right after the id.)
    let id: String = resume_id(&o).chars().take(36).collect();
    let o = u.run(&["sessions", "events", &id]);
    let view = stdout(&o);
    assert!(!view.contains('\x1b'), "{view:?}");
    assert!(view.contains(&format!("› echo {visible}")), "{view:?}");
    // The session's title is its first prompt: `show` and `list` show it, never obey it.
    for args in [vec!["sessions", "show", &id], vec!["sessions", "list"]] {
        let o = u.run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(!stdout(&o).contains('\x1b'), "{args:?}: {:?}", stdout(&o));
        assert!(
            stdout(&o).contains("echo pwn \\e]52;c;cHduZWQ=\\a"),
            "{args:?}: {}",
            stdout(&o)
        );
    }
    let o = u.run(&["sessions", "events", &id, "--json"]);
    assert!(!stdout(&o).contains('\x1b'), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("\\u001b]52;c;cHduZWQ="),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_dash_or_no_prompt_reads_stdin() {
    let u = User::new("term-stdin");
    let o = u.run_with(&["exec", "--agent", "mock", "-"], "echo from stdin\n");
    assert_eq!(stdout(&o), "from stdin\n", "{}", stderr(&o));
    let o = u.run_with(&["exec", "--agent", "mock"], "echo piped too");
    assert_eq!(stdout(&o), "piped too\n", "{}", stderr(&o));
}

#[test]
fn resume_continues_the_same_session() {
    let u = User::new("term-resume");
    let first = u.run(&["exec", "--agent", "mock", "echo one"]);
    let id = resume_id(&first);
    let o = u.run(&["resume", "--last", "echo two"]);
    assert_eq!(stdout(&o), "two\n", "{}", stderr(&o));
    assert_eq!(resume_id(&o), id);
    let o = u.run(&["resume", &id, "echo", "three"]);
    assert_eq!(stdout(&o), "three\n", "{}", stderr(&o));
    // The closing line says the turn's cost and the session's after it (turn.ended's).
    assert!(
        stderr(&o).contains("· 1.25 credits ($0.01), 3.75 in the session ·"),
        "{}",
        stderr(&o)
    );
    let o = u.run(&["sessions", "show", &id, "--json"]);
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(info["turns"], 3);
    // One Codebuff conversation across the three processes.
    let o = u.run(&["sessions", "events", &id, "--json"]);
    let natives: std::collections::BTreeSet<String> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "turn.ended")
        .map(|e| {
            e["native_session_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(natives.len(), 1, "{natives:?}");
    // The human view of the log, with the user's prompts.
    let o = u.run(&["sessions", "events", &id]);
    let view = stdout(&o);
    assert!(
        view.contains("› echo one") && view.contains("› echo three"),
        "{view}"
    );
    assert_eq!(view.matches("✓ completed").count(), 3, "{view}");
    assert!(
        view.contains("✓ completed · 1.25 credits ($0.01), 2.50 in the session"),
        "{view}"
    );
}

/// `resume --last` continues the newest session of the current directory — never another
/// project's — and says which session and where; none there is exit 2 with what to do;
/// `--all` takes the newest of any directory. `sessions list` tells them apart by title (the
/// first prompt) and directory.
#[test]
fn resume_last_continues_the_session_of_this_directory() {
    let u = User::new("term-resume-dir");
    let (a, b, c) = (u.work().join("a"), u.work().join("b"), u.work().join("c"));
    for dir in [&a, &b, &c] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let in_dir = |dir: &PathBuf, args: &[&str]| {
        let mut cmd = u.command(args);
        cmd.current_dir(dir).stdin(Stdio::null());
        cmd.output().unwrap()
    };
    let first = in_dir(&a, &["exec", "--agent", "mock", "echo project a"]);
    let id_a = resume_id(&first);
    let second = in_dir(&b, &["exec", "--agent", "mock", "echo project b"]);
    let id_b = resume_id(&second);

    // In a, though b's session is newer: a's.
    let o = in_dir(&a, &["resume", "--last", "echo a again"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "a again\n");
    let a_real = a.canonicalize().unwrap();
    let err = stderr(&o);
    assert!(
        err.contains(&format!("resuming session {id_a} “echo project a”")),
        "{err}"
    );
    assert!(
        err.contains(&format!("in {} · agent mock · 1 turns", a_real.display())),
        "{err}"
    );
    assert_eq!(resume_id(&o), id_a);
    // `--cwd` names the directory instead.
    let o = in_dir(&a, &["resume", "--last", "--cwd", "../b", "echo b again"]);
    assert_eq!(resume_id(&o), id_b, "{}", stderr(&o));

    // Nothing in c: exit 2, saying what to do; `--all` takes the newest anywhere (b's).
    let o = in_dir(&c, &["resume", "--last", "echo c"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let c_real = c.canonicalize().unwrap();
    assert!(
        stderr(&o).contains(&format!("no session works in {}", c_real.display())),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--last --all"), "{}", stderr(&o));
    let o = in_dir(&c, &["resume", "--last", "--all", "echo anywhere"]);
    assert_eq!(resume_id(&o), id_b, "{}", stderr(&o));

    // The list says which is which.
    let o = in_dir(&c, &["sessions", "list"]);
    let table = stdout(&o);
    let row = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not in {table}"))
            .to_owned()
    };
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.lines().next().unwrap().contains("DIRECTORY"),
        "{table}"
    );
    // The directory under the user's home as `~/…`, then the title.
    assert!(row(&id_a).contains(" ~/work/a "), "{table}");
    assert!(row(&id_a).ends_with("  echo project a"), "{table}");
    assert!(row(&id_b).contains(" ~/work/b "), "{table}");
    assert!(row(&id_b).ends_with("  echo project b"), "{table}");
}

/// Without a terminal, nobody can answer: a new session keeps the engine's permission mode
/// (`bypass` unless configured), as `--help` says.
#[test]
fn without_a_terminal_the_engines_permission_mode_stays() {
    let u = User::new("term-no-tty-mode");
    let o = u.run(&["exec", "--agent", "mock", "gated"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(u.work().join("gated-cmd.txt").exists(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("bypass"), "{}", stderr(&o));
    let id = resume_id(&o);
    let o = u.run(&["sessions", "show", &id, "--json"]);
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(info["permissionMode"], "bypass");
    let help = u.run(&["exec", "--help"]);
    let text: String = stdout(&help)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("[default: `default` when someone is at a terminal to answer; otherwise"),
        "{text}"
    );
    assert!(text.contains("`bypass` unless configured"), "{text}");
    assert!(text.contains("--yolo"), "{text}");
}

#[test]
fn answers_supply_questions_and_permissions_without_a_terminal() {
    let u = User::new("term-answers");
    let o = u.run(&[
        "exec",
        "--agent",
        "mock",
        "ask",
        "--answers",
        r#"{"Which test framework?": "jest", "Kinds": ["unit", "e2e"]}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("jest"), "{}", stdout(&o));
    assert!(stdout(&o).contains("unit, e2e"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("answered: jest · unit, e2e"),
        "{}",
        stderr(&o)
    );

    // No answers and no terminal: skipped, and said so.
    let o = u.run(&["exec", "--agent", "mock", "ask"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "You skipped the question.\n");
    assert!(
        stderr(&o).contains("no one is at a terminal (pass --answers)"),
        "{}",
        stderr(&o)
    );

    // Permissions: the file write allowed, the command rejected.
    let o = u.run(&[
        "exec",
        "--agent",
        "mock",
        "--permission-mode",
        "default",
        "gated",
        "--answers",
        r#"{"permissions": {"write_file": "once", "*": "reject"}}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(u.work().join("gated.txt").exists());
    assert!(!u.work().join("gated-cmd.txt").exists());
    let err = stderr(&o);
    assert!(err.contains("allowed (user)"), "{err}");
    assert!(err.contains("rejected (user)"), "{err}");

    // Without answers every request is rejected, with a notice.
    std::fs::remove_file(u.work().join("gated.txt")).unwrap();
    let o = u.run(&[
        "exec",
        "--agent",
        "mock",
        "--permission-mode",
        "default",
        "gated",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!u.work().join("gated.txt").exists());
    assert!(
        stderr(&o).contains("asks permission but no one is at a terminal"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sigint_cancels_the_turn_and_exits_130_leaving_nothing() {
    let u = User::new("term-sigint");
    let mut child = u
        .command(&["exec", "--agent", "mock", "--json", "hang"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    drop(child.stdin.take());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The agent runs once its start status is in the log.
    for line in lines.by_ref() {
        if line.unwrap().contains("codebuff.start") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let last: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(last["type"], "turn.ended");
    assert_eq!(last["data"]["metadata"]["status"], "cancelled");
    let left = wait_session_empty(pid, Duration::from_secs(10));
    assert!(left.is_empty(), "{left:?}");
}

/// SIGTERM stops `exec` the way Ctrl-C does: the turn is cancelled through the engine and
/// recorded as `cancelled` (not left for a later start to call interrupted), exit 143.
#[test]
fn sigterm_cancels_the_turn_and_exits_143() {
    let u = User::new("term-sigterm");
    let mut child = u
        .command(&["exec", "--agent", "mock", "--json", "hang"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    drop(child.stdin.take());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("codebuff.start") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let last: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(last["type"], "turn.ended");
    assert_eq!(last["data"]["metadata"]["status"], "cancelled");
    let left = wait_session_empty(pid, Duration::from_secs(10));
    assert!(left.is_empty(), "{left:?}");
    // The next engine on the directory finds the turn ended: nothing to recover.
    let o = u.run(&[
        "sessions",
        "events",
        "--json",
        last["session_id"].as_str().unwrap(),
    ]);
    let ends: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "turn.ended")
        .collect();
    assert_eq!(ends.len(), 1, "{}", stdout(&o));
    assert_eq!(ends[0]["data"]["metadata"]["status"], "cancelled");
}

/// A session ended by another client while the terminal's turn runs, or while it waits in
/// the queue: the terminal gives the engine's verdict (`cancelled`, as ACP and `/v1/ws` give
/// for the same log), says why, and exits 130 — a queued turn whose session ended no longer
/// waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_session_is_terminated_elsewhere_ends_cancelled() {
    let d = Daemon::start();
    let u = User::new("term-terminated");
    // Waits for the client's exit (a hang fails the test instead of blocking it).
    let finish = |child: std::process::Child| {
        let pid = child.id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!("the client did not end after its session did");
            }
        }
    };
    for (id, queued) in [("running", false), ("queued", true)] {
        d.create(id, serde_json::json!({"agent": "mock"})).await;
        if queued {
            // A hanging turn runs; the client's turn waits behind it.
            let o = u.run(&["sessions", "--url", &d.base, "send", id, "hang"]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
        // The client talks through a proxy that says when its message is posted.
        let (proxy, posted) = watching_proxy(&d.base, &format!("POST /v1/sessions/{id}/messages"));
        let mut client = u
            .command(&["resume", "--url", &proxy, id, "--json", "hang"])
            .spawn()
            .unwrap();
        drop(client.stdin.take());
        posted
            .recv_timeout(Duration::from_secs(30))
            .expect("the client posts its message");
        if !queued {
            let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
            for line in lines.by_ref() {
                if line.unwrap().contains("codebuff.start") {
                    break;
                }
            }
        }
        let o = u.run(&["sessions", "--url", &d.base, "terminate", id]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = finish(client);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(130), "{id}: {err}");
        assert!(err.contains("⊘ cancelled in "), "{id}: {err}");
        let why = if queued {
            "codebuffd: the session ended before the turn did"
        } else {
            "the session was terminated"
        };
        assert!(err.contains(why), "{id}: {err}");
    }
    d.stop();
}

/// A loopback proxy to the daemon at `base` (`http://127.0.0.1:P`): returns its base URL and
/// a channel that gets a message when a request starting with `request` (`POST /path`) has
/// gone through it.
fn watching_proxy(base: &str, request: &str) -> (String, std::sync::mpsc::Receiver<()>) {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let target = base.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = request.as_bytes().to_vec();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut daemon) = TcpStream::connect(&target) else {
                return;
            };
            let (mut client_back, mut daemon_back) =
                (client.try_clone().unwrap(), daemon.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut daemon_back, &mut client_back);
            });
            let (tx, needle) = (tx.clone(), needle.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n) = client.read(&mut buf) {
                    if n == 0 || daemon.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    if buf[..n].windows(needle.len()).any(|w| w == needle) {
                        let _ = tx.send(());
                    }
                }
                let _ = daemon.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (url, rx)
}

/// The client against a running daemon: `--url`, and in-process runs that find the daemon on
/// their data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_drives_a_running_daemon() {
    let d = Daemon::start();
    let u = User::new("term-url");
    let o = u.run(&[
        "exec",
        "--url",
        &d.base,
        "--agent",
        "mock",
        "echo over http",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "over http\n");
    let id = resume_id(&o);
    let info: Value = d
        .get(&format!("/v1/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(info["turns"], 1);

    // JSON lines and a question answered over HTTP.
    let o = u.run(&[
        "exec",
        "--url",
        &d.base,
        "--agent",
        "mock",
        "--json",
        "ask",
        "--answers",
        r#"{"*": "vitest"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let types: Vec<String> = stdout(&o)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(types.contains(&"question.resolved".to_owned()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("turn.ended"));

    // resume over HTTP continues the daemon's session.
    let o = u.run(&["resume", "--url", &d.base, &id, "echo again"]);
    assert_eq!(stdout(&o), "again\n", "{}", stderr(&o));
    let info: Value = d
        .get(&format!("/v1/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(info["turns"], 2);

    // In-process on the daemon's data directory: a second engine beside the daemon, on the
    // same log; the daemon sees the session it ran.
    let mut cmd = u.command(&[
        "exec",
        "--agent",
        "mock",
        "--json",
        "echo beside the daemon",
    ]);
    cmd.env("CODEBUFFD_DATA_DIR", &d.data_dir);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let beside = stdout(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|e| e["session_id"].as_str().map(str::to_owned))
        .expect("a session id in exec's events");
    let events = d.events(&beside).await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "completed"),
        "{events:#?}"
    );

    let listed: Value = d.get("/v1/sessions").await.json().await.unwrap();
    assert!(
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionId"] == beside.as_str()),
        "{listed:#}"
    );

    // sessions list / show / delete over HTTP.
    let o = u.run(&["sessions", "list", "--url", &d.base]);
    let table = stdout(&o);
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains(&id), "{table}");
    assert_eq!(
        table.lines().count(),
        4,
        "a header and three sessions: {table}"
    );
    let o = u.run(&["sessions", "--url", &d.base, "show", &id]);
    assert!(stdout(&o).contains("turns            2"), "{}", stdout(&o));
    let o = u.run(&["sessions", "--url", &d.base, "delete", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(d.get(&format!("/v1/sessions/{id}")).await.status(), 404);
    let o = u.run(&["sessions", "--url", &d.base, "show", &id]);
    assert_eq!(o.status.code(), Some(2));
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_events_follow_a_live_session_and_steer_it() {
    let d = Daemon::start();
    let u = User::new("term-follow");
    d.create("live", serde_json::json!({"agent": "mock"})).await;
    let mut follower = u
        .command(&[
            "sessions", "--url", &d.base, "events", "live", "--follow", "--json",
        ])
        .spawn()
        .unwrap();
    let follower_pid = follower.id() as i32;
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "session.started");

    // A turn sent with the client, then answered with the client, shows up live.
    let o = u.run(&["sessions", "--url", &d.base, "send", "live", "ask"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let e: Value = serde_json::from_str(&line.unwrap()).unwrap();
        seen.push(e["type"].as_str().unwrap().to_owned());
        if e["type"] == "question.requested" {
            break;
        }
    }
    let o = u.run(&["sessions", "--url", &d.base, "list"]);
    assert!(stdout(&o).contains("awaiting_input"), "{}", stdout(&o));
    let o = u.run(&["sessions", "--url", &d.base, "answer", "live", "2", "1,3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut answer = None;
    for line in lines.by_ref() {
        let e: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if e["type"] == "question.resolved" {
            answer = Some(e["data"]["answers"].clone());
        }
        if e["type"] == "turn.ended" {
            break;
        }
    }
    assert_eq!(
        answer.unwrap(),
        serde_json::json!([["jest"], ["unit", "e2e"]])
    );

    // A hanging turn, cancelled with the client.
    let o = u.run(&["sessions", "--url", &d.base, "send", "live", "hang"]);
    assert_eq!(o.status.code(), Some(0));
    for line in lines.by_ref() {
        if line.unwrap().contains("codebuff.start") {
            break;
        }
    }
    let o = u.run(&["sessions", "--url", &d.base, "cancel", "live"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for line in lines.by_ref() {
        let e: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if e["type"] == "turn.ended" {
            assert_eq!(e["data"]["metadata"]["status"], "cancelled");
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(follower_pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(follower.wait().unwrap().code(), Some(0));
    let o = u.run(&["sessions", "--url", &d.base, "terminate", "live"]);
    assert_eq!(o.status.code(), Some(0));
    let info: Value = d.get("/v1/sessions/live").await.json().await.unwrap();
    assert_eq!(info["status"], "ended");
    d.stop();
}

/// `sessions events --follow` outlives its daemon: killed with SIGKILL and started again on
/// the same address and data directory, the daemon serves the follower from the event after
/// the last one it printed — the later turn arrives, nothing twice, nothing missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_events_follow_reconnects_across_a_daemon_restart() {
    let data = TempDir::new("term-reconnect-data");
    let port = free_port();
    let d = Daemon::start_in_on(data.path(), port);
    let u = User::new("term-reconnect");
    d.create("kept", serde_json::json!({"agent": "mock"})).await;
    d.message("kept", "echo before the crash").await;
    d.wait_turns_ended("kept", 1).await;
    let mut follower = u
        .command(&[
            "sessions", "--url", &d.base, "events", "kept", "--follow", "--json",
        ])
        .spawn()
        .unwrap();
    let follower_pid = follower.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let event: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not an event ({e}): {line}"));
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> Value {
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the follower printed no event while waiting for {what}"))
    };
    let mut seen = Vec::new();
    loop {
        let event = next("the first turn");
        seen.push(event.clone());
        if event["type"] == "turn.ended" {
            break;
        }
    }

    let killed = d.kill9();
    assert!(
        wait_session_empty(killed, Duration::from_secs(10)).is_empty(),
        "the crashed daemon's session"
    );
    // The follower keeps trying while the daemon is down.
    std::thread::sleep(Duration::from_millis(700));
    let d = Daemon::start_in_on(data.path(), port);
    d.message("kept", "echo after the restart").await;
    loop {
        let event = next("the turn after the restart");
        seen.push(event.clone());
        if event["type"] == "item.completed"
            && event["data"]["item"]["content"][0]["text"] == "after the restart"
        {
            // Read on to that turn's end.
            while next("the turn's end")["type"] != "turn.ended" {}
            break;
        }
    }
    let sequences: Vec<u64> = seen
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "dense, in order, nothing twice");
    assert!(
        seen.iter().any(|e| e["type"] == "item.completed"
            && e["data"]["item"]["content"][0]["text"] == "before the crash"),
        "the first turn's answer"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(follower_pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(follower.wait().unwrap().code(), Some(0));
    reader.join().unwrap();
    assert!(wait_session_empty(follower_pid, Duration::from_secs(10)).is_empty());
    d.stop();
}

#[test]
fn config_show_says_where_each_setting_came_from() {
    let u = User::new("term-config");
    let dir = u.home.path().join("config/codebuffd");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "agent = \"mock\"\nmode = \"max\"\nport = 9999\n",
    )
    .unwrap();
    let mut cmd = u.command(&["config", "--model", "m1", "show"]);
    cmd.env("CODEBUFFD_MODE", "free")
        .env("CODEBUFFD_TOKEN", "s3cret");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .to_owned()
    };
    assert!(
        line("agent").contains("mock") && line("agent").contains("config.toml"),
        "{text}"
    );
    assert!(
        line("mode").contains("free") && line("mode").contains("env CODEBUFFD_MODE"),
        "{text}"
    );
    assert!(
        line("model").contains("m1") && line("model").contains("(flag)"),
        "{text}"
    );
    assert!(
        line("data_dir").contains("env CODEBUFFD_DATA_DIR"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
    // The same file still starts the engine: its client keys are known to the server too.
    let o = u.run(&["exec", "echo from the file's agent"]);
    assert_eq!(stdout(&o), "from the file's agent\n", "{}", stderr(&o));
}

/// Two terminals on one data directory: a second `exec` and `sessions list` work while the
/// first `exec`'s turn runs, and the first one's turn is left alone.
#[test]
fn a_second_in_process_engine_works_beside_a_busy_one() {
    let u = User::new("term-busy");
    let mut first = u
        .command(&["exec", "--agent", "mock", "--json", "hang"])
        .spawn()
        .unwrap();
    let pid = first.id() as i32;
    drop(first.stdin.take());
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("codebuff.start") {
            break;
        }
    }
    let o = u.run(&["exec", "--agent", "mock", "echo beside it"]);
    assert_eq!(stdout(&o), "beside it\n", "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(0));
    // Both sessions are listed, the first one still running.
    let o = u.run(&["sessions", "list", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // One session per line.
    let listed: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    assert!(
        listed.iter().any(|s| s["status"] == "running"),
        "{listed:#?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(first.wait().unwrap().code(), Some(130));
    assert!(rest.last().unwrap().contains("\"cancelled\""), "{rest:?}");
    assert!(wait_session_empty(pid, Duration::from_secs(10)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_approve_and_reject_answer_permission_requests() {
    let d = Daemon::start();
    let u = User::new("term-approve");
    d.create(
        "gate",
        serde_json::json!({"agent": "mock", "permissionMode": "default"}),
    )
    .await;
    let o = u.run(&["sessions", "send", "gate", "gated", "--url", &d.base]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let wait = Duration::from_secs(60);
    let requested = |n: usize| {
        move |events: &[Value]| {
            events
                .iter()
                .filter(|e| e["type"] == "permission.requested")
                .nth(n)
                .map(|e| e["data"]["permission_id"].as_str().unwrap().to_owned())
        }
    };
    let events = d
        .wait_for("gate", wait, |e| e["type"] == "permission.requested")
        .await;
    let first = requested(0)(&events).unwrap();
    let o = u.run(&["sessions", "approve", "gate", &first, "--url", &d.base]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("approved (once)"));
    let events = d
        .wait_for("gate", wait, |e| {
            e["type"] == "permission.requested" && e["data"]["action"] == "run_terminal_command"
        })
        .await;
    let second = requested(1)(&events).unwrap();
    let o = u.run(&["sessions", "reject", "gate", &second, "--url", &d.base]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    d.wait_turns_ended("gate", 1).await;
    let work = support::daemon::work_dir(&d.data_dir);
    assert!(work.join("gated.txt").exists());
    assert!(!work.join("gated-cmd.txt").exists());
    // An id already answered is refused, with the daemon's reason.
    let o = u.run(&["sessions", "approve", "gate", &first, "--url", &d.base]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).starts_with("codebuffd: "), "{}", stderr(&o));
    d.stop();
}
