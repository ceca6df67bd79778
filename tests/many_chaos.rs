//! Chaos on one data directory: several `codebuffd server` processes share one SQLite log;
//! turns of every kind are sent and cancelled through whichever process, and processes are
//! killed with `kill -9` mid-turn and started again. Whatever happens, no event is lost, every
//! turn ends exactly once, a turn ends `interrupted` only when the engine running it was
//! killed, and no process is left.
//!
//! The operations are random; the seed is printed (`CHAOS_SEED=<n>` replays a run).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon::{wait_session_empty, Daemon, TempDir};
use support::events::{assistant_texts, count};
use support::invariants::violations;

/// Server processes on the data directory at any time (a killed one is restarted later).
const PROCESSES: usize = 3;
const SESSIONS: usize = 6;
/// Random operations (send, cancel, look); kills and restarts come on top.
const OPS: usize = 150;
/// One process is killed before every `KILL_EVERY`th operation.
const KILL_EVERY: usize = 15;
/// How many operations later a killed process is replaced by a new one.
const RESTART_AFTER: usize = 6;
/// `flood N RATE`: N deltas paced over a fraction of a second, so kills land mid-flood.
const FLOOD: u64 = 200;
const FLOOD_RATE: u64 = 800;

/// xorshift64*: enough randomness for picking, replayable from its seed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            })
            | 1;
        eprintln!("chaos seed: CHAOS_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Echo,
    Flood,
    Hang,
}

/// A turn the test started, and what it did to it.
#[derive(Debug)]
struct Turn {
    kind: Kind,
    text: String,
    /// A cancel was sent for it.
    cancelled: bool,
    /// The engine running it was killed while it ran (or may have been: it was running when
    /// the kill was decided, owned by that engine).
    killed: bool,
}

struct Session {
    id: String,
    turns: Vec<Turn>,
    /// Its last turn has not been seen ended yet.
    busy: bool,
}

/// The server processes: a slot each, empty between a kill and the restart.
struct Fleet<'d> {
    dir: &'d Path,
    slots: Vec<Option<(Daemon, String)>>,
    /// Pids of the killed processes (the process sessions of what they started).
    killed: Vec<i32>,
    /// (slot, operation) of the restarts to come.
    restarts: Vec<(usize, usize)>,
}

impl<'d> Fleet<'d> {
    async fn start(dir: &'d Path) -> Fleet<'d> {
        let mut fleet = Fleet {
            dir,
            slots: Vec::new(),
            killed: Vec::new(),
            restarts: Vec::new(),
        };
        for _ in 0..PROCESSES {
            let d = fleet.launch().await;
            fleet.slots.push(Some(d));
        }
        fleet
    }

    /// Starts a server on the directory; returns it with its engine id.
    async fn launch(&self) -> (Daemon, String) {
        let d = Daemon::start_in(self.dir, &[]);
        let engines: Value = d.get("/v1/engines").await.json().await.unwrap();
        let me = engines["engines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["current"] == true)
            .unwrap_or_else(|| panic!("no current engine in {engines}"));
        assert_eq!(me["pid"], d.pid(), "{engines}");
        let id = me["engineId"].as_str().unwrap().to_owned();
        (d, id)
    }

    fn live(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|i| self.slots[*i].is_some())
            .collect()
    }

    fn any(&self, rng: &mut Rng) -> &Daemon {
        let live = self.live();
        &self.slots[live[rng.below(live.len())]].as_ref().unwrap().0
    }

    async fn restart_due(&mut self, op: usize) {
        let due: Vec<usize> = self
            .restarts
            .iter()
            .filter(|(_, at)| *at <= op)
            .map(|(slot, _)| *slot)
            .collect();
        self.restarts.retain(|(_, at)| *at > op);
        for slot in due {
            let d = self.launch().await;
            self.slots[slot] = Some(d);
        }
    }
}

/// Looks at every busy session (through a random process): a session whose last turn began
/// and is no longer running is not busy any more, and the same process's log then holds that
/// turn's end (a survivor shows a dead engine's turn running until it has ended it).
async fn refresh(fleet: &Fleet<'_>, sessions: &mut [Session], rng: &mut Rng) {
    for s in sessions.iter_mut().filter(|s| s.busy) {
        let via = fleet.any(rng);
        let info = via.info(&s.id).await;
        let begun = info["turns"].as_u64().unwrap() as usize;
        assert!(
            begun <= s.turns.len(),
            "{} began {begun} turns: {info}",
            s.id
        );
        if begun == s.turns.len() && info["status"] != "running" {
            assert_eq!(info["status"], "idle", "{info}");
            let events = via.events(&s.id).await;
            assert_eq!(
                turns_of(&events).len(),
                s.turns.len(),
                "{} is idle but not every turn it began has ended in its log: {info}",
                s.id
            );
            s.busy = false;
        }
    }
}

/// Waits until every busy session's last turn has begun (so no message waits in a mailbox of
/// the process about to be killed).
async fn wait_turns_begun(fleet: &Fleet<'_>, sessions: &[Session], rng: &mut Rng) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for s in sessions.iter().filter(|s| s.busy) {
        loop {
            let info = fleet.any(rng).info(&s.id).await;
            if info["turns"].as_u64().unwrap() as usize == s.turns.len() {
                break;
            }
            assert!(Instant::now() < deadline, "turn never began: {info}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Kills (`kill -9`) a process, preferably one running a turn; marks the turns it ran.
async fn kill_one(fleet: &mut Fleet<'_>, sessions: &mut [Session], rng: &mut Rng, op: usize) {
    wait_turns_begun(fleet, sessions, rng).await;
    let mut owners = Vec::new();
    for (i, s) in sessions.iter().enumerate().filter(|(_, s)| s.busy) {
        let info = fleet.any(rng).info(&s.id).await;
        if let Some(owner) = info["owner"].as_str() {
            owners.push((i, owner.to_owned()));
        }
    }
    let live = fleet.live();
    let running: Vec<usize> = live
        .iter()
        .copied()
        .filter(|slot| {
            let engine = &fleet.slots[*slot].as_ref().unwrap().1;
            owners.iter().any(|(_, o)| o == engine)
        })
        .collect();
    let victim = if running.is_empty() {
        live[rng.below(live.len())]
    } else {
        running[rng.below(running.len())]
    };
    let (daemon, engine) = fleet.slots[victim].take().unwrap();
    for (i, owner) in &owners {
        if *owner == engine {
            sessions[*i].turns.last_mut().unwrap().killed = true;
        }
    }
    let pid = daemon.kill9();
    eprintln!(
        "op {op}: killed slot {victim} (pid {pid}, engine {engine}) running {} turn(s)",
        owners.iter().filter(|(_, o)| *o == engine).count()
    );
    fleet.killed.push(pid);
    fleet.restarts.push((victim, op + RESTART_AFTER));
}

/// Splits a session's events into its turns (`turn.started` ..= `turn.ended`).
fn turns_of(events: &[Value]) -> Vec<&[Value]> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, e) in events.iter().enumerate() {
        if e["type"] == "turn.started" {
            start = Some(i);
        } else if e["type"] == "turn.ended" {
            out.push(&events[start.take().expect("turn.ended of an open turn")..=i]);
        }
    }
    out
}

/// The indices of the flood deltas of one turn (`"<i>:<time>;"`, possibly several per delta).
fn flood_indices(turn: &[Value]) -> Vec<u64> {
    turn.iter()
        .filter(|e| e["type"] == "item.delta")
        .filter_map(|e| e["data"]["delta"].as_str())
        .flat_map(|d| d.split(';').filter(|p| !p.is_empty()).map(str::to_owned))
        .map(|p| p.split(':').next().unwrap().parse::<u64>().unwrap())
        .collect()
}

/// Checks one session's log against what the test did to it.
fn check_log(s: &Session, events: &[Value]) {
    let errs = violations(events);
    assert!(errs.is_empty(), "{}: {}", s.id, errs.join("\n"));
    assert_eq!(count(events, "turn.started"), s.turns.len(), "{}", s.id);
    let turns = turns_of(events);
    assert_eq!(turns.len(), s.turns.len(), "{}", s.id);
    for (k, (turn, mine)) in turns.iter().zip(&s.turns).enumerate() {
        let ended = turn.last().unwrap();
        let status = ended["data"]["metadata"]["status"].as_str().unwrap_or("");
        let at = format!("{} turn {k} ({mine:?}) ended {status}", s.id);
        match (mine.kind, status) {
            (_, "interrupted") => assert!(mine.killed, "{at}: no process running it was killed"),
            (Kind::Hang, "cancelled") => assert!(mine.cancelled, "{at}"),
            (Kind::Echo | Kind::Flood, "completed") => {}
            _ => panic!("{at}"),
        }
        match mine.kind {
            Kind::Echo if status == "completed" => {
                let want = mine.text.strip_prefix("echo ").unwrap();
                assert_eq!(assistant_texts(turn), vec![want.to_owned()], "{at}");
            }
            Kind::Flood => {
                // Every delta the agent wrote before the end is there, in order, none twice:
                // all of them when it completed, a prefix when its engine was killed.
                let got = flood_indices(turn);
                let n = if status == "completed" {
                    FLOOD
                } else {
                    got.len() as u64
                };
                assert_eq!(got, (0..n).collect::<Vec<_>>(), "{at}");
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_random_kills_lose_no_event_and_end_every_turn_once() {
    let started = Instant::now();
    let dir = TempDir::new("many-chaos");
    let mut rng = Rng::new();
    let mut fleet = Fleet::start(dir.path()).await;
    let mut sessions: Vec<Session> = Vec::new();
    for i in 0..SESSIONS {
        let id = format!("chaos-{i}");
        fleet
            .any(&mut rng)
            .create(&id, json!({"agent": "mock"}))
            .await;
        sessions.push(Session {
            id,
            turns: Vec::new(),
            busy: false,
        });
    }

    for op in 0..OPS {
        fleet.restart_due(op).await;
        if op % KILL_EVERY == KILL_EVERY - 1 && fleet.live().len() > 1 {
            kill_one(&mut fleet, &mut sessions, &mut rng, op).await;
        }
        refresh(&fleet, &mut sessions, &mut rng).await;
        let s = &mut sessions[rng.below(SESSIONS)];
        let via = fleet.any(&mut rng);
        if !s.busy {
            let n = s.turns.len();
            let (kind, text) = match rng.below(10) {
                0..=3 => (Kind::Echo, format!("echo {} turn {n}", s.id)),
                4..=7 => (Kind::Flood, format!("flood {FLOOD} {FLOOD_RATE}")),
                _ => (Kind::Hang, "hang".to_owned()),
            };
            if kind == Kind::Echo && rng.below(2) == 0 {
                // The turn's own stream, served by this process whichever one runs the turn.
                let resp = via
                    .post(
                        &format!("/v1/sessions/{}/messages/stream", s.id),
                        json!({ "message": text }),
                    )
                    .await;
                assert_eq!(
                    resp.status(),
                    200,
                    "{}",
                    resp.text().await.unwrap_or_default()
                );
                let seen = support::sse::SseReader::new(resp)
                    .events_until("turn.ended")
                    .await;
                assert_eq!(seen[0]["type"], "turn.started");
                assert_eq!(
                    assistant_texts(&seen),
                    vec![text.strip_prefix("echo ").unwrap().to_owned()]
                );
            } else {
                via.message(&s.id, &text).await;
            }
            s.turns.push(Turn {
                kind,
                text,
                cancelled: false,
                killed: false,
            });
            s.busy = true;
        } else if let Some(turn) = s.turns.last_mut().filter(|t| t.kind == Kind::Hang) {
            let resp = via
                .post_empty(&format!("/v1/sessions/{}/cancel", s.id))
                .await;
            assert!(resp.status().is_success(), "cancel: {}", resp.status());
            turn.cancelled = true;
        }
        tokio::time::sleep(Duration::from_millis(10 + rng.below(60) as u64)).await;
    }

    // Every hang cancelled, every turn ended.
    fleet.restart_due(usize::MAX).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        refresh(&fleet, &mut sessions, &mut rng).await;
        if sessions.iter().all(|s| !s.busy) {
            break;
        }
        assert!(Instant::now() < deadline, "turns that never ended");
        for s in sessions.iter_mut().filter(|s| s.busy) {
            let turn = s.turns.last_mut().unwrap();
            if turn.kind == Kind::Hang {
                let via = fleet.any(&mut rng);
                let resp = via
                    .post_empty(&format!("/v1/sessions/{}/cancel", s.id))
                    .await;
                assert!(resp.status().is_success(), "cancel: {}", resp.status());
                turn.cancelled = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The log as every process reads it.
    let live = fleet.live();
    let (first, second) = (live[0], live[1]);
    let mut total = (0, 0, 0, 0);
    for s in &sessions {
        let events = fleet.slots[first].as_ref().unwrap().0.events(&s.id).await;
        check_log(s, &events);
        let again = fleet.slots[second].as_ref().unwrap().0.events(&s.id).await;
        assert_eq!(again, events, "{}: two processes read two logs", s.id);
        total.0 += events.len();
        total.1 += s.turns.len();
        total.2 += s.turns.iter().filter(|t| t.killed).count();
        total.3 += events
            .iter()
            .filter(|e| {
                e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
            })
            .count();
    }
    // Nobody holds an idle session.
    let d = &fleet.slots[first].as_ref().unwrap().0;
    let deadline = Instant::now() + Duration::from_secs(10);
    for s in &sessions {
        while d.info(&s.id).await.get("owner").is_some() {
            assert!(Instant::now() < deadline, "{} is still owned", s.id);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    eprintln!(
        "{} events in {} turns ({} on killed engines, {} interrupted), {} kills, {:?}",
        total.0,
        total.1,
        total.2,
        total.3,
        fleet.killed.len(),
        started.elapsed()
    );
    assert!(fleet.killed.len() >= OPS / KILL_EVERY - 1);

    // Nothing left: the survivors killed what the dead left behind; the live ones stop clean.
    for pid in &fleet.killed {
        let left = wait_session_empty(*pid, Duration::from_secs(10));
        assert!(left.is_empty(), "left by killed process {pid}: {left:?}");
    }
    for slot in fleet.slots.iter_mut() {
        if let Some((d, _)) = slot.take() {
            d.stop();
        }
    }
}

/// A message sent through one process while another finishes the session's turn and lets the
/// session go: whichever way the race goes (relayed to the owner, or taken over), the message
/// runs and its stream answers; never `cancelled` (nobody cancelled it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_relayed_as_the_owner_lets_go_runs() {
    let dir = TempDir::new("many-letgo");
    let a = Daemon::start_in(dir.path(), &[]);
    let b = Daemon::start_in(dir.path(), &[]);
    a.create("s", json!({"agent": "mock"})).await;
    let mut rng = Rng::new();
    let mut turns = 0;
    for attempt in 0..40 {
        // A runs a short turn; B's message comes at some point of it, or just after it.
        a.message("s", "spend 2").await;
        turns += 1;
        tokio::time::sleep(Duration::from_millis(rng.below(160) as u64)).await;
        let resp = b
            .post(
                "/v1/sessions/s/messages/stream",
                json!({"message": format!("echo attempt {attempt}")}),
            )
            .await;
        let status = resp.status();
        assert_eq!(
            status,
            200,
            "attempt {attempt}: {}",
            resp.text().await.unwrap_or_default()
        );
        let mut sse = support::sse::SseReader::new(resp);
        let seen = sse.events_until("turn.ended").await;
        turns += 1;
        assert_eq!(
            assistant_texts(&seen),
            vec![format!("attempt {attempt}")],
            "attempt {attempt}"
        );
        a.wait_turns_ended("s", turns).await;
    }
    a.stop();
    b.stop();
}
