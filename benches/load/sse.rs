//! The SSE client: raw HTTP/1.1 over TCP, chunked decoding, and a scan of each event for its
//! type and, for flood deltas, the `<i>:<unix_time_ns>;` the agent wrote. No JSON parsing, one
//! clock read per socket read: the client stays cheap next to the daemon.

use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// De-chunks an HTTP/1.1 `Transfer-Encoding: chunked` body.
#[derive(Default)]
struct Dechunker {
    state: ChunkState,
    size_line: Vec<u8>,
}

#[derive(Default, Clone, Copy)]
enum ChunkState {
    #[default]
    Size,
    Data(usize),
    Crlf(usize),
    Done,
}

impl Dechunker {
    fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Size => match input.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        self.size_line.extend_from_slice(&input[..nl]);
                        input = &input[nl + 1..];
                        let line = String::from_utf8_lossy(&self.size_line).into_owned();
                        let hex = line.split([';', '\r']).next().unwrap_or("").trim();
                        let size = usize::from_str_radix(hex, 16)
                            .map_err(|_| format!("bad chunk size line {line:?}"))?;
                        self.size_line.clear();
                        self.state = if size == 0 {
                            ChunkState::Done
                        } else {
                            ChunkState::Data(size)
                        };
                    }
                    None => {
                        self.size_line.extend_from_slice(input);
                        input = &[];
                    }
                },
                ChunkState::Data(n) => {
                    let take = n.min(input.len());
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    self.state = if take == n {
                        ChunkState::Crlf(2)
                    } else {
                        ChunkState::Data(n - take)
                    };
                }
                ChunkState::Crlf(n) => {
                    let take = n.min(input.len());
                    input = &input[take..];
                    self.state = if take == n {
                        ChunkState::Size
                    } else {
                        ChunkState::Crlf(n - take)
                    };
                }
                ChunkState::Done => return Ok(()),
            }
        }
        Ok(())
    }
}

/// What one SSE stream saw.
#[derive(Default)]
pub struct StreamStats {
    /// Flood deltas received.
    pub deltas: u64,
    /// `id:` not one more than the previous one.
    pub sequence_errors: u64,
    /// Flood index not one more than the previous one.
    pub order_errors: u64,
    /// `data:` lines the scan could not read.
    pub malformed: u64,
    /// Latency of every flood delta, ns.
    pub latencies: Vec<u64>,
    /// The agent's timestamp of every flood delta (only with `LOAD_DUMP`).
    pub stamps: Vec<u64>,
    keep_stamps: bool,
    /// Agent-side timestamps of the first and last delta.
    pub first_ts: u64,
    pub last_ts: u64,
    pub bytes: u64,
    pub ended_at: Option<Instant>,
}

/// Follows `/v1/sessions/{id}/events/sse` from the start until `turn.ended`.
pub async fn follow(
    addr: SocketAddr,
    id: String,
    ready: tokio::sync::oneshot::Sender<()>,
) -> StreamStats {
    let mut tcp = TcpStream::connect(addr).await.expect("connect for SSE");
    tcp.set_nodelay(true).expect("nodelay");
    let request = format!(
        "GET /v1/sessions/{id}/events/sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    );
    tcp.write_all(request.as_bytes())
        .await
        .expect("send SSE request");
    let mut raw = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let (chunked, rest) = loop {
        let n = tcp.read(&mut raw).await.expect("read SSE head");
        assert!(n > 0, "SSE connection closed before the head");
        head.extend_from_slice(&raw[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
            assert!(
                text.starts_with("http/1.1 200"),
                "SSE answered {}",
                text.lines().next().unwrap_or("")
            );
            let chunked = text.contains("transfer-encoding: chunked");
            break (chunked, head[end + 4..].to_vec());
        }
    };
    let _ = ready.send(());
    let mut stats = StreamStats {
        keep_stamps: std::env::var_os("LOAD_DUMP").is_some(),
        ..StreamStats::default()
    };
    let mut scan = Scan::default();
    let mut dechunk = Dechunker::default();
    let mut body = Vec::with_capacity(512 * 1024);
    let mut input = rest;
    loop {
        let now = unix_ns();
        stats.bytes += input.len() as u64;
        if chunked {
            dechunk.feed(&input, &mut body).expect("chunked body");
        } else {
            body.extend_from_slice(&input);
        }
        if scan.lines(&mut body, now, &mut stats) {
            stats.ended_at = Some(Instant::now());
            return stats;
        }
        let n = tcp.read(&mut raw).await.expect("read SSE");
        if n == 0 {
            return stats;
        }
        input.clear();
        input.extend_from_slice(&raw[..n]);
    }
}

#[derive(Default)]
struct Scan {
    last_sequence: u64,
    next_index: u64,
}

impl Scan {
    /// Consumes the complete lines of `body`; true once `turn.ended` has been read.
    fn lines(&mut self, body: &mut Vec<u8>, now: u64, stats: &mut StreamStats) -> bool {
        let Some(last_nl) = body.iter().rposition(|&b| b == b'\n') else {
            return false;
        };
        let mut ended = false;
        {
            let text = std::str::from_utf8(&body[..=last_nl]).expect("SSE is UTF-8");
            for line in text.split('\n') {
                if let Some(seq) = line.strip_prefix("id: ") {
                    let seq: u64 = seq.trim().parse().unwrap_or(0);
                    if seq != self.last_sequence + 1 {
                        stats.sequence_errors += 1;
                    }
                    self.last_sequence = seq;
                } else if let Some(json) = line.strip_prefix("data: ") {
                    if self.event(json, now, stats) {
                        ended = true;
                        break;
                    }
                }
            }
        }
        body.drain(..=last_nl);
        ended
    }

    /// One event's JSON; true for `turn.ended`.
    fn event(&mut self, json: &str, now: u64, stats: &mut StreamStats) -> bool {
        // The top-level `type` is the first one in the compact event (it precedes `data`).
        let Some(at) = json.find("\"type\":\"") else {
            stats.malformed += 1;
            return false;
        };
        let ty = &json[at + 8..];
        if ty.starts_with("item.delta\"") {
            let parsed = ty.find("\"delta\":\"").and_then(|d| {
                let text = &ty[d + 9..];
                let (i, rest) = text.split_once(':')?;
                let (ts, _) = rest.split_once(';')?;
                Some((i.parse::<u64>().ok()?, ts.parse::<u64>().ok()?))
            });
            let Some((i, ts)) = parsed else {
                stats.malformed += 1;
                return false;
            };
            if i != self.next_index {
                stats.order_errors += 1;
            }
            self.next_index = i + 1;
            if stats.deltas == 0 {
                stats.first_ts = ts;
            }
            stats.last_ts = ts;
            stats.deltas += 1;
            stats.latencies.push(now.saturating_sub(ts));
            if stats.keep_stamps {
                stats.stamps.push(ts);
            }
            false
        } else {
            ty.starts_with("turn.ended\"")
        }
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
