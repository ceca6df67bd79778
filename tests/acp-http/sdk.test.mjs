// The unmodified sandbox-agent TypeScript SDK (and its acp-http-client) against codebuffd's
// /v1/acp: code written for sandbox-agent drives Codebuff unchanged.

import test from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'

import { SandboxAgent, SandboxAgentError } from 'sandbox-agent'

import { agentText, fakeBackend, sessionMembers, startDaemon, tempDir, v1, waitFor } from './harness.mjs'

test('mock: health, agents, a session with prompts, events, permissions, destroy, dispose', async (t) => {
  const daemon = await startDaemon(t, { args: ['--permission-mode', 'default'] })
  const work = tempDir(t, 'work')
  const sdk = await SandboxAgent.connect({ baseUrl: daemon.url, token: daemon.token })
  t.after(() => sdk.dispose())

  assert.equal((await sdk.getHealth()).status, 'ok')
  const { agents } = await sdk.listAgents()
  assert.deepEqual(agents.map((a) => a.id).sort(), ['codebuff', 'mock'])
  for (const agent of agents) {
    assert.equal(typeof agent.installed, 'boolean')
    assert.equal(typeof agent.credentialsAvailable, 'boolean')
    assert.equal(agent.capabilities.permissions, true)
    assert.equal(agent.capabilities.streamingDeltas, true)
  }

  const session = await sdk.createSession({ agent: 'mock', cwd: work })
  const events = []
  session.onEvent((e) => events.push(e))
  assert.equal(session.agent, 'mock')
  assert.ok(session.agentSessionId, 'the agent session id is the ACP session id')
  // An ordinary codebuffd session, visible in /v1/sessions.
  const listed = await v1(daemon, '/v1/sessions')
  assert.ok(listed.sessions.some((s) => s.sessionId === session.agentSessionId && s.agent === 'mock'))

  const answer = await session.prompt([{ type: 'text', text: 'stream Hello from the SDK' }])
  assert.equal(answer.stopReason, 'end_turn')
  await waitFor('the streamed answer', () => agentText(events) === 'Hello from the SDK')
  // getEvents: what the SDK recorded of the session, both directions. The SDK records what it
  // observes in the background (one queue per session), so the prompt's answer may be recorded
  // a moment after the last chunk's listener ran: wait for it.
  const recorded = await waitFor('the answer recorded by the SDK', async () => {
    const page = await sdk.getEvents({ sessionId: session.id, limit: 1000 })
    return page.items.some((e) => e.sender === 'agent' && e.payload.result?.stopReason === 'end_turn') && page
  })
  assert.ok(recorded.items.some((e) => e.sender === 'client' && e.payload.method === 'session/prompt'))
  assert.equal(agentText(recorded.items), 'Hello from the SDK')

  // Permissions: the mock's `gated` asks before a write and before a command.
  const asked = []
  session.onPermissionRequest((request) => {
    asked.push(request)
    void session.respondPermission(request.id, asked.length === 1 ? 'once' : 'reject')
  })
  const gated = await session.prompt([{ type: 'text', text: 'gated' }])
  assert.equal(gated.stopReason, 'end_turn')
  assert.equal(asked.length, 2)
  assert.deepEqual(asked[0].availableReplies.sort(), ['always', 'once', 'reject'])
  assert.equal(asked[0].toolCall.kind, 'edit')
  assert.equal(fs.readFileSync(path.join(work, 'gated.txt'), 'utf8'), 'gated\n', 'the allowed write ran')
  assert.equal(fs.existsSync(path.join(work, 'gated-cmd.txt')), false, 'the rejected command did not')

  const { servers } = await sdk.listAcpServers()
  assert.equal(servers.length, 1)
  assert.equal(servers[0].agent, 'mock')
  const sessions = await sdk.listSessions()
  assert.deepEqual(sessions.items.map((s) => s.id), [session.id])

  const destroyed = await sdk.destroySession(session.id)
  assert.ok(destroyed.destroyedAt)
  await sdk.dispose()
  // dispose() deleted the server (its DELETE gives up after 2 s; the deletion goes on): its
  // session ended, no agent process is left.
  await waitFor('the server gone', async () => (await v1(daemon, '/v1/acp')).servers.length === 0)
  await waitFor(
    'its session ended',
    async () => (await v1(daemon, `/v1/sessions/${session.agentSessionId}`)).ended,
  )
  await waitFor('no agent left', () => sessionMembers(daemon.pid).every((p) => p === daemon.pid))
  await daemon.stop()
})

test('codebuff: the same SDK against the real adapter and its fake backend', async (t) => {
  const backend = await fakeBackend(t, 'text')
  const home = tempDir(t, 'home')
  const daemon = await startDaemon(t, {
    env: { CODEBUFFD_TEST_BACKEND_URL: backend.url, CODEBUFF_API_KEY: 'test-key', HOME: home },
  })
  const work = tempDir(t, 'work')
  const sdk = await SandboxAgent.connect({ baseUrl: daemon.url, token: daemon.token })
  t.after(() => sdk.dispose())
  const codebuff = (await sdk.listAgents()).agents.find((a) => a.id === 'codebuff')
  assert.equal(codebuff.credentialsAvailable, true)

  const session = await sdk.createSession({ agent: 'codebuff', cwd: work })
  const events = []
  session.onEvent((e) => events.push(e))
  const answer = await session.prompt([{ type: 'text', text: 'Say hello.' }])
  assert.equal(answer.stopReason, 'end_turn')
  await waitFor('the streamed answer', () => agentText(events) === 'Hello from the fake model.')
  const usage = await waitFor('the usage update', () =>
    events
      .map((e) => e.payload.params?.update)
      .find((u) => u?.sessionUpdate === 'usage_update'),
  )
  assert.equal(usage.cost.currency, 'USD')
  const info = await v1(daemon, `/v1/sessions/${session.agentSessionId}`)
  assert.equal(info.agent, 'codebuff')
  assert.ok(info.cost.credits > 0)

  await sdk.destroySession(session.id)
  await sdk.dispose()
  await waitFor('no agent left', () => sessionMembers(daemon.pid).every((p) => p === daemon.pid))
  await daemon.stop()
})

test('a wrong token is refused with the problem the SDK reports', async (t) => {
  const daemon = await startDaemon(t)
  const sdk = await SandboxAgent.connect({ baseUrl: daemon.url, token: 'wrong', skipHealthCheck: true })
  t.after(() => sdk.dispose())
  await assert.rejects(sdk.listAgents(), (e) => {
    assert.ok(e instanceof SandboxAgentError)
    assert.equal(e.status, 401)
    assert.equal(e.problem.type, 'urn:sandbox-agent:error:token_invalid')
    return true
  })
  // The ACP routes too (createSession's first POST; the SDK's transport then fails by itself
  // with an unhandled rejection, so the route is asked directly).
  const resp = await fetch(`${daemon.url}/v1/acp/s1?agent=mock`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer wrong' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 1 } }),
  })
  assert.equal(resp.status, 401)
  assert.deepEqual((await v1(daemon, '/v1/acp')).servers, [])
  await daemon.stop()
})
