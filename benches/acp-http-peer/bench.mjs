#!/usr/bin/env node
// Side by side: codebuffd's /v1/acp against sandbox-agent's own daemon (the npm package
// @sandbox-agent/cli-linux-x64, pinned in package-lock.json), both with their `mock` agent and
// driven by the same raw ACP-over-HTTP client below (POST one JSON-RPC envelope, GET the SSE
// stream of the agent's envelopes, DELETE). No SDK: the peer's mock answers `session/new` with
// an echo and no sessionId, which the SDK cannot use. See benches/README.md.
//
//   CODEBUFFD_BIN=/path/to/release/codebuffd node bench.mjs
//
// Each daemon runs in a process session of its own (spawn `detached` = setsid); at the end its
// whole process group is killed by pid and the bench checks nothing of either session is left.

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const env = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const PROMPTS = env("BENCH_PROMPTS", 200); // round trips of a short echo
const FLOOD = env("BENCH_FLOOD", 100000); // deltas of the long streamed answer (ours)
const PAUSE_MS = env("BENCH_PAUSE_MS", 10000); // the paused reader's pause
const SESSIONS = env("BENCH_SESSIONS", 20); // created and destroyed, then processes counted

const OURS = process.env.CODEBUFFD_BIN ||
  path.resolve(here, "../../target/release/codebuffd");
const PEER = path.join(here, "node_modules/@sandbox-agent/cli-linux-x64/bin/sandbox-agent");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

// ---------- processes: a daemon's session, its RSS ----------

/** The live processes of a daemon: those in its session (`sid` = its pid), and those descending
 *  from it by ppid (children that left its session). One scan of /proc. */
function processesOf(root) {
  const parent = new Map();
  const out = new Set();
  for (const name of fs.readdirSync("/proc")) {
    if (name.charCodeAt(0) > 57) continue; // not a pid
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, "latin1");
    } catch {
      continue; // gone
    }
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ", 4);
    // f[0] = state, f[1] = ppid, f[2] = pgrp, f[3] = session
    if (f[0] === "Z") continue;
    const pid = Number(name);
    parent.set(pid, Number(f[1]));
    if (Number(f[3]) === root || pid === root) out.add(pid);
  }
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid), hops = 0; p && p !== 1 && hops < 64; p = parent.get(p), hops++) {
      if (p === root) {
        out.add(pid);
        break;
      }
    }
  }
  return [...out];
}

function statusKb(pid, field) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** A process's proportional set size: its pages, a page shared by n processes counted 1/n. */
function pssKb(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8").match(/^Pss:\s+(\d+) kB/m);
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

class Daemon {
  constructor(name, child, base) {
    this.name = name;
    this.child = child;
    this.pid = child.pid;
    this.base = base;
    this.peakKb = 0;
    this.peakPssKb = 0;
    this.sampler = setInterval(() => this.sample(), 100);
  }
  members() {
    return processesOf(this.pid);
  }
  /** Sum of VmRSS over the daemon and its processes, now. */
  rssKb() {
    return this.members().reduce((s, p) => s + statusKb(p, "VmRSS"), 0);
  }
  /** Sum of PSS over the same processes: pages they share (ours: the daemon and its `mock`
   * agent map the same executable) count once, where the sum of RSS counts them per process. */
  pssKb() {
    return this.members().reduce((s, p) => s + pssKb(p), 0);
  }
  sample() {
    this.peakKb = Math.max(this.peakKb, this.rssKb());
    this.peakPssKb = Math.max(this.peakPssKb, this.pssKb());
  }
  /** Peak: the sampled maximum of the sum, or the daemon's own VmHWM if higher. */
  peak() {
    this.sample();
    return Math.max(this.peakKb, statusKb(this.pid, "VmHWM"));
  }
  async stop() {
    clearInterval(this.sampler);
    try {
      process.kill(-this.pid, "SIGTERM");
    } catch {
      /* already gone */
    }
    for (let i = 0; i < 50 && processesOf(this.pid).length > 0; i++) await sleep(100);
    try {
      process.kill(-this.pid, "SIGKILL");
    } catch {
      /* already gone */
    }
    await sleep(200);
    return processesOf(this.pid);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

async function waitHealthy(base, child) {
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`daemon exited (${child.exitCode})`);
    try {
      const r = await fetch(`${base}/v1/health`);
      if (r.ok) return;
    } catch {
      /* not yet */
    }
    await sleep(100);
  }
  throw new Error(`${base} never became healthy`);
}

async function startOurs(scratch) {
  const dataDir = fs.mkdtempSync(path.join(scratch, "ours-data-"));
  const port = await freePort();
  const child = spawn(OURS, ["server", "--no-token", "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDir], {
    cwd: scratch,
    detached: true,
    stdio: ["ignore", "ignore", fs.openSync(path.join(scratch, "ours.log"), "w")],
  });
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base, child);
  return new Daemon("codebuffd", child, base);
}

async function startPeer(scratch) {
  const home = path.join(scratch, "peer-home");
  fs.mkdirSync(home, { recursive: true });
  const penv = { ...process.env, HOME: home, SANDBOX_AGENT_BIN: PEER };
  // Its `mock` agent is a launcher script it writes into its data dir on install.
  const inst = spawnSync(PEER, ["install-agent", "mock"], { env: penv, cwd: scratch, encoding: "utf8" });
  if (inst.status !== 0) throw new Error(`sandbox-agent install-agent mock: ${inst.stderr}`);
  const port = await freePort();
  const child = spawn(PEER, ["server", "--no-token", "--no-telemetry", "--host", "127.0.0.1", "--port", String(port)], {
    cwd: scratch,
    env: penv,
    detached: true,
    stdio: ["ignore", "ignore", fs.openSync(path.join(scratch, "peer.log"), "w")],
  });
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base, child);
  return new Daemon("sandbox-agent", child, base);
}

// ---------- the client: raw ACP over HTTP ----------

function post(base, server, envelope, agentName) {
  const body = JSON.stringify(envelope);
  const q = agentName ? `?agent=${agentName}` : "";
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${base}/v1/acp/${server}${q}`,
      {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", accept: "application/json", "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode === 202) return resolve(null);
          if (res.statusCode !== 200) return reject(new Error(`POST ${server} ${envelope.method}: ${res.statusCode} ${text}`));
          resolve(JSON.parse(text));
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const DELETE_WAIT_MS = env("BENCH_DELETE_WAIT_MS", 5000);
const deletes = new Map(); // base -> { sent, answered, ms: [] }

/** DELETE /v1/acp/{server}; gives up after DELETE_WAIT_MS (the peer's can hang: see README). */
function del(base, server) {
  const stats = deletes.get(base) ?? { sent: 0, answered: 0, ms: [] };
  deletes.set(base, stats);
  stats.sent++;
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/v1/acp/${server}`, { method: "DELETE" }, (res) => {
      res.resume();
      res.on("end", () => {
        clearTimeout(timer);
        stats.answered++;
        stats.ms.push(Date.now() - t0);
        resolve(res.statusCode);
      });
    });
    const timer = setTimeout(() => {
      req.destroy();
      resolve(null);
    }, DELETE_WAIT_MS);
    req.on("error", (e) => (req.destroyed ? null : reject(e)));
    req.end();
  });
}

/** An SSE reader of GET /v1/acp/{server}: `onEnvelope(id, envelope)` per event; pausable. */
function openStream(base, server, onEnvelope) {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}/v1/acp/${server}`, { headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`GET ${server}: ${res.statusCode}`));
      let buf = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => {
        buf += chunk;
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let id = null;
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id:")) id = Number(line.slice(3).trim());
            else if (line.startsWith("data:")) data += line.slice(5).trimStart();
          }
          if (data) onEnvelope(id, JSON.parse(data));
        }
      });
      resolve({ res, close: () => req.destroy() });
    });
    req.on("error", (e) => (e.code === "ECONNRESET" ? null : reject(e)));
  });
}

let nextId = 1;
const rid = () => nextId++;
let serverSeq = 0;
const newServerId = (tag) => `bench-${tag}-${process.pid}-${++serverSeq}`;

/** initialize + session/new on a fresh server; returns the session id to prompt (the peer's
 *  echo has none: any string does, its mock echoes whatever it gets). */
async function openSession(d, server, cwd) {
  await post(d.base, server, { jsonrpc: "2.0", id: rid(), method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } }, "mock");
  const r = await post(d.base, server, { jsonrpc: "2.0", id: rid(), method: "session/new", params: { cwd, mcpServers: [] } });
  if (r.error) throw new Error(`session/new: ${JSON.stringify(r.error)}`);
  return r.result?.sessionId ?? null;
}

function promptEnvelope(sessionId, text) {
  return { jsonrpc: "2.0", id: rid(), method: "session/prompt", params: { sessionId: sessionId ?? "none", prompt: [{ type: "text", text }] } };
}

/** Flood indexes in one envelope (ours: agent_message_chunk text `<i>:<ns>;`, maybe several). */
function floodIndexes(env) {
  const t = env?.params?.update?.content?.text;
  if (typeof t !== "string") return [];
  return [...t.matchAll(/(\d+):\d+;/g)].map((m) => Number(m[1]));
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

// ---------- the measurements ----------

async function roundTrips(d, cwd) {
  const server = newServerId("rt");
  const sid = await openSession(d, server, cwd);
  for (let i = 0; i < 5; i++) await post(d.base, server, promptEnvelope(sid, "echo warm"));
  const ms = [];
  for (let i = 0; i < PROMPTS; i++) {
    const t0 = process.hrtime.bigint();
    const r = await post(d.base, server, promptEnvelope(sid, `echo hello ${i}`));
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (r.error) throw new Error(`prompt: ${JSON.stringify(r.error)}`);
  }
  await del(d.base, server);
  ms.sort((a, b) => a - b);
  return { p50: pct(ms, 50), p95: pct(ms, 95) };
}

/** Ours only: one `flood N` prompt, read through the SSE stream to its response envelope. */
async function streamRate(d, cwd) {
  const server = newServerId("flood");
  const sid = await openSession(d, server, cwd);
  let seen = 0;
  let envelopes = 0;
  let doneAt = null;
  let done;
  const finished = new Promise((r) => (done = r));
  const env = promptEnvelope(sid, `flood ${FLOOD}`);
  const s = await openStream(d.base, server, (id, e) => {
    const n = floodIndexes(e).length;
    seen += n;
    if (n > 0) envelopes++;
    if (e.id === env.id && ("result" in e || "error" in e)) {
      doneAt = process.hrtime.bigint();
      done();
    }
  });
  const t0 = process.hrtime.bigint();
  await post(d.base, server, env);
  await finished;
  s.close();
  await del(d.base, server);
  const secs = Number(doneAt - t0) / 1e9;
  return { events: seen, envelopes, secs, rate: seen / secs };
}

/** A reader that pauses PAUSE_MS while the agent side keeps producing envelopes; lost = envelopes
 *  produced (the stream's ids, dense from 1) minus envelopes the reader got. */
async function pausedReader(d, cwd, ours) {
  const server = newServerId("pause");
  const sid = await openSession(d, server, cwd);
  const ids = new Set();
  let maxId = 0;
  let floodSeen = 0;
  let doneFor = null;
  let done;
  const finished = new Promise((r) => (done = r));
  let paused = false;
  let s = null;
  let produced = ours ? FLOOD : 0;
  s = await openStream(d.base, server, (id, e) => {
    ids.add(id);
    maxId = Math.max(maxId, id);
    const n = floodIndexes(e).length;
    floodSeen += n;
    const tick = e.method === "mock/echo" && e.params?.message?.method === "bench/tick";
    // Pause at the first envelope of the long stream, for PAUSE_MS, while it goes on.
    if (!paused && s && (n > 0 || tick)) {
      paused = true;
      s.res.pause();
      setTimeout(() => s.res.resume(), PAUSE_MS);
    }
    if (doneFor !== null && e.id === doneFor && ("result" in e || "error" in e)) done();
  });
  s.res.on("end", () => done());
  const t0 = Date.now();
  if (ours) {
    // One long streamed answer (the same `flood` as the events/s run).
    const env = promptEnvelope(sid, `flood ${produced}`);
    doneFor = env.id;
    await post(d.base, server, env);
  } else {
    // Its mock streams nothing; each notification it gets comes back as one `mock/echo`
    // envelope on the stream; then a request, whose answer ends the read.
    // As many as 16 POSTs in flight can make, for as long as the reader is paused.
    let i = 0;
    const until = Date.now() + PAUSE_MS;
    const worker = async () => {
      while (Date.now() < until) await post(d.base, server, { jsonrpc: "2.0", method: "bench/tick", params: { i: i++ } });
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    produced = i;
    const env = promptEnvelope(sid, "echo last");
    doneFor = env.id;
    await post(d.base, server, env);
  }
  const produceMs = Date.now() - t0;
  const timeout = sleep(PAUSE_MS + 30000).then(() => "timeout");
  const how = await Promise.race([finished.then(() => "done"), timeout]);
  s.close();
  await del(d.base, server);
  // maxId is the last envelope number the reader saw; when the stream is cut early it may be
  // short of what was produced, so count the produced payload too.
  const gap = maxId - ids.size; // envelopes skipped below the last one seen
  const lost = ours ? produced - floodSeen : gap + (how === "timeout" ? 1 : 0);
  return { lost, produced, gap, received: ids.size, maxId, how, produceMs, paused };
}

async function churn(d, cwd) {
  for (let i = 0; i < SESSIONS; i++) {
    const server = newServerId("churn");
    const sid = await openSession(d, server, cwd);
    await post(d.base, server, promptEnvelope(sid, "echo hi"));
    const st = await del(d.base, server);
    if (st !== 204 && st !== null) throw new Error(`DELETE: ${st}`);
  }
  await sleep(2000);
  return d.members().filter((p) => p !== d.pid);
}

async function run(d, scratch, ours) {
  const cwd = fs.mkdtempSync(path.join(scratch, "cwd-"));
  await sleep(1500);
  const idle = d.rssKb();
  log(d.name, "idle", idle, "kB; round trips");
  const members0 = d.members().length;
  const rt = await roundTrips(d, cwd);
  log(d.name, "rt", JSON.stringify(rt), "; stream rate");
  const flood = ours ? await streamRate(d, cwd) : null;
  log(d.name, "flood", JSON.stringify(flood), "; paused reader");
  const paused = await pausedReader(d, cwd, ours);
  log(d.name, "paused", JSON.stringify(paused), "; churn");
  const left = await churn(d, cwd);
  const peak = d.peak();
  const peakPss = d.peakPssKb;
  return { deletes: deletes.get(d.base), idle, members0, rt, flood, paused, left, peak, peakPss };
}

// ---------- main ----------

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "acp-http-peer-bench-"));
const daemons = [];
const cleanup = async () => {
  const leftovers = [];
  for (const d of daemons) leftovers.push(...(await d.stop()).map((p) => `${d.name}:${p}`));
  return leftovers;
};
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    await cleanup();
    fs.rmSync(scratch, { recursive: true, force: true });
    process.exit(130);
  });
}
const log = (...a) => console.error(new Date().toISOString().slice(11, 23), ...a);

let results = {};
let failed = null;
try {
  for (const [name, start, ours] of [
    ["codebuffd", startOurs, true],
    ["sandbox-agent", startPeer, false],
  ]) {
    if (process.env.BENCH_ONLY && process.env.BENCH_ONLY !== name) continue;
    const d = await start(scratch);
    daemons.push(d);
    console.error(`${name}: pid ${d.pid} at ${d.base}`);
    results[name] = await run(d, scratch, ours);
    console.error(`${name}: ${JSON.stringify(results[name])}`);
  }
} catch (e) {
  failed = e;
}
const leftovers = await cleanup();
agent.destroy();
fs.rmSync(scratch, { recursive: true, force: true });
if (failed) {
  console.error(failed);
  process.exit(1);
}

if (process.env.BENCH_ONLY) process.exit(leftovers.length ? 1 : 0);
const o = results.codebuffd;
const p = results["sandbox-agent"];
const mb = (kb) => `${(kb / 1024).toFixed(1)} MiB`;
const ms = (x) => `${x.toFixed(2)} ms`;
const lostCell = (r, ours) =>
  ours
    ? `${r.lost} of ${r.produced} flood deltas (${r.maxId} envelopes)`
    : `${r.lost} of ${r.maxId} envelopes (${r.produced} echoed notifications)${r.how === "timeout" ? ", answer never arrived" : ""}`;
const delCell = (r) => `${r.deletes.answered} of ${r.deletes.sent}`;
const rows = [
  ["", "codebuffd (mock)", "sandbox-agent 0.4.2 (mock)"],
  [`prompt round trip p50 (${PROMPTS} echo prompts)`, ms(o.rt.p50), ms(p.rt.p50)],
  [`prompt round trip p95`, ms(o.rt.p95), ms(p.rt.p95)],
  [`events/s, one streamed answer over SSE`, `${Math.round(o.flood.rate)} deltas/s (${o.flood.events} in ${o.flood.secs.toFixed(2)} s, ${o.flood.envelopes} SSE envelopes)`, "n/a (its mock does not stream)"],
  [`events lost, reader paused ${PAUSE_MS / 1000} s`, lostCell(o.paused, true), lostCell(p.paused, false)],
  [`idle RSS (daemon + children)`, mb(o.idle), mb(p.idle)],
  [`peak RSS (daemon + children)`, mb(o.peak), mb(p.peak)],
  [`peak PSS (daemon + children, shared pages once)`, mb(o.peakPss), mb(p.peakPss)],
  [`DELETEs answered within ${DELETE_WAIT_MS / 1000} s`, delCell(o), delCell(p)],
  [`processes left after ${SESSIONS} sessions created+deleted`, String(o.left.length), String(p.left.length)],
];
const w = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length)));
const line = (r) => `| ${r.map((c, i) => c.padEnd(w[i])).join(" | ")} |`;
console.log(line(rows[0]));
console.log(`|${w.map((n) => "-".repeat(n + 2)).join("|")}|`);
for (const r of rows.slice(1)) console.log(line(r));
console.log(`\nload average: ${os.loadavg().map((x) => x.toFixed(2)).join(" ")} (${os.cpus().length} cpus)`);
console.log(`processes of either daemon left after the bench: ${leftovers.length ? leftovers.join(" ") : "none"}`);
if (leftovers.length) process.exit(1);
