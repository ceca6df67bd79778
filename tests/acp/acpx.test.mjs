// `acpx`, the headless ACP client, runs a one-shot prompt through `codebuffd acp` exactly as a
// user would configure it (`--agent '<command line>'`).

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

import { BIN, assertSessionGone, exited, fakeBackend, tempDir } from './harness.mjs'

const ACPX = path.join(import.meta.dirname, 'node_modules/.bin/acpx')

/** Runs acpx in a process session of its own; resolves to {code, stdout, stderr} once it and
 * everything it started are gone. */
async function acpx(t, args, env = {}) {
  const home = tempDir(t, 'home')
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
    { CODEBUFFD_TEST_BACKEND_URL: backend.url, CODEBUFF_API_KEY: 'test-key' },
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
    { CODEBUFF_API_KEY: '' },
  )
  assert.notEqual(run.code, 0)
  const said = run.stdout + run.stderr
  assert.match(said, /https:\/\/www\.codebuff\.com\/api-keys/)
  assert.match(said, /--agent mock/)
})
