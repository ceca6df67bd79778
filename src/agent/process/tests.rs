//! The agent process against real `/bin/sh` children: output framing and batching, stdin,
//! exits, signals, and that nothing of the group outlives it.

use super::*;
use nix::sys::signal::killpg;

/// A generous bound for any single test's events.
const TEST_TIMEOUT: Duration = Duration::from_secs(3);

fn sh_spec(script: &str, max_line_bytes: usize) -> SpawnSpec {
    SpawnSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        cwd: std::env::temp_dir(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        max_line_bytes,
    }
}

fn spawn_sh(script: &str) -> AgentProcess {
    AgentProcess::spawn(sh_spec(script, 64 * 1024)).expect("spawn /bin/sh")
}

async fn next(p: &mut AgentProcess) -> ProcessEvent {
    tokio::time::timeout(TEST_TIMEOUT, p.next_event())
        .await
        .expect("event in time")
        .expect("an event before the end")
}

/// Reads every event up to and including `Exited`.
async fn collect(p: &mut AgentProcess) -> (Vec<ProcessEvent>, ExitInfo) {
    let mut events = Vec::new();
    loop {
        match next(p).await {
            ProcessEvent::Exited(info) => {
                assert_eq!(p.next_event().await, None, "nothing after Exited");
                return (events, info);
            }
            other => events.push(other),
        }
    }
}

fn lines(events: &[ProcessEvent], want: OutputStream) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|e| match e {
            ProcessEvent::Line { stream, line } if *stream == want => Some(line.to_vec()),
            _ => None,
        })
        .collect()
}

fn text_line(event: &ProcessEvent) -> String {
    match event {
        ProcessEvent::Line { line, .. } => String::from_utf8_lossy(line).into_owned(),
        other => panic!("expected a line, got {other:?}"),
    }
}

/// Members of process group `pgid` that are neither gone nor zombies.
fn live_members(pgid: u32) -> Vec<u32> {
    let mut live = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return live;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        if pgrp.parse::<u32>() == Ok(pgid) && !matches!(*state, "Z" | "X") {
            live.push(pid);
        }
    }
    live
}

/// Waits until process group `pgid` is gone: `kill(-pgid, 0)` fails with ESRCH, or only
/// zombies are left. Zombies are accepted because the orphaned members of a killed group
/// belong to init, and init in this sandbox reaps only every ~2 s.
async fn assert_group_gone(pgid: u32) {
    let deadline = Instant::now() + Duration::from_millis(1500);
    loop {
        let pg = Pid::from_raw(pgid as i32);
        if killpg(pg, None) == Err(Errno::ESRCH) || live_members(pgid).is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process group {pgid} still has live members: {:?}",
            live_members(pgid)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `pid` is gone or a zombie. A SIGKILLed process closes its pipes (which can
/// let `Exited` through) a moment before it becomes a zombie, hence the wait.
async fn assert_pid_dead(pid: u32) {
    let deadline = Instant::now() + Duration::from_millis(1000);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim().to_owned()));
        match state {
            Some(rest) if !rest.starts_with(['Z', 'X']) => {
                assert!(
                    Instant::now() < deadline,
                    "process {pid} still alive: {rest}"
                );
            }
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn stdout_and_stderr_lines_arrive_with_their_stream() {
    let mut p = spawn_sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3");
    let pgid = p.pid();
    let (events, info) = collect(&mut p).await;
    assert_eq!(
        lines(&events, OutputStream::Stdout),
        vec![b"out1".to_vec(), b"out2".to_vec(), b"out3".to_vec()]
    );
    assert_eq!(
        lines(&events, OutputStream::Stderr),
        vec![b"err1".to_vec(), b"err2".to_vec()]
    );
    assert_eq!(
        info,
        ExitInfo {
            code: Some(0),
            signal: None
        }
    );
    assert_group_gone(pgid).await;
}

#[tokio::test]
async fn a_partial_last_line_is_delivered() {
    let mut p = spawn_sh("printf 'first\\nlast'");
    let (events, _) = collect(&mut p).await;
    assert_eq!(
        lines(&events, OutputStream::Stdout),
        vec![b"first".to_vec(), b"last".to_vec()]
    );
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn invalid_utf8_passes_through_untouched() {
    let mut p = spawn_sh("printf '\\377\\376ok\\300\\n'");
    let (events, _) = collect(&mut p).await;
    assert_eq!(
        lines(&events, OutputStream::Stdout),
        vec![vec![0xff, 0xfe, b'o', b'k', 0xc0]]
    );
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn an_oversized_line_is_reported_and_the_next_line_arrives() {
    let script = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo next";
    let mut p = AgentProcess::spawn(sh_spec(script, 1024 * 1024)).expect("spawn");
    let (events, info) = collect(&mut p).await;
    assert_eq!(events.len(), 2, "{:?}", events.first());
    match &events[0] {
        ProcessEvent::Oversized {
            stream,
            length,
            prefix,
        } => {
            assert_eq!(*stream, OutputStream::Stdout);
            assert_eq!(*length, 3_000_000);
            assert!(!prefix.is_empty() && prefix.iter().all(|&b| b == b'x'));
        }
        other => panic!("expected an oversized report, got {other:?}"),
    }
    assert_eq!(text_line(&events[1]), "next");
    assert_eq!(info.code, Some(0));
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn exit_code_and_terminating_signal_are_reported() {
    let mut p = spawn_sh("exit 3");
    let (_, info) = collect(&mut p).await;
    assert_eq!(
        info,
        ExitInfo {
            code: Some(3),
            signal: None
        }
    );

    let mut p = spawn_sh("kill -9 $$");
    let (_, info) = collect(&mut p).await;
    assert_eq!(
        info,
        ExitInfo {
            code: None,
            signal: Some(9)
        }
    );
    // Signalling a finished agent is harmless.
    p.signal(Signal::SIGTERM).expect("no error after the exit");
    p.stop(Signal::SIGTERM, Duration::ZERO);
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn the_environment_is_exactly_the_given_one() {
    let mut spec = sh_spec("echo \"[$HOME][$FOO]\"; pwd", 1024);
    spec.env.push(("FOO".into(), "bar".into()));
    let cwd = std::env::temp_dir().canonicalize().expect("temp dir");
    spec.cwd = cwd.clone();
    let mut p = AgentProcess::spawn(spec).expect("spawn");
    let (events, _) = collect(&mut p).await;
    assert_eq!(text_line(&events[0]), "[][bar]");
    assert_eq!(text_line(&events[1]), cwd.display().to_string());
}

#[tokio::test]
async fn write_line_reaches_the_child() {
    let mut p = spawn_sh("read l; echo \"got $l\"; read m; echo \"then $m\"");
    p.write_line("hello world").await.expect("write");
    assert_eq!(text_line(&next(&mut p).await), "got hello world");
    assert!(p.write_line("two\nlines").await.is_err());
    p.write_line("bye").await.expect("write");
    assert_eq!(text_line(&next(&mut p).await), "then bye");
    let (_, info) = collect(&mut p).await;
    assert_eq!(info.code, Some(0));
    p.close_stdin();
    assert!(p.write_line("late").await.is_err());
}

#[tokio::test]
async fn close_stdin_gives_the_child_eof() {
    let mut p = spawn_sh("cat; echo done");
    p.write_line("echoed").await.expect("write");
    p.close_stdin();
    let (events, info) = collect(&mut p).await;
    assert_eq!(
        lines(&events, OutputStream::Stdout),
        vec![b"echoed".to_vec(), b"done".to_vec()]
    );
    assert_eq!(info.code, Some(0));
}

#[tokio::test]
async fn stop_escalates_to_sigkill_after_the_grace_and_kills_the_group() {
    let mut p = spawn_sh("trap '' TERM; sleep 1000 & echo $!; wait; echo survived");
    let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
    let started = Instant::now();
    p.stop(Signal::SIGTERM, Duration::from_millis(200));
    let (events, info) = collect(&mut p).await;
    let elapsed = started.elapsed();
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(info.signal, Some(9), "{info:?}");
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert_pid_dead(grandchild).await;
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn stop_again_with_sigkill_escalates_at_once() {
    let mut p = spawn_sh("trap '' TERM; echo ready; while :; do sleep 0.05; done");
    assert_eq!(text_line(&next(&mut p).await), "ready");
    let started = Instant::now();
    p.stop(Signal::SIGTERM, Duration::from_secs(30));
    p.stop(Signal::SIGKILL, Duration::ZERO);
    let (_, info) = collect(&mut p).await;
    assert_eq!(info.signal, Some(9));
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn leader_exit_kills_a_grandchild_holding_stdout() {
    let mut p = spawn_sh("sleep 1000 & echo $!; exit 4");
    let started = Instant::now();
    let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
    let (events, info) = collect(&mut p).await;
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(info.code, Some(4));
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_pid_dead(grandchild).await;
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn a_pipe_held_open_outside_the_group_delays_exit_only_by_the_grace() {
    // setsid moves the sleep out of the group, beyond the reach of the group kill.
    let mut p = spawn_sh("setsid sleep 5 & echo $!; echo bye");
    let outsider: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
    let started = Instant::now();
    let (events, info) = collect(&mut p).await;
    let elapsed = started.elapsed();
    let _ = nix::sys::signal::kill(Pid::from_raw(outsider as i32), Signal::SIGKILL);
    assert_eq!(lines(&events, OutputStream::Stdout), vec![b"bye".to_vec()]);
    assert_eq!(info.code, Some(0));
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert_group_gone(p.pid()).await;
}

#[tokio::test]
async fn dropping_an_unreaped_agent_leaves_nothing_alive() {
    let mut p = spawn_sh("sleep 1000 & echo $!; sleep 1000");
    let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
    let pgid = p.pid();
    drop(p);
    assert_group_gone(pgid).await;
    assert_pid_dead(grandchild).await;
}

#[tokio::test]
async fn a_slow_consumer_makes_the_agent_wait() {
    let marker = std::env::temp_dir().join(format!("codebuffd-bp-{}", uuid::Uuid::new_v4()));
    // ~4 MB of lines, far more than the channel and the pipe hold together.
    let script = format!(
        "yes 0123456789012345678 | head -n 200000; touch '{}'",
        marker.display()
    );
    let mut p = spawn_sh(&script);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !marker.exists(),
        "the agent wrote everything without being read"
    );
    let (events, info) = collect(&mut p).await;
    assert_eq!(events.len(), 200_000);
    assert_eq!(info.code, Some(0));
    assert!(marker.exists());
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn spawn_spec_debug_hides_environment_values() {
    let mut spec = sh_spec("true", 1024);
    spec.env
        .push(("CODEBUFF_API_KEY".into(), "sk-secret".into()));
    let shown = format!("{spec:?}");
    assert!(shown.contains("CODEBUFF_API_KEY"), "{shown}");
    assert!(!shown.contains("sk-secret"), "{shown}");
}

#[tokio::test]
async fn spawn_failures_say_what_failed() {
    let mut spec = sh_spec("true", 1024);
    spec.program = "/nonexistent/codebuff-agent".into();
    let err = AgentProcess::spawn(spec).expect_err("an error");
    assert!(matches!(err, SpawnError::NotFound(_)), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/codebuff-agent"));

    let mut spec = sh_spec("true", 1024);
    spec.program = "/etc/passwd".into();
    let err = AgentProcess::spawn(spec).expect_err("an error");
    assert!(matches!(err, SpawnError::NotExecutable(_)), "{err:?}");

    let mut spec = sh_spec("true", 1024);
    spec.cwd = "/nonexistent/dir".into();
    let err = AgentProcess::spawn(spec).expect_err("an error");
    assert!(matches!(err, SpawnError::CwdMissing(_)), "{err:?}");
}
