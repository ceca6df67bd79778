//! The printed tables: throughput and CPU, latency and memory, startup, and the targets.

use std::time::Duration;

use crate::runs::Row;
use crate::startup::Start;

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

fn fmt_duration(d: Duration) -> String {
    fmt_ns(d.as_nanos() as u64)
}

/// An integer with thousands separators.
fn fmt_int(n: f64) -> String {
    let s = format!("{n:.0}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// KiB as (decimal) megabytes, the unit of the memory targets.
fn mb(kib: u64) -> f64 {
    (kib * 1024) as f64 / 1e6
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

/// Prints the two tables of the runs; returns the anomalies seen (gaps, reordering, unreadable
/// events), also printed.
pub fn runs(rows: &[Row]) -> Vec<String> {
    let head = |cols: [&str; 11]| {
        println!(
            "{:<14} {:>8} {:>9} {:>5} {:>8} {:>10} {:>11} {:>9} {:>9} {:>9} {:>8}",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            cols[6],
            cols[7],
            cols[8],
            cols[9],
            cols[10]
        )
    };
    head([
        "run",
        "sessions",
        "deltas",
        "lost",
        "wall",
        "events/s",
        "agent ev/s",
        "daemon",
        "agent",
        "client",
        "MiB/s",
    ]);
    head([
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        "µs/event",
        "µs/event",
        "µs/event",
        "SSE",
    ]);
    for r in rows {
        let agent_rate = if r.agent_span.is_zero() {
            0.0
        } else {
            r.deltas as f64 / r.agent_span.as_secs_f64()
        };
        println!(
            "{:<14} {:>8} {:>9} {:>5} {:>8} {:>10} {:>11} {:>9.2} {:>9.2} {:>9.2} {:>8.1}",
            r.name,
            r.sessions,
            r.deltas,
            r.lost(),
            format!("{:.3} s", r.wall.as_secs_f64()),
            fmt_int(r.events_per_second()),
            fmt_int(agent_rate),
            r.us_per_event(r.daemon_ticks),
            r.us_per_event(r.agent_ticks),
            r.us_per_event(r.client_ticks),
            r.bytes as f64 / r.wall.as_secs_f64() / (1024.0 * 1024.0),
        );
    }
    println!();
    let head = |cols: [&str; 8]| {
        println!(
            "{:<14} {:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7]
        )
    };
    head([
        "run",
        "sessions",
        "lat p50",
        "lat p99",
        "lat p99.9",
        "lat max",
        "idle RSS",
        "peak RSS",
    ]);
    head(["", "", "", "", "", "", "MiB", "MiB"]);
    for r in rows {
        println!(
            "{:<14} {:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
            r.name,
            r.sessions,
            fmt_ns(r.percentile(0.50)),
            fmt_ns(r.percentile(0.99)),
            fmt_ns(r.percentile(0.999)),
            fmt_ns(r.latencies.last().copied().unwrap_or(0)),
            mib(r.idle_rss_kib),
            mib(r.peak_rss_kib),
        );
    }
    let anomalies: Vec<String> = rows
        .iter()
        .filter(|r| r.sequence_errors + r.order_errors + r.malformed > 0)
        .map(|r| {
            format!(
                "{} x{}: {} sequence gaps, {} out-of-order deltas, {} unreadable events",
                r.name, r.sessions, r.sequence_errors, r.order_errors, r.malformed
            )
        })
        .collect();
    for a in &anomalies {
        println!("ANOMALY {a}");
    }
    println!();
    anomalies
}

/// Prints the startup summary; returns the median time to the first 200.
pub fn startup(starts: &mut [Start]) -> Option<Duration> {
    if starts.is_empty() {
        return None;
    }
    let mut ready: Vec<Duration> = starts.iter().map(|st| st.ready).collect();
    let mut stop: Vec<Duration> = starts.iter().map(|st| st.stop).collect();
    starts.sort_by_key(|st| st.idle_rss_kib);
    let ready_median = median(&mut ready);
    println!(
        "startup ({} starts): exec → first 200 on /v1/health  median {}  min {}  max {}",
        ready.len(),
        fmt_duration(ready_median),
        fmt_duration(ready[0]),
        fmt_duration(ready[ready.len() - 1]),
    );
    println!(
        "                    idle RSS right after  median {} MiB;  SIGTERM → exit (idle)  median {}  max {}",
        mib(starts[starts.len() / 2].idle_rss_kib),
        fmt_duration(median(&mut stop)),
        fmt_duration(stop[stop.len() - 1]),
    );
    println!();
    Some(ready_median)
}

/// Prints each target with its measured value and whether it was met.
pub fn targets(
    rows: &[Row],
    baseline: &[Row],
    memory_store: bool,
    start_median: Option<Duration>,
    clean: bool,
) {
    println!("targets");
    if !memory_store {
        println!(
            "  (the events/s, CPU and p99 targets were set for the in-memory store: \
             LOAD_DAEMON_ARGS=\"--store memory\" checks them; a durable store's own targets \
             are the RSS and baseline rows)"
        );
    }
    if let Some(one) = rows.first() {
        println!(
            "  ≥ 300,000 events/s, one session          {:>12}   {}",
            fmt_int(one.events_per_second()),
            verdict(one.events_per_second() >= 300_000.0)
        );
    }
    for r in rows.iter().filter(|r| r.name == "flood") {
        let us = r.us_per_event(r.daemon_ticks);
        println!(
            "  ≤ 3 µs daemon CPU/event, flood x{:<3}      {:>9.2} µs   {}",
            r.sessions,
            us,
            verdict(us <= 3.0)
        );
    }
    if let Some(r) = rows.iter().rev().find(|r| r.name != "flood") {
        let p99 = r.percentile(0.99);
        println!(
            "  p99 < 5 ms, {} x{:<3}            {:>12}   {}",
            r.name,
            r.sessions,
            fmt_ns(p99),
            verdict(p99 < 5_000_000)
        );
    }
    // The durable stores' own targets: memory bounded, and close to the in-memory store.
    let floods = rows.iter().filter(|r| r.name == "flood");
    for (r, b) in floods.zip(baseline.iter().filter(|r| r.name == "flood")) {
        let ratio = r.events_per_second() / b.events_per_second();
        println!(
            "  ≥ 80% of the baseline's events/s, flood x{:<3}{:>8.0} %   {}",
            r.sessions,
            ratio * 100.0,
            verdict(ratio >= 0.8)
        );
    }
    if !memory_store {
        if let Some(r) = rows.iter().find(|r| r.name == "flood" && r.sessions > 1) {
            println!(
                "  ≤ 40 MB peak RSS, flood x{:<3} (durable)   {:>9.1} MB   {}",
                r.sessions,
                mb(r.peak_rss_kib),
                verdict(r.peak_rss_kib * 1024 <= 40_000_000)
            );
        }
    }
    if let Some(r) = rows.first() {
        let limit_mb = if memory_store { 8 } else { 10 };
        println!(
            "  ≤ {limit_mb} MB idle RSS                          {:>9.1} MB   {}",
            mb(r.idle_rss_kib),
            verdict(r.idle_rss_kib * 1024 <= limit_mb * 1_000_000)
        );
    }
    let lost: u64 = rows.iter().map(Row::lost).sum();
    println!(
        "  0 lost, dense and in order, every run     {:>12}   {}",
        lost,
        verdict(clean)
    );
    if let Some(median) = start_median {
        println!(
            "  ≤ 20 ms startup (median)                  {:>12}   {}",
            fmt_duration(median),
            verdict(median <= Duration::from_millis(20))
        );
    }
}
