// `acpx`, the headless ACP client, runs `codebuffd acp` exactly as a user would configure it
// (`--agent '<command line>'`): one-shot prompts, and persistent sessions side by side on one
// data directory (each kept by an acpx queue owner holding its own `codebuffd acp`).

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

import { BIN, assertSessionGone, exited, fakeBackend, sessionMembers, tempDir } from './harness.mjs'

const ACPX = path.join(import.meta.dirname, 'node_modules/.bin/acpx')

/** Runs acpx in a process session of its own; resolves to {code, stdout, stderr} once it and
 * everything it started in that session are gone (a queue owner runs in a session of its own).
 * `home` is acpx's `HOME` (where it keeps its sessions): a fresh one unless given. */
async function acpx(t, args, { env = {}, home = tempDir(t, 'home') } = {}) {
  const child = spawn(ACPX, args, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, HOME: home, ...env },
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (c) => (stdout += c))
  child.stderr.on('data', (c) => (stderr += c))
  const code = await exited(child, 60_000)
  await assertSessionGone(child.pid)
  return { code, stdout, stderr }
}

test('acpx exec: a one-shot prompt, its answer on stdout', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const agent = `${BIN} acp --agent mock --data-dir ${data}`
  const quiet = await acpx(t, ['--agent', agent, '--approve-all', '--format', 'quiet', '--cwd', work, 'exec', 'echo hello from acpx'])
  assert.equal(quiet.code, 0, quiet.stderr)
  assert.equal(quiet.stdout.trim(), 'hello from acpx')

  const json = await acpx(t, ['--agent', agent, '--approve-all', '--format', 'json', '--cwd', work, 'exec', 'tools via acpx'])
  assert.equal(json.code, 0, json.stderr)
  const messages = json.stdout.trim().split('\n').map((l) => JSON.parse(l))
  const updates = messages.filter((m) => m.method === 'session/update').map((m) => m.params.update)
  const statuses = updates
    .filter((u) => u.sessionUpdate === 'tool_call_update' && u.content)
    .map((u) => u.status)
  assert.deepEqual(statuses, ['completed', 'failed', 'completed'])
  const result = messages.find((m) => m.result?.stopReason)
  assert.equal(result.result.stopReason, 'end_turn')
  assert.equal(fs.readFileSync(path.join(work, 'hello.txt'), 'utf8'), 'via acpx\n')
})

test('acpx exec with the codebuff agent against the fake backend', async (t) => {
  const backend = await fakeBackend(t, 'text')
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const run = await acpx(
    t,
    ['--agent', `${BIN} acp --data-dir ${data}`, '--format', 'quiet', '--cwd', work, 'exec', 'Say hello.'],
    { env: { CODEBUFFD_TEST_BACKEND_URL: backend.url, CODEBUFF_API_KEY: 'test-key' } },
  )
  assert.equal(run.code, 0, run.stderr)
  assert.equal(run.stdout.trim(), 'Hello from the fake model.')
})

test('acpx exec without a key shows where to get one and the mock', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const run = await acpx(
    t,
    ['--agent', `${BIN} acp --data-dir ${data}`, '--format', 'quiet', '--cwd', work, 'exec', 'Say hello.'],
    { env: { CODEBUFF_API_KEY: '' } },
  )
  assert.notEqual(run.code, 0)
  const said = run.stdout + run.stderr
  assert.match(said, /https:\/\/www\.codebuff\.com\/api-keys/)
  assert.match(said, /--agent mock/)
})

/** What the mock agent's `spend 10` says (its deltas; a turn of half a second). */
const STEPS = Array.from({ length: 10 }, (_, i) => `step ${i + 1};`).join(' ')

/** The queue owners acpx runs for the sessions under `home` (its lock files): `{pid, sessionId}`
 * of each. */
function queueOwners(home) {
  const dir = path.join(home, '.acpx', 'queues')
  if (!fs.existsSync(dir)) return []
  const owners = []
  for (const name of fs.readdirSync(dir).filter((n) => n.endsWith('.lock'))) {
    try {
      const lock = JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8'))
      owners.push({ pid: lock.pid, sessionId: lock.sessionId })
    } catch {
      // Being written or removed right now.
    }
  }
  return owners.sort((a, b) => a.pid - b.pid)
}

/** The `codebuffd acp` processes in process session `sid` (a queue owner's). */
function agentsIn(sid) {
  return sessionMembers(sid).filter((pid) => {
    try {
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      return argv[0] === BIN && argv[1] === 'acp'
    } catch {
      return false
    }
  })
}

/** The sessions `acpx sessions list` reports (it asks the agent, `session/list`), by id. */
async function listed(t, base, home) {
  const run = await acpx(t, [...base, '--format', 'json', 'sessions', 'list'], { home })
  assert.equal(run.code, 0, run.stderr)
  const out = JSON.parse(run.stdout.trim().split('\n').at(-1))
  assert.equal(out.source, 'agent', run.stdout)
  return new Map(out.sessions.map((s) => [s.sessionId, s]))
}

test('acpx: two persistent sessions on one data directory, prompted in parallel, listed while both live', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const home = tempDir(t, 'home')
  const base = ['--agent', `${BIN} acp --agent mock --data-dir ${data}`, '--cwd', work]
  const seen = new Set()
  t.after(async () => {
    // Only after a failure is anything left: the queue owners and what runs in their sessions.
    for (const sid of seen) {
      for (const pid of sessionMembers(sid)) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
      }
    }
    fs.rmSync(`/tmp/acpx-${createHash('sha256').update(home).digest('hex').slice(0, 10)}`, {
      recursive: true,
      force: true,
    })
  })
  const names = ['one', 'two']

  // Two named sessions, created at once: each `sessions new` runs its own codebuffd acp.
  const created = await Promise.all(
    names.map((name) => acpx(t, [...base, '--format', 'json', 'sessions', 'new', '--name', name], { home })),
  )
  const ids = created.map((run, i) => {
    assert.equal(run.code, 0, run.stderr)
    const ensured = JSON.parse(run.stdout.trim().split('\n').at(-1))
    assert.equal(ensured.action, 'session_ensured', run.stdout)
    assert.equal(ensured.name, names[i])
    return ensured.acpxSessionId
  })
  assert.notEqual(ids[0], ids[1])

  // A prompt to each, in parallel: acpx starts a queue owner per session, each with its own
  // codebuffd acp on the one data directory, and keeps it after the prompt returns.
  const first = await Promise.all(
    names.map((name) =>
      acpx(t, [...base, '--format', 'quiet', 'prompt', '-s', name, `echo first answer of ${name}`], { home }),
    ),
  )
  first.forEach((run, i) => {
    assert.equal(run.code, 0, run.stderr)
    assert.equal(run.stdout.trim(), `first answer of ${names[i]}`)
  })
  const owners = queueOwners(home)
  owners.forEach((o) => seen.add(o.pid))
  assert.equal(owners.length, 2, JSON.stringify(owners))
  assert.deepEqual(owners.map((o) => o.sessionId).sort(), [...ids].sort())
  const engines = owners.map((o) => agentsIn(o.pid))
  for (const agents of engines) assert.equal(agents.length, 1, `codebuffd acp per queue owner: ${engines}`)

  // `sessions list` (a third codebuffd acp) while both queue owners' engines live: both
  // sessions, each with its turn.
  const during = await listed(t, base, home)
  for (const id of ids) {
    assert.ok(during.has(id), `${id} not listed: ${JSON.stringify([...during.keys()])}`)
    assert.equal(during.get(id)._meta.codebuff.turns, 1, JSON.stringify(during.get(id)))
    assert.equal(during.get(id).cwd, work)
  }
  assert.equal(during.size, 2)

  // Second prompts, in parallel again, overlapping (each takes half a second), through the
  // same queue owners and engines.
  const second = await Promise.all(
    names.map((name) => acpx(t, [...base, '--format', 'quiet', 'prompt', '-s', name, 'spend 10'], { home })),
  )
  second.forEach((run) => {
    assert.equal(run.code, 0, run.stderr)
    assert.equal(run.stdout.trim(), STEPS)
  })
  assert.deepEqual(queueOwners(home), owners)
  assert.deepEqual(
    owners.map((o) => agentsIn(o.pid)),
    engines,
  )
  const after = await listed(t, base, home)
  for (const id of ids) {
    assert.equal(after.get(id)._meta.codebuff.turns, 2, JSON.stringify(after.get(id)))
    assert.equal(after.get(id)._meta.codebuff.status, 'idle')
  }

  // Closed through acpx: each queue owner stops, with its codebuffd acp and all it started.
  for (const name of names) {
    const closed = await acpx(t, [...base, '--format', 'json', 'sessions', 'close', name], { home })
    assert.equal(closed.code, 0, closed.stderr)
    assert.equal(JSON.parse(closed.stdout.trim().split('\n').at(-1)).action, 'session_closed')
  }
  for (const owner of owners) await assertSessionGone(owner.pid)
  assert.deepEqual(queueOwners(home), [])
})

test('acpx exec: two one-shot prompts at once on one data directory', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const base = ['--agent', `${BIN} acp --agent mock --data-dir ${data}`, '--cwd', work]
  const runs = await Promise.all(
    ['a', 'b'].map((tag) => acpx(t, [...base, '--format', 'quiet', 'exec', 'spend 10']).then((r) => ({ tag, ...r }))),
  )
  for (const run of runs) {
    assert.equal(run.code, 0, `${run.tag}: ${run.stderr}`)
    assert.equal(run.stdout.trim(), STEPS)
  }
  // Both exec sessions are in the one log.
  const list = await listed(t, base, tempDir(t, 'home'))
  assert.equal(list.size, 2, JSON.stringify([...list.values()]))
  for (const s of list.values()) assert.equal(s._meta.codebuff.turns, 1)
})
