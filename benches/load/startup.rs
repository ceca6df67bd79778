//! Startup: exec to the first 200 on `/v1/health`, polled over raw TCP as fast as possible on
//! a port picked beforehand (the daemon must be told its port to be polled from the start).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::daemon::{daemon_command, scratch_dir, status_kib, Daemon};
use crate::Settings;

/// One start: exec to the first 200 on `/v1/health` (polled over raw TCP as fast as possible),
/// the RSS right then, and how long SIGTERM takes to stop the idle daemon.
pub struct Start {
    pub ready: Duration,
    pub idle_rss_kib: u64,
    pub stop: Duration,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn health_ok(addr: SocketAddr) -> bool {
    let Ok(mut tcp) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = tcp.set_nodelay(true);
    if tcp
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match tcp.read(&mut buf[got..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got += n,
        }
    }
    buf.starts_with(b"HTTP/1.1 200")
}

pub fn start_once(s: &Settings) -> Start {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let data_dir = scratch_dir("start");
    let mut cmd = daemon_command(s, port, &data_dir);
    cmd.stderr(Stdio::null());
    let t = Instant::now();
    let daemon = Daemon::spawn(cmd, data_dir, false);
    let deadline = t + Duration::from_secs(20);
    while !health_ok(addr) {
        assert!(
            Instant::now() < deadline,
            "the daemon did not answer /v1/health on {addr} within 20 s"
        );
    }
    let ready = t.elapsed();
    let idle_rss_kib = status_kib(daemon.pid, "VmRSS");
    let stop = daemon.stop();
    Start {
        ready,
        idle_rss_kib,
        stop,
    }
}
