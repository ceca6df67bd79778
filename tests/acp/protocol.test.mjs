// Bad input never takes `codebuffd acp` down: malformed JSON-RPC, unknown methods, invalid
// params, unknown sessions, and a client that goes away mid-turn.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { RawAgent, assertSessionGone, exited, sessionMembers, tempDir } from './harness.mjs'

test('malformed lines, batches, unknown methods and early requests get JSON-RPC errors', async (t) => {
  const data = tempDir(t, 'data')
  const raw = RawAgent.start(t, { dataDir: data })
  // Before initialize.
  const early = await raw.call(1, 'session/new', { cwd: data, mcpServers: [] })
  assert.equal(early.error.code, -32600)

  const init = await raw.initialize()
  assert.equal(init.result.protocolVersion, 1)

  raw.send('{"jsonrpc":"2.0","id":2,"method":')
  const parse = await raw.next((m) => m.error?.code === -32700)
  assert.equal(parse.id, null)

  raw.send('[{"jsonrpc":"2.0","id":3,"method":"session/list","params":{}}]')
  const batch = await raw.next((m) => m.id === null && m.error?.code === -32600)
  assert.ok(batch)

  const unknown = await raw.call(4, 'session/fly', {})
  assert.equal(unknown.error.code, -32601)
  const ext = await raw.call(5, '_codebuff/nothing', {})
  assert.equal(ext.error.code, -32601)

  const noCwd = await raw.call(6, 'session/new', { mcpServers: [] })
  assert.equal(noCwd.error.code, -32602)
  const relative = await raw.call(7, 'session/new', { cwd: 'relative/dir', mcpServers: [] })
  assert.equal(relative.error.code, -32602)
  const missingDir = await raw.call(8, 'session/new', { cwd: '/no/such/dir', mcpServers: [] })
  assert.equal(missingDir.error.code, -32602)
  assert.match(JSON.stringify(missingDir.error.data), /director/)
  const own = await raw.call(10, 'session/new', { cwd: data, mcpServers: [] })
  assert.equal(own.error.code, -32602, "the daemon's own data directory is refused")

  // A notification of an unknown method is ignored; the agent still answers.
  raw.send({ jsonrpc: '2.0', method: 'session/whatever', params: {} })
  const ok = await raw.call(9, 'session/list', {})
  assert.ok(Array.isArray(ok.result.sessions))
  assert.deepEqual(raw.nonJson, [], 'stdout carries only JSON-RPC')
})

test('unknown session ids are resource not found (-32002) for every session method', async (t) => {
  const data = tempDir(t, 'data')
  const raw = RawAgent.start(t, { dataDir: data })
  await raw.initialize()
  const nope = 'no-such-session'
  const calls = [
    ['session/prompt', { sessionId: nope, prompt: [{ type: 'text', text: 'hi' }] }],
    ['session/load', { sessionId: nope, cwd: data, mcpServers: [] }],
    ['session/resume', { sessionId: nope, cwd: data, mcpServers: [] }],
    ['session/close', { sessionId: nope }],
    ['session/set_mode', { sessionId: nope, modeId: 'max' }],
  ]
  let id = 10
  for (const [method, params] of calls) {
    const res = await raw.call(id++, method, params)
    assert.equal(res.error?.code, -32002, `${method}: ${JSON.stringify(res)}`)
    assert.equal(res.error.data.sessionId, nope, method)
  }
  // A cancel of an unknown session is a notification: nothing to answer, nothing breaks.
  raw.send({ jsonrpc: '2.0', method: 'session/cancel', params: { sessionId: nope } })
  const bad = await raw.call(id++, 'session/prompt', { sessionId: 42 })
  assert.equal(bad.error.code, -32602)
})

test('a client that closes stdin mid-turn: the agent is killed, exit 0, nothing left', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const raw = RawAgent.start(t, { dataDir: data })
  await raw.initialize()
  const created = await raw.call(1, 'session/new', { cwd: work, mcpServers: [] })
  const sessionId = created.result.sessionId
  raw.send({
    jsonrpc: '2.0',
    id: 2,
    method: 'session/prompt',
    params: { sessionId, prompt: [{ type: 'text', text: 'hang' }] },
  })
  for (let i = 0; i < 200 && sessionMembers(raw.sid).length < 2; i++) await sleep(10)
  assert.ok(sessionMembers(raw.sid).length >= 2, 'the turn runs')
  const started = Date.now()
  raw.child.stdin.end()
  const code = await exited(raw.child)
  assert.equal(code, 0)
  assert.ok(Date.now() - started < 10_000, `exited in ${Date.now() - started} ms`)
  await assertSessionGone(raw.sid)
})

test('SIGTERM ends the agent cleanly too', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const raw = RawAgent.start(t, { dataDir: data })
  await raw.initialize()
  const created = await raw.call(1, 'session/new', { cwd: work, mcpServers: [] })
  raw.send({
    jsonrpc: '2.0',
    id: 2,
    method: 'session/prompt',
    params: { sessionId: created.result.sessionId, prompt: [{ type: 'text', text: 'hang' }] },
  })
  await sleep(300)
  raw.child.kill('SIGTERM')
  assert.equal(await exited(raw.child), 0)
  await assertSessionGone(raw.sid)
})
