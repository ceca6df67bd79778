// Test harness: starts the real `codebuffd server` (a process session of its own, so everything
// it spawns can be found and must be gone after it stops) and the Codebuff adapter's fake
// backend; small waits and process checks.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import assert from 'node:assert/strict'

export const REPO = path.resolve(import.meta.dirname, '../..')
export const BIN = process.env.CODEBUFFD_BIN ?? path.join(REPO, 'target/debug/codebuffd')
export const ADAPTER = path.join(REPO, 'adapters/codebuff')

/** A scratch directory, removed when the test ends. */
export function tempDir(t, tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `codebuffd-acp-http-${tag}-`))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** The live (not zombie) members of process session `sid`. */
export function sessionMembers(sid) {
  const pids = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let stat
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (Number(fields[3]) === sid && fields[0] !== 'Z') pids.push(Number(entry))
  }
  return pids
}

/** Polls `check` until it returns a truthy value (or fails after `limitMs`). */
export async function waitFor(what, check, limitMs = 30_000) {
  const deadline = Date.now() + limitMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

/**
 * Starts `codebuffd server` on a free loopback port with a token; `stop()` sends SIGTERM,
 * expects exit 0 and asserts that nothing the daemon started is left.
 */
export async function startDaemon(t, { token = 'acp-http-token', args = [], env = {} } = {}) {
  const dataDir = tempDir(t, 'data')
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'codebuffd-acp-http-cwd-'))
  t.after(() => fs.rmSync(work, { recursive: true, force: true }))
  const child = spawn(
    BIN,
    // The token through the environment, as docs/security.md advises (not on the command line).
    ['server', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, ...args],
    {
      cwd: work,
      detached: true,
      stdio: ['ignore', 'pipe', process.env.CODEBUFFD_TEST_LOG ? 'inherit' : 'ignore'],
      env: { ...process.env, RUST_LOG: 'info', CODEBUFFD_TOKEN: token, ...env },
    },
  )
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const lines = readline.createInterface({ input: child.stdout })
  const url = await Promise.race([
    new Promise((resolve) =>
      lines.once('line', (line) => resolve(JSON.parse(line).url)),
    ),
    exited.then((e) => assert.fail(`the daemon exited before listening: ${JSON.stringify(e)}`)),
  ])
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    child.kill('SIGTERM')
    const { code } = await exited
    assert.equal(code, 0, 'the daemon exits 0 after SIGTERM')
    await waitFor(`no process left of the daemon ${child.pid}`, () => sessionMembers(child.pid).length === 0, 10_000)
  }
  t.after(async () => {
    if (!stopped) {
      stopped = true
      try {
        process.kill(-child.pid, 'SIGKILL')
      } catch {}
    }
  })
  return { url, token, pid: child.pid, dataDir, stop }
}

/** The adapter's fake Codebuff backend for `scenario`; stopped when the test ends. */
export async function fakeBackend(t, scenario) {
  assert.ok(
    fs.existsSync(path.join(ADAPTER, 'node_modules/@codebuff/sdk')),
    `run npm ci in ${ADAPTER} first`,
  )
  const child = spawn('node', ['test/fake-backend.mjs', '--scenario', scenario, '--port', '0'], {
    cwd: ADAPTER,
    stdio: ['pipe', 'pipe', 'ignore'],
  })
  t.after(() => child.kill('SIGKILL'))
  const lines = readline.createInterface({ input: child.stdout })
  const url = await new Promise((resolve, reject) => {
    lines.once('line', (line) => resolve(JSON.parse(line).url))
    child.once('exit', () => reject(new Error('the fake backend exited')))
  })
  return { url }
}

/** GET `path` of the daemon's own /v1 API. */
export async function v1(daemon, path) {
  const resp = await fetch(`${daemon.url}${path}`, {
    headers: { authorization: `Bearer ${daemon.token}` },
  })
  assert.equal(resp.status, 200, `GET ${path}`)
  return resp.json()
}

/** The agent's text among the SDK's session events (its `agent_message_chunk` updates). */
export function agentText(events) {
  return events
    .filter((e) => e.sender === 'agent' && e.payload.method === 'session/update')
    .map((e) => e.payload.params.update)
    .filter((u) => u.sessionUpdate === 'agent_message_chunk')
    .map((u) => u.content.text)
    .join('')
}
