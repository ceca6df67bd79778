// Test harness: starts the real `codebuffd server` (a process session of its own, so everything
// it spawns can be found and must be gone after it stops) and the Codebuff adapter's fake
// backend; small waits and process checks (shared with `tests/acp`: `tests/support/harness.mjs`).

import { spawn } from 'node:child_process'
import readline from 'node:readline'
import assert from 'node:assert/strict'

import {
  ADAPTER,
  BIN,
  REPO,
  assertSessionGone,
  fakeBackend,
  sessionMembers,
  tempDir as scratchDir,
  waitFor,
} from '../support/harness.mjs'

export { ADAPTER, BIN, REPO, fakeBackend, sessionMembers, waitFor }

/** A scratch directory, removed when the test ends. */
export function tempDir(t, tag) {
  return scratchDir(t, `acp-http-${tag}`)
}

/**
 * Starts `codebuffd server` on a free loopback port with a token; `stop()` sends SIGTERM,
 * expects exit 0 and asserts that nothing the daemon started is left.
 */
export async function startDaemon(t, { token = 'acp-http-token', args = [], env = {} } = {}) {
  const dataDir = tempDir(t, 'data')
  const work = tempDir(t, 'cwd')
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
    await assertSessionGone(child.pid, 10_000)
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
