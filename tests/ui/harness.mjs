// Test harness of the inspector's browser tests: the real `codebuffd server` (debug build, mock
// agent, a data directory of its own, in a process session of its own so that everything it
// starts can be checked gone), Debian's Chromium driven by playwright-core, a TCP proxy that can
// cut the page's connections, and small waits.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import assert from 'node:assert/strict'

import { chromium } from 'playwright-core'

export const REPO = path.resolve(import.meta.dirname, '../..')
/** The binary under test: `CODEBUFFD_BIN`, else the debug build (`CARGO_TARGET_DIR` or `target/`). */
export const BIN =
  process.env.CODEBUFFD_BIN ?? path.resolve(REPO, process.env.CARGO_TARGET_DIR ?? 'target', 'debug/codebuffd')
/** Where screenshots go (CI keeps `target/` as its artifacts). */
export const SHOTS = path.resolve(REPO, process.env.CARGO_TARGET_DIR ?? 'target', 'ui-screenshots')
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium'

const cleanups = new WeakMap()

/**
 * Runs `fn` when test `t` ends: last registered, first run (the browser closes before its
 * profile is removed, the daemon stops before its directories go), each one even if another
 * failed.
 */
export function onCleanup(t, fn) {
  let stack = cleanups.get(t)
  if (!stack) {
    stack = []
    cleanups.set(t, stack)
    t.after(async () => {
      const errors = []
      while (stack.length > 0) {
        try {
          await stack.pop()()
        } catch (e) {
          errors.push(e)
        }
      }
      if (errors.length > 0) throw errors[0]
    })
  }
  stack.push(fn)
}

/** A scratch directory, removed when the test ends. */
export function tempDir(t, tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `codebuffd-ui-${tag}-`))
  onCleanup(t, () => fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5 }))
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
    await sleep(25)
  }
}

/**
 * Starts `codebuffd server` on loopback (port 0 unless given) with its own data directory;
 * `stop()` sends SIGTERM, expects exit 0 and asserts that nothing it started is left. The test's
 * end stops it too (SIGKILL to its process group if it is still there).
 */
export async function startDaemon(t, { token = null, args = [], port = 0, dataDir = null } = {}) {
  assert.ok(fs.existsSync(BIN), `no codebuffd at ${BIN}: run \`cargo build\` (or set CODEBUFFD_BIN)`)
  dataDir ??= tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const auth = token ? ['--token', token] : ['--no-token']
  const child = spawn(
    BIN,
    ['server', '--host', '127.0.0.1', '--port', String(port), ...auth, '--data-dir', dataDir, '--workdir', work, ...args],
    {
      cwd: work,
      detached: true,
      stdio: ['ignore', 'pipe', process.env.CODEBUFFD_TEST_LOG ? 'inherit' : 'ignore'],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'warn' },
    },
  )
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const lines = readline.createInterface({ input: child.stdout })
  const url = await Promise.race([
    new Promise((resolve) => lines.once('line', (line) => resolve(JSON.parse(line).url))),
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
  onCleanup(t, async () => {
    if (stopped) return
    stopped = true
    try {
      process.kill(-child.pid, 'SIGKILL')
    } catch {}
    await exited
  })
  const daemon = { url, token, pid: child.pid, dataDir, work, stop }
  daemon.v1 = (method, p, body) => v1(daemon, method, p, body)
  return daemon
}

/** A /v1 request from the test itself (not the page): the parsed answer, asserting 2xx. */
export async function v1(daemon, method, p, body) {
  const headers = {}
  if (daemon.token) headers.authorization = `Bearer ${daemon.token}`
  if (body !== undefined) headers['content-type'] = 'application/json'
  const resp = await fetch(`${daemon.url}/v1/${p}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await resp.text()
  assert.ok(resp.ok, `${method} /v1/${p}: ${resp.status} ${text}`)
  return text ? JSON.parse(text) : null
}

/** Waits until session `id`'s status is one of `statuses`; its info. */
export function waitStatus(daemon, id, statuses, limitMs = 30_000) {
  return waitFor(`session ${id} ${statuses.join('|')}`, async () => {
    const info = await v1(daemon, 'GET', `sessions/${id}`)
    return statuses.includes(info.status) ? info : null
  }, limitMs)
}

/**
 * Debian's Chromium, headless, with a fresh profile; closed when the test file ends. The flags
 * keep it off the network (this machine refuses connections beyond loopback).
 */
export async function launchBrowser(t, tag = 'browser') {
  assert.ok(fs.existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM)`)
  const profile = tempDir(t, `profile-${tag}`)
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 800 },
  })
  onCleanup(t, () => browser.close())
  return browser
}

/**
 * A new page whose console errors, page errors and CSP violations are collected; `clean()`
 * asserts there were none.
 */
export async function openPage(context, url, { viewport, colorScheme } = {}) {
  const page = await context.newPage()
  if (viewport) await page.setViewportSize(viewport)
  if (colorScheme) await page.emulateMedia({ colorScheme })
  const problems = []
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`))
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource|ERR_CONNECTION|net::ERR_/.test(m.text())) {
      problems.push(`console: ${m.text()}`)
    }
  })
  await page.goto(url)
  page.clean = () => assert.deepEqual(problems, [], 'the page reported no errors')
  page.problems = problems
  return page
}

/** Saves a screenshot under target/ui-screenshots/ and returns its path. */
export async function screenshot(page, name, options = {}) {
  fs.mkdirSync(SHOTS, { recursive: true })
  const file = path.join(SHOTS, name)
  await page.screenshot({ path: file, ...options })
  return file
}

/**
 * A TCP proxy on loopback to `target` (a URL): the page talks to the daemon through it, and
 * `cut()` drops every connection open now (both ends), as a network failure would.
 */
export async function cuttingProxy(t, target) {
  const { hostname, port } = new URL(target)
  const open = new Set()
  let connections = 0
  const server = net.createServer((client) => {
    connections++
    const upstream = net.connect(Number(port), hostname)
    const pair = [client, upstream]
    open.add(pair)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      open.delete(pair)
    }
    client.on('error', drop).on('close', drop)
    upstream.on('error', drop).on('close', drop)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(
    t,
    () =>
      new Promise((resolve) => {
        for (const [a, b] of open) {
          a.destroy()
          b.destroy()
        }
        server.close(resolve)
        // A connection the browser opens meanwhile must not hold the test open.
        setTimeout(resolve, 2000).unref()
      }),
  )
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    cut() {
      const n = open.size
      for (const [a, b] of [...open]) {
        a.destroy()
        b.destroy()
      }
      open.clear()
      return n
    },
    get connections() {
      return connections
    },
  }
}
