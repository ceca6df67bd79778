//! Conversion throughput: parse + convert + serialize of a large realistic Codebuff stream.
//!
//! Two streams, each ~400,000 lines, built from the captured fixtures (text, reasoning, tools,
//! subagents, questions, continuations, failures):
//!
//! * `captured mix`: the captured runs repeated as they are. The fake backend streams text in
//!   a few word-sized chunks, so a third of the lines are tool calls and results: a
//!   worst case for output size (tool results are JSON inside JSON, items carry them twice).
//! * `token mix`: the same runs with every `text_delta`/`reasoning_delta` re-chunked into
//!   4-byte pieces, as a real model streams tokens; this is what a real session looks like.
//!
//! One core, no I/O: output goes to an in-memory buffer that is reused (as socket buffers are).
//! Prints lines/s, events/s and ns/event (target: ≥ 1,000,000 events/s).
//!
//! Run: `cargo bench --bench convert`. Without `--bench` (`cargo test --benches`, as `.ci/run`
//! does) it runs a smoke version: a few thousand lines, one round, numbers meaningless.

use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use codebuffd::codebuff::CodebuffConverter;
use codebuffd::store::StoredEvent;

const CAPTURED: &[&str] = &[
    "text",
    "reasoning",
    "tools",
    "subagent",
    "ask_user_single",
    "ask_user_multi",
    "ask_user_timeout",
    "continue_first",
    "continue",
    "payment_required",
];
const TARGET_LINES: usize = 400_000;
const ROUNDS: usize = 5;
/// Lines and rounds of the smoke version.
const SMOKE_LINES: usize = 4_000;
const SMOKE_ROUNDS: usize = 1;

/// The stream's length and the rounds measured: the real sizes under `cargo bench`, which
/// passes `--bench`; tiny ones otherwise.
fn sizes() -> (usize, usize) {
    if std::env::args().any(|a| a == "--bench") {
        (TARGET_LINES, ROUNDS)
    } else {
        println!("smoke mode (run with --bench): tiny sizes, numbers are meaningless");
        (SMOKE_LINES, SMOKE_ROUNDS)
    }
}

fn main() {
    let (target_lines, rounds) = sizes();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/codebuff");
    let mut unit: Vec<Vec<u8>> = Vec::new();
    for name in CAPTURED {
        let text = fs::read(dir.join(format!("{name}.jsonl"))).expect("captured fixture");
        unit.extend(
            text.split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec),
        );
    }
    // CONVERT_MIX=captured|token runs one mix only (for profiling).
    let only = std::env::var("CONVERT_MIX").ok();
    if only.as_deref() != Some("token") {
        measure("captured mix", &repeat(&unit, target_lines), rounds);
    }
    if only.as_deref() != Some("captured") {
        let tokens: Vec<Vec<u8>> = unit.iter().flat_map(|l| rechunk(l)).collect();
        measure("token mix", &repeat(&tokens, target_lines), rounds);
    }
}

fn repeat(unit: &[Vec<u8>], target: usize) -> Vec<Vec<u8>> {
    let mut lines = Vec::with_capacity(target + unit.len());
    while lines.len() < target {
        lines.extend(unit.iter().cloned());
    }
    lines
}

/// Splits a text or reasoning delta into 4-byte (token-sized) deltas; other lines unchanged.
fn rechunk(line: &[u8]) -> Vec<Vec<u8>> {
    let Ok(serde_json::Value::Object(event)) = serde_json::from_slice(line) else {
        return vec![line.to_vec()];
    };
    let is_delta = matches!(
        event.get("type").and_then(|t| t.as_str()),
        Some("text_delta" | "reasoning_delta")
    );
    let Some(text) = event
        .get("text")
        .and_then(|t| t.as_str())
        .filter(|_| is_delta)
    else {
        return vec![line.to_vec()];
    };
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(4)
        .map(|piece| {
            let mut e = event.clone();
            e.insert("text".into(), piece.iter().collect::<String>().into());
            serde_json::to_vec(&e).expect("serialize")
        })
        .collect()
}

fn measure(label: &str, lines: &[Vec<u8>], rounds: usize) {
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();

    let mut best = f64::MAX;
    let mut events = 0u64;
    for _ in 0..rounds {
        let (secs, n) = run(lines);
        best = best.min(secs);
        events = n;
    }
    let n_lines = lines.len() as f64;
    println!(
        "{label}: {} lines ({:.1} MiB) -> {} universal events; best of {rounds}: {:.3} s",
        lines.len(),
        bytes as f64 / (1024.0 * 1024.0),
        events,
        best
    );
    println!(
        "{label}: {:.0} lines/s, {:.0} events/s, {:.0} ns/event (parse + convert + serialize, one core)",
        n_lines / best,
        events as f64 / best,
        best * 1e9 / events as f64
    );
}

/// One pass over the stream, as a session would: a new turn per captured run, every line
/// converted, every event stamped and serialized. Returns (seconds, events).
fn run(lines: &[Vec<u8>]) -> (f64, u64) {
    let mut converter = CodebuffConverter::new();
    let session: std::sync::Arc<str> = "bench".into();
    let mut drafts = Vec::with_capacity(16);
    let mut out: Vec<u8> = Vec::with_capacity(2 * 1024 * 1024);
    let mut events = 0u64;
    let time: std::sync::Arc<str> = "2026-01-01T00:00:00.000000Z".into();
    let start = Instant::now();
    for line in lines {
        if line.starts_with(br#"{"type":"start""#) {
            converter.begin_turn(Some("bench prompt"), &mut drafts);
        }
        converter.convert_stdout_line(bytes::Bytes::copy_from_slice(line), &mut drafts);
        let stamped = StoredEvent::stamp_all(
            &mut drafts,
            events + 1,
            &time,
            &session,
            converter.native_session_id(),
        );
        for event in stamped {
            out.extend_from_slice(event.json.as_bytes());
            out.push(b'\n');
            events += 1;
        }
        if out.len() > 1024 * 1024 {
            out.clear();
        }
    }
    (start.elapsed().as_secs_f64(), events)
}
