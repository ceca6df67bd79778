//! Golden tests: every Codebuff fixture converts to exactly its expected universal events.
//!
//! `fixtures/codebuff/<name>.jsonl` → `fixtures/universal/<name>.jsonl`, compared field by field
//! (the time is fixed, so nothing varies). After an intended change of the conversion, or after
//! re-capturing fixtures, regenerate the expected files with:
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test --test golden
//! ```
//!
//! Every output must also satisfy the single-turn lifecycle invariants.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use codebuffd::commands::convert::{convert_stream, ConvertOptions};
use serde_json::Value;

const FIXED_TIME: &str = "2026-01-01T00:00:00.000000Z";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The prompt each captured fixture was made with (from the capture manifest).
fn prompt_for(name: &str) -> Option<String> {
    let manifest = fs::read_to_string(root().join("fixtures/codebuff/captures.json")).ok()?;
    let manifest: Value = serde_json::from_str(&manifest).ok()?;
    manifest[name]["args"]
        .as_array()?
        .last()?
        .as_str()
        .map(str::to_owned)
}

fn convert_fixture(path: &Path) -> Vec<u8> {
    let name = path.file_stem().unwrap().to_str().unwrap();
    let options = ConvertOptions {
        session_id: "golden".into(),
        prompt: prompt_for(name),
        include_raw: false,
        max_line_bytes: 16 * 1024 * 1024,
        fixed_time: Some(FIXED_TIME.into()),
    };
    let mut input = fs::File::open(path).unwrap();
    let mut out = Vec::new();
    convert_stream(&mut input, &mut out, &options).unwrap();
    out
}

fn parse_lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("each output line is JSON"))
        .collect()
}

/// The first path where two values differ, for a readable failure.
fn first_difference(path: &str, got: &Value, want: &Value) -> Option<String> {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            let keys_a: Vec<&String> = a.keys().collect();
            let keys_b: Vec<&String> = b.keys().collect();
            if keys_a != keys_b {
                return Some(format!("{path}: keys {keys_a:?} != expected {keys_b:?}"));
            }
            a.iter()
                .find_map(|(k, v)| first_difference(&format!("{path}.{k}"), v, &b[k]))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y)),
        _ if got == want => None,
        _ => {
            let show = |v: &Value| {
                let s = v.to_string();
                if s.len() > 200 {
                    format!("{}… ({} bytes)", &s[..200], s.len())
                } else {
                    s
                }
            };
            Some(format!("{path}: got {} expected {}", show(got), show(want)))
        }
    }
}

fn fixtures() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(root().join("fixtures/codebuff"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_fixture_converts_to_its_golden_events() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let paths = fixtures();
    assert!(paths.len() >= 20, "expected the captured and edge fixtures");
    let mut failures = Vec::new();
    for path in &paths {
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let got = convert_fixture(path);
        let golden = root().join(format!("fixtures/universal/{name}.jsonl"));
        if update {
            fs::write(&golden, &got).unwrap();
            continue;
        }
        let Ok(want) = fs::read(&golden) else {
            failures.push(format!("{name}: no golden file (run UPDATE_GOLDEN=1)"));
            continue;
        };
        let (got, want) = (parse_lines(&got), parse_lines(&want));
        if got.len() != want.len() {
            failures.push(format!(
                "{name}: {} events, expected {}",
                got.len(),
                want.len()
            ));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Some(diff) = first_difference(&format!("event[{i}]"), g, w) {
                failures.push(format!("{name}: {diff}"));
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatches:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_fixture_satisfies_the_lifecycle_rules() {
    for path in fixtures() {
        let events = parse_lines(&convert_fixture(&path));
        let errs = support::invariants::violations(&events);
        assert!(errs.is_empty(), "{}:\n{}", path.display(), errs.join("\n"));
    }
}
