//! The terminal client in a real terminal: `tmux` runs it in a pane, the test types keys and
//! reads the screen. Questions asked inline, approvals, the spinner, Ctrl-C during a turn and
//! the REPL. Each test is `#[ignore]`d, so a run without tmux counts them as ignored: `.ci/run`
//! installs tmux and runs them with `--ignored` (`cargo test --test term_tty -- --ignored`);
//! asked to run without tmux, they fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::daemon::{binary, cmdline, session_members, TempDir};

/// How long the screen may take to show something (the machine is shared and loaded).
const WAIT: Duration = Duration::from_secs(60);

/// Fails the test when tmux is missing (the tests are ignored unless asked for).
fn require_tmux() {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "tmux is not installed: these tests need it (`apt-get install tmux`)"
    );
}

/// What a pane runs: codebuffd with `first` (quietly, when not empty), then with `args`, its
/// command line ending with `redirect` (`2>/dev/null`); `env` added to the environment, `files`
/// written in the working directory first; `width` columns (40 lines).
#[derive(Clone, Copy)]
struct Spec<'a> {
    first: &'a [&'a str],
    args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    redirect: &'a str,
    files: &'a [(&'a str, &'a str)],
    width: u16,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            first: &[],
            args: &[],
            env: &[],
            redirect: "",
            files: &[],
            width: 120,
        }
    }
}

/// One tmux server (its own socket) with one pane running a command.
struct Pane {
    socket: String,
    home: TempDir,
}

impl Pane {
    /// Runs `args` of codebuffd in a 120×40 pane, from a working directory of its own, then
    /// prints `EXIT=<status>` and waits.
    fn start(args: &[&str]) -> Pane {
        Pane::start_with_env(args, &[])
    }

    /// [`Pane::start`] with more environment variables.
    fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Pane {
        Pane::start_after(&[], args, env)
    }

    /// Runs codebuffd with `first` (quietly, when given), then with `args` in the pane.
    fn start_after(first: &[&str], args: &[&str], env: &[(&str, &str)]) -> Pane {
        Pane::launch(&Spec {
            first,
            args,
            env,
            ..Spec::default()
        })
    }

    /// Starts the pane `spec` describes.
    fn launch(spec: &Spec) -> Pane {
        let Spec {
            first,
            args,
            env,
            redirect,
            files,
            width,
        } = *spec;
        let home = TempDir::new("tty");
        let work = home.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        for (name, text) in files {
            std::fs::write(work.join(name), text).unwrap();
        }
        let socket = format!("codebuffd-test-{}", uuid::Uuid::new_v4().simple());
        let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
        let first: Vec<String> = first.iter().map(|a| shell_quote(a)).collect();
        let h = home.path().display().to_string();
        // A script of its own: every command of it sees only this environment. bash, not
        // dash: it outlives a Ctrl-C its foreground command handled, and prints EXIT.
        let bin = shell_quote(&binary().display().to_string());
        let mut script = format!(
            "export TERM=xterm-256color HOME={h} XDG_CONFIG_HOME={h}/config \
             XDG_STATE_HOME={h}/state CODEBUFFD_DATA_DIR={h}/data\n",
            h = shell_quote(&h)
        );
        for (k, v) in env {
            script.push_str(&format!("export {k}={}\n", shell_quote(v)));
        }
        script.push_str(&format!(
            "cd {}\n",
            shell_quote(&work.display().to_string())
        ));
        if !first.is_empty() {
            script.push_str(&format!("{bin} {} >/dev/null 2>&1\n", first.join(" ")));
        }
        script.push_str(&format!(
            "{bin} {} {redirect}\necho EXIT=$?\nsleep 600\n",
            quoted.join(" ")
        ));
        let file = home.path().join("run.sh");
        std::fs::write(&file, script).unwrap();
        let script = format!(
            "env -i PATH=\"$PATH\" bash {}",
            shell_quote(&file.display().to_string())
        );
        let status = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                &width.to_string(),
                "-y",
                "40",
            ])
            .arg(script)
            .status()
            .unwrap();
        assert!(status.success());
        Pane { socket, home }
    }

    fn work(&self) -> PathBuf {
        self.home.path().join("work")
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's title (a program sets it with OSC 0 or OSC 2).
    fn title(&self) -> String {
        self.tmux(&["display-message", "-p", "-t", "t", "#{pane_title}"])
            .trim()
            .to_owned()
    }

    /// The screen's lines as the terminal shows them (a long line wrapped onto several).
    fn rows(&self) -> Vec<String> {
        self.tmux(&["capture-pane", "-p", "-S", "-200", "-t", "t"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The visible screen and its history.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t"])
    }

    /// Waits until the screen contains `text` `times` times; returns the screen.
    fn wait_for_n(&self, text: &str, times: usize) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {text:?} ×{times}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, text: &str) -> String {
        self.wait_for_n(text, 1)
    }

    /// Waits until the client reads a line: the screen's last line is a prompt (`›`). Keys
    /// typed earlier can be lost: the line editor asks the terminal where the cursor is when it
    /// starts, and reads (and drops) what was typed before the answer.
    fn wait_for_prompt(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            let last = screen.lines().rev().find(|l| !l.trim().is_empty());
            if last.is_some_and(|l| l.trim_end().ends_with('›')) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "waited for a prompt; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `text` and Enter at the client's next prompt, and waits until the line editor
    /// has taken it (its echo is on the screen): keys typed while no editor reads are kept by
    /// the terminal, but keys that reach an editor that is returning a line are lost with it.
    fn type_line(&self, text: &str) {
        self.wait_for_prompt();
        let echo = format!("› {text}");
        let before = self.screen().matches(echo.trim_end()).count();
        if !text.is_empty() {
            self.tmux(&["send-keys", "-t", "t", "-l", text]);
        }
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
        if text.is_empty() {
            std::thread::sleep(Duration::from_millis(300));
        } else {
            self.wait_for_n(echo.trim_end(), before + 1);
        }
    }

    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", "-t", "t", keys]);
    }

    /// The processes of the pane's session besides its shell and its `sleep`: none once the
    /// client has exited.
    fn leftovers(&self) -> Vec<String> {
        let pid: i32 = self
            .tmux(&["display-message", "-p", "-t", "t", "#{pane_pid}"])
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<String> = session_members(pid)
                .into_iter()
                .filter(|p| *p != pid)
                .map(cmdline)
                .filter(|c| !c.is_empty() && !c.starts_with("sleep"))
                .collect();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn exists(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

#[test]
#[ignore = "needs tmux, and --ignored"]
fn a_question_is_asked_inline_with_numbered_options() {
    require_tmux();
    let pane = Pane::start(&["exec", "--agent", "mock", "ask"]);
    let screen = pane.wait_for("(a number, or your own answer; empty to skip)");
    assert!(
        screen.contains("1. vitest — Fast, Vite-native test runner"),
        "{screen}"
    );
    assert!(
        screen.contains("? Tests: Which test framework?"),
        "{screen}"
    );
    assert!(
        screen.contains("2. jest — The long-standing default"),
        "{screen}"
    );
    pane.type_line("2");
    let screen = pane.wait_for("? Kinds: Which kinds of tests?");
    assert!(screen.contains("numbers (e.g. 1,3)"), "{screen}");
    pane.type_line("1,3");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    // The answer reflected, the final answer, the closing line; the typed lines intact.
    assert!(screen.contains("answered: jest · unit, e2e"), "{screen}");
    assert!(screen.contains("  › 2\n"), "{screen}");
    assert!(screen.contains("  › 1,3\n"), "{screen}");
    assert!(screen.contains("✓ completed in "), "{screen}");
    assert!(
        screen.contains("resume with: codebuffd resume "),
        "{screen}"
    );
    assert_eq!(pane.leftovers(), Vec::<String>::new());
    println!("captured screen of an interactive run:\n{screen}");
}

/// At a terminal a new session asks before every edit and command (no `--permission-mode`
/// given): a write is shown as its diff against the file as it is, a command whole, each
/// answered on one line.
#[test]
#[ignore = "needs tmux, and --ignored"]
fn a_terminal_asks_before_edits_and_commands_showing_the_diff() {
    require_tmux();
    let pane = Pane::launch(&Spec {
        args: &["exec", "--agent", "mock", "gated"],
        files: &[("gated.txt", "old line\n")],
        ..Spec::default()
    });
    let screen = pane.wait_for("approve? [y]es/[a]lways/[n]o");
    assert!(
        screen.contains("⚠ write_file wants to change gated.txt:\n    @@ -1,1 +1,1 @@\n    -old line\n    +gated\n"),
        "{screen}"
    );
    assert!(!screen.contains("bypass"), "{screen}");
    pane.type_line("y");
    let screen = pane.wait_for_n("approve? [y]es/[a]lways/[n]o", 2);
    assert!(
        screen
            .contains("⚠ run_terminal_command wants to run:\n  $ echo gated-ok > gated-cmd.txt\n"),
        "{screen}"
    );
    pane.type_line("n");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("allowed (user)"), "{screen}");
    assert!(screen.contains("rejected (user)"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(pane.work().join("gated.txt")).unwrap(),
        "gated\n"
    );
    assert!(!exists(&pane.work(), "gated-cmd.txt"));
    assert_eq!(pane.leftovers(), Vec::<String>::new());
}

/// `--yolo` is `bypass`, and says so plainly before the turn: nothing is asked.
#[test]
#[ignore = "needs tmux, and --ignored"]
fn yolo_runs_without_asking_and_says_so() {
    require_tmux();
    let pane = Pane::start(&["exec", "--agent", "mock", "--yolo", "gated"]);
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(
        screen.contains(
            "⚠ permission mode bypass (--yolo): the agent edits files and runs commands without asking"
        ),
        "{screen}"
    );
    assert!(!screen.contains("approve?"), "{screen}");
    assert!(exists(&pane.work(), "gated-cmd.txt"));
    // The spinner is gone once the turn ends: no frame of it, no activity of it left.
    assert!(
        !screen
            .chars()
            .any(|c| ('\u{2800}'..='\u{28ff}').contains(&c)),
        "{screen}"
    );
    assert!(!screen.contains("thinking"), "{screen}");
}

#[test]
#[ignore = "needs tmux, and --ignored"]
fn ctrl_c_cancels_a_hanging_turn_and_exits_130() {
    require_tmux();
    let pane = Pane::start(&["exec", "--agent", "mock", "hang"]);
    // The spinner says what is happening while nothing streams.
    pane.wait_for("thinking");
    std::thread::sleep(Duration::from_millis(300));
    pane.keys("C-c");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=130"), "{screen}");
    // One line says it, the spinner is gone: the screen is the closing line and EXIT.
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{screen}");
    assert!(lines[0].starts_with("⊘ cancelled in "), "{screen}");
    assert_eq!(lines[1], "EXIT=130", "{screen}");
    assert_eq!(pane.leftovers(), Vec::<String>::new());
}

#[test]
#[ignore = "needs tmux, and --ignored"]
fn the_repl_runs_turns_and_commands_on_one_session() {
    require_tmux();
    // `codebuffd` alone on a terminal is the REPL; the agent from the environment.
    let pane = Pane::start_with_env(&[], &[("CODEBUFFD_AGENT", "mock")]);
    pane.wait_for("/help for commands");
    pane.type_line("echo hello from the repl");
    pane.wait_for("✓ completed in ");
    pane.type_line("/cost");
    pane.wait_for("credits ($0.01) over 1 turns");
    // A question in the foreground, between two prompts of the editor.
    pane.type_line("ask");
    pane.wait_for("1. vitest");
    pane.type_line("1");
    pane.wait_for("? Kinds");
    pane.type_line("");
    pane.wait_for_n("✓ completed in ", 2);
    pane.type_line("/sessions");
    pane.wait_for("2 turns");
    // Ctrl-C during a turn cancels it; the REPL goes on.
    pane.type_line("hang");
    pane.wait_for("thinking");
    std::thread::sleep(Duration::from_millis(300));
    pane.keys("C-c");
    pane.wait_for("⊘ cancelled in ");
    pane.type_line("echo still here");
    pane.wait_for_n("✓ completed in ", 3);
    pane.type_line("/exit");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("hello from the repl"), "{screen}");
    assert!(screen.contains("answered: vitest · -"), "{screen}");
    assert!(screen.contains("still here"), "{screen}");
    assert!(
        screen.contains("resume with: codebuffd resume "),
        "{screen}"
    );
    assert_eq!(pane.leftovers(), Vec::<String>::new());
    println!("captured screen of a REPL run:\n{screen}");
}

#[test]
#[ignore = "needs tmux, and --ignored"]
fn resume_without_a_prompt_opens_the_repl_on_the_session() {
    require_tmux();
    let pane = Pane::start_after(
        &["exec", "--agent", "mock", "echo first"],
        &["resume", "--last"],
        &[],
    );
    pane.wait_for("/help for commands");
    pane.wait_for("\nsession ");
    pane.type_line("/cost");
    pane.wait_for("1.25 credits ($0.01) over 1 turns");
    pane.type_line("echo second");
    pane.wait_for("✓ completed in ");
    pane.type_line("/cost");
    pane.wait_for("2.50 credits ($0.03) over 2 turns");
    pane.keys("C-d");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert_eq!(pane.leftovers(), Vec::<String>::new());
}

/// The REPL's session commands: `/help`, `/mode` (shown, refused, set), `/new`, `/sessions`
/// (the current one marked), `/resume <id>` and `/cost` of the session resumed; the modes are
/// what the sessions record.
#[test]
#[ignore = "needs tmux, and --ignored"]
fn the_repl_moves_between_sessions_and_modes() {
    require_tmux();
    let pane = Pane::start_with_env(&[], &[("CODEBUFFD_AGENT", "mock")]);
    pane.wait_for("/help for commands");
    pane.type_line("/help");
    pane.wait_for("/resume <id|last>  continue another session");
    pane.type_line("/resume");
    pane.wait_for("/resume needs a session id or `last`");
    pane.type_line("/mode");
    pane.wait_for("the next turn runs in build mode");
    pane.type_line("echo in the first session");
    pane.wait_for("✓ completed in ");
    pane.type_line("/mode fast");
    pane.wait_for("agentMode `fast` is not supported; use one of build, free, max, plan");
    pane.type_line("/mode plan");
    pane.type_line("/mode");
    pane.wait_for("the next turn runs in plan mode");
    pane.type_line("/new");
    pane.wait_for("a new session starts with your next line");
    pane.type_line("echo in the second session");
    pane.wait_for_n("✓ completed in ", 2);
    pane.type_line("echo again in the second session");
    pane.wait_for_n("✓ completed in ", 3);
    pane.type_line("/sessions");
    pane.wait_for("2 turns");
    pane.wait_for_prompt();
    let screen = pane.screen();
    // `/sessions` lines: `<mark> <id>  mock …`, the current session marked `*`.
    let listed: Vec<(bool, String)> = screen
        .lines()
        .filter(|l| l.contains(" mock "))
        .filter_map(|l| {
            let current = l.starts_with('*');
            let id = l.trim_start_matches(['*', ' ']).split_whitespace().next()?;
            (id.len() == 36).then(|| (current, id.to_owned()))
        })
        .collect();
    assert_eq!(listed.len(), 2, "{screen}");
    let first = listed
        .iter()
        .find(|(current, _)| !current)
        .unwrap()
        .1
        .clone();
    let second = listed
        .iter()
        .find(|(current, _)| *current)
        .unwrap()
        .1
        .clone();
    pane.type_line(&format!("/resume {first}"));
    pane.wait_for(&format!("session {first}"));
    pane.type_line("/cost");
    pane.wait_for("over 1 turns");
    pane.type_line("/exit");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(
        screen.contains(&format!("resume with: codebuffd resume {first}")),
        "{screen}"
    );
    assert_eq!(pane.leftovers(), Vec::<String>::new());
    // Both sessions run in plan mode now: the first was switched, the second began in it.
    for (id, turns) in [(&first, 1), (&second, 2)] {
        let out = Command::new(binary())
            .args(["sessions", "show", id, "--json"])
            .env("HOME", pane.home.path())
            .env("XDG_CONFIG_HOME", pane.home.path().join("config"))
            .env("CODEBUFFD_DATA_DIR", pane.home.path().join("data"))
            .current_dir(pane.work())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["agentMode"], "plan", "{info}");
        assert_eq!(info["turns"], turns, "{info}");
    }
}

/// The agent's text never drives the terminal: an OSC 2 (window title) and a CSI 2J (clear
/// screen) in its answer are shown as visible escapes — in the live view, and on stdout when
/// stdout is the terminal — and the pane's title stays as it was.
#[test]
#[ignore = "needs tmux, and --ignored"]
fn control_sequences_from_the_agent_never_reach_the_terminal() {
    require_tmux();
    let evil = "echo title \x1b]2;pwned-title\x07 cleared \x1b[2J end";
    let shown = "title \\e]2;pwned-title\\a cleared \\e[2J end";
    // stderr and stdout are the terminal: the answer streams on stderr.
    let pane = Pane::start(&["exec", "--agent", "mock", evil]);
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains(shown), "{screen}");
    assert!(screen.contains("✓ completed in "), "{screen}");
    assert!(!pane.title().contains("pwned"), "{}", pane.title());
    // Only stdout is the terminal: the answer printed there is shown, not obeyed, too.
    let pane = Pane::launch(&Spec {
        args: &["exec", "--agent", "mock", evil],
        redirect: "2>/dev/null",
        ..Spec::default()
    });
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains(shown), "{screen}");
    assert!(!pane.title().contains("pwned"), "{}", pane.title());
}

/// The REPL of a new user: no key anywhere. Its banner fits 80 columns, it says before the
/// first turn that the codebuff agent has no key, where to get one, and how to try the mock;
/// `/agent mock` switches, and the next line runs on the mock.
#[test]
#[ignore = "needs tmux, and --ignored"]
fn the_repl_warns_without_a_key_and_switches_to_the_mock() {
    require_tmux();
    let pane = Pane::launch(&Spec {
        args: &["chat"],
        width: 80,
        ..Spec::default()
    });
    pane.wait_for("/agent mock to try the mock agent");
    pane.wait_for_prompt();
    let rows = pane.rows();
    let banner: Vec<&String> = rows.iter().take_while(|r| !r.starts_with('›')).collect();
    assert_eq!(
        banner[0],
        "codebuffd chat · agent codebuff · asks before edits and commands"
    );
    assert!(banner[1].starts_with("in-process on "), "{rows:?}");
    assert_eq!(banner[2], "/help for commands · Ctrl-D to leave");
    assert_eq!(
        banner[3..].iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        [
            "⚠ no Codebuff API key found: turns of the codebuff agent will fail.",
            "  Get one at https://www.codebuff.com/api-keys and set CODEBUFF_API_KEY,",
            "  or type /agent mock to try the mock agent, which needs none."
        ],
        "{rows:?}"
    );
    pane.type_line("/agent");
    pane.wait_for("agent codebuff (/agent codebuff or /agent mock to switch)");
    pane.type_line("/agent mock");
    pane.wait_for("agent mock: a new session starts with your next line");
    pane.type_line("echo hello from the mock");
    pane.wait_for("✓ completed in ");
    pane.type_line("/exit");
    let screen = pane.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("hello from the mock"), "{screen}");
    assert_eq!(pane.leftovers(), Vec::<String>::new());
}
