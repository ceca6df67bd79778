// What the Node suites that drive the real binary share (`tests/acp`, `tests/acp-http`): where
// the binary and the adapter are, scratch directories, waits, the process checks that nothing a
// daemon started outlives it, and the Codebuff adapter's fake backend.
//
// Node's standard library only: each suite has its own package.json and `npm ci`, and this
// module, imported by a relative path, needs neither.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import assert from 'node:assert/strict'

export const REPO = path.resolve(import.meta.dirname, '../..')
/** The Codebuff adapter (its fake backend is `test/fake-backend.mjs`). */
export const ADAPTER = path.join(REPO, 'adapters/codebuff')
/** The binary under test: `CODEBUFFD_BIN`, else the debug build where cargo puts it
 * (`CARGO_TARGET_DIR`, relative to the checkout, or `target/`). */
export const BIN =
  process.env.CODEBUFFD_BIN ??
  path.resolve(REPO, process.env.CARGO_TARGET_DIR ?? 'target', 'debug/codebuffd')
if (!fs.existsSync(BIN)) {
  throw new Error(`no codebuffd at ${BIN}: run \`cargo build\` (or set CODEBUFFD_BIN)`)
}

/** A scratch directory `codebuffd-<tag>-…`, removed when the test ends. */
export function tempDir(t, tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `codebuffd-${tag}-`))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** The pids of the live (not zombie) members of process session `sid`. */
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
    // fields[0] is the state, fields[3] the session id.
    if (Number(fields[3]) === sid && fields[0] !== 'Z') pids.push(Number(entry))
  }
  return pids
}

/** Waits until nothing is left in process session `sid`; fails with what is left. */
export async function assertSessionGone(sid, limitMs = 10_000) {
  const deadline = Date.now() + limitMs
  let left = sessionMembers(sid)
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(25)
    left = sessionMembers(sid)
  }
  assert.deepEqual(left, [], `processes left in session ${sid}: ${describe(left)}`)
}

function describe(pids) {
  return pids
    .map((p) => {
      try {
        return `${p} ${fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').replaceAll('\0', ' ')}`
      } catch {
        return `${p}`
      }
    })
    .join('; ')
}

/** Polls `check` until it returns a truthy value, which it returns (fails after `limitMs`). */
export async function waitFor(what, check, limitMs = 30_000) {
  const deadline = Date.now() + limitMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

/** Waits for `child` to exit; its exit code (or signal name). */
export function exited(child, limitMs = 20_000) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve(child.exitCode ?? child.signalCode)
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`pid ${child.pid} did not exit`)), limitMs)
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      resolve(code ?? signal)
    })
  })
}

/**
 * The adapter's fake Codebuff backend for `scenario` (a key of its `test/scenarios.mjs`),
 * stopped when the test ends: `url` for `CODEBUFFD_TEST_BACKEND_URL`, and `chatRequests()`, the
 * bodies of the chat completions it was asked for.
 */
export async function fakeBackend(t, scenario) {
  assert.ok(
    fs.existsSync(path.join(ADAPTER, 'node_modules/@codebuff/sdk')),
    `run \`npm ci\` in ${ADAPTER} first`,
  )
  const child = spawn('node', ['test/fake-backend.mjs', '--scenario', scenario, '--port', '0'], {
    cwd: ADAPTER,
    stdio: ['pipe', 'pipe', process.env.CODEBUFFD_TEST_LOG ? 'inherit' : 'ignore'],
  })
  t.after(async () => {
    child.kill('SIGTERM')
    await exited(child).catch(() => child.kill('SIGKILL'))
  })
  const line = await new Promise((resolve, reject) => {
    readline.createInterface({ input: child.stdout }).once('line', resolve)
    child.once('exit', () => reject(new Error('the fake backend exited')))
  })
  const url = JSON.parse(line).url
  return {
    url,
    async chatRequests() {
      const all = await (await fetch(`${url}/__requests`)).json()
      return all
        .filter((r) => r.method === 'POST' && r.path === '/api/v1/chat/completions')
        .map((r) => r.body)
    },
  }
}
