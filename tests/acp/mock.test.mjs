// `codebuffd acp --agent mock` through the official TypeScript SDK: every mock scenario that
// means something to an ACP client, asserted on what the client sees.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

import {
  AcpAgent,
  FULL_CAPS,
  acp,
  agentText,
  exited,
  kinds,
  spawnAgent,
  tempDir,
  thoughtText,
  toolCalls,
} from './harness.mjs'

/** A mock agent, a session working in a scratch directory, and that directory. */
async function session(t, options = {}) {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const agent = await AcpAgent.start(t, { dataDir: data, ...options })
  const id = await agent.newSession(work)
  return { agent, id, work, data }
}

function usage(updates) {
  return updates.filter((u) => u.sessionUpdate === 'usage_update')
}

test('initialize advertises what works', async (t) => {
  const data = tempDir(t, 'data')
  const agent = await AcpAgent.start(t, { dataDir: data })
  const init = agent.init
  assert.equal(init.protocolVersion, 1)
  assert.equal(init.agentInfo.name, 'codebuffd')
  assert.equal(init.agentCapabilities.loadSession, true)
  assert.equal(init.agentCapabilities.promptCapabilities.image, true)
  assert.equal(init.agentCapabilities.promptCapabilities.embeddedContext, true)
  assert.equal(init.agentCapabilities.promptCapabilities.audio, false)
  assert.deepEqual(init.agentCapabilities.sessionCapabilities, { list: {}, resume: {}, close: {} })
  assert.deepEqual(init.authMethods, [], 'the mock needs no key')
  const work = tempDir(t, 'work')
  const modes = (await agent.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] })).modes
  assert.equal(modes.currentModeId, 'build')
  assert.deepEqual(
    modes.availableModes.map((m) => m.id),
    ['build', 'free', 'max', 'plan'],
  )
  await agent.stop()
})

test('echo: the answer as message chunks, end_turn, the cost as usage', async (t) => {
  const { agent, id } = await session(t)
  const { response } = await agent.prompt(id, 'echo hello there')
  assert.equal(response.stopReason, 'end_turn')
  const updates = agent.updatesOf(id)
  assert.equal(agentText(updates), 'hello there')
  assert.ok(!updates.some((u) => u.sessionUpdate === 'user_message_chunk'), 'the prompt is not echoed back live')
  const [u] = usage(updates)
  assert.deepEqual(u.cost, { amount: 0.0125, currency: 'USD' })
  assert.equal(u._meta.codebuff.credits, 1.25)
  assert.equal(u._meta.codebuff.turn.status, 'completed')
  // The cost is the session's: it adds up.
  await agent.prompt(id, 'echo again')
  const all = usage(agent.updatesOf(id))
  assert.equal(all.length, 2)
  assert.deepEqual(all[1].cost, { amount: 0.025, currency: 'USD' })
  assert.equal(all[1]._meta.codebuff.credits, 2.5)
  await agent.stop()
})

test('stream: streamed chunks of one message, in order, as they are written', async (t) => {
  const { agent, id } = await session(t)
  const text = 'one two three four five six seven'
  const { response } = await agent.prompt(id, `stream ${text}`)
  assert.equal(response.stopReason, 'end_turn')
  const chunks = agent.updatesOf(id).filter((u) => u.sessionUpdate === 'agent_message_chunk')
  assert.equal(new Set(chunks.map((c) => c.messageId)).size, 1, 'one message id')
  assert.equal(agentText(chunks), text)

  // Paced deltas (20 a second apart of 10 ms) reach the client one by one, as they come.
  const before = agent.updates.length
  await agent.prompt(id, 'flood 20 100')
  const paced = agent
    .updatesOf(id, before)
    .filter((u) => u.sessionUpdate === 'agent_message_chunk' && /^\d+:\d+;/.test(u.content.text))
  assert.ok(paced.length >= 15, `${paced.length} chunks for 20 paced deltas`)
  const indexes = paced.flatMap((u) => u.content.text.split(';').filter(Boolean).map((d) => Number(d.split(':')[0])))
  assert.deepEqual(indexes, [...Array(20).keys()])
  await agent.stop()
})

test('a flood arrives whole and in order (merged into fewer chunks when the client is behind)', async (t) => {
  const { agent, id } = await session(t)
  const { response } = await agent.prompt(id, 'flood 5000')
  assert.equal(response.stopReason, 'end_turn')
  const chunks = agent.updatesOf(id).filter((u) => u.sessionUpdate === 'agent_message_chunk')
  const indexes = chunks.flatMap((u) =>
    u.content.text
      .split(';')
      .filter((d) => /^\d+:\d+$/.test(d))
      .map((d) => Number(d.split(':')[0])),
  )
  assert.equal(indexes.length, 5000)
  assert.ok(indexes.every((v, i) => v === i), 'in order, none lost')
  assert.equal(new Set(chunks.map((c) => c.messageId)).size, 1)
  await agent.stop()
})

test('reasoning: thought chunks, then the answer', async (t) => {
  const { agent, id } = await session(t)
  const { response } = await agent.prompt(id, 'reasoning')
  assert.equal(response.stopReason, 'end_turn')
  const updates = agent.updatesOf(id)
  assert.equal(thoughtText(updates), 'Let me think about the question step by step.')
  assert.equal(agentText(updates), 'The answer is 42.')
  assert.deepEqual(kinds(updates), ['agent_thought_chunk', 'agent_message_chunk', 'usage_update'])
  await agent.stop()
})

test('tools: kinds, locations, statuses, a diff, command output, a failure', async (t) => {
  const { agent, id, work } = await session(t)
  const { response } = await agent.prompt(id, 'tools Hi from ACP')
  assert.equal(response.stopReason, 'end_turn')
  assert.equal(fs.readFileSync(path.join(work, 'hello.txt'), 'utf8'), 'Hi from ACP\n')
  const calls = toolCalls(agent.updatesOf(id))
  assert.equal(calls.length, 3)
  const [write, patch, run] = calls
  assert.equal(write.title, 'Write hello.txt')
  assert.equal(write.kind, 'edit')
  assert.deepEqual(write.locations, [{ path: path.join(work, 'hello.txt') }])
  assert.deepEqual(write.statuses, ['pending', 'in_progress', 'completed'])
  assert.deepEqual(write.content, [
    { type: 'diff', path: path.join(work, 'hello.txt'), newText: 'Hi from ACP\n' },
  ])
  assert.equal(write.rawInput.content, 'Hi from ACP\n')
  assert.equal(write._meta.codebuff.toolName, 'write_file')

  assert.equal(patch.kind, 'edit')
  assert.deepEqual(patch.statuses, ['pending', 'in_progress', 'failed'])
  assert.match(patch.content[0].content.text, /does not exist/)

  assert.equal(run.kind, 'execute')
  assert.equal(run.title, 'Run `echo mock-tools`')
  assert.deepEqual(run.statuses, ['pending', 'in_progress', 'completed'])
  assert.equal(run.content[0].content.text, '```\nmock-tools\n```')
  assert.equal(run.rawOutput[0].value.exitCode, 0)
  await agent.stop()
})

test('tools again: an edit of an existing file has both sides', async (t) => {
  const { agent, id, work } = await session(t)
  await agent.prompt(id, 'tools first line')
  const before = agent.updates.length
  await agent.prompt(id, 'tools second line')
  const [write] = toolCalls(agent.updatesOf(id, before))
  assert.deepEqual(write.content, [
    { type: 'diff', path: path.join(work, 'hello.txt'), oldText: 'first line\n', newText: 'second line\n' },
  ])
  await agent.stop()
})

test('subagent: a tool call of kind other whose children point at it', async (t) => {
  const { agent, id, work } = await session(t)
  fs.writeFileSync(path.join(work, 'hello.txt'), 'Hello!\n')
  const { response } = await agent.prompt(id, 'subagent')
  assert.equal(response.stopReason, 'end_turn')
  const updates = agent.updatesOf(id)
  const calls = toolCalls(updates)
  const spawn = calls.find((c) => c._meta?.codebuff?.toolName === 'spawn_agents')
  const sub = calls.find((c) => c._meta?.codebuff?.subagent)
  const read = calls.find((c) => c._meta?.codebuff?.toolName === 'read_files')
  assert.ok(spawn && sub && read, JSON.stringify(calls))
  assert.equal(spawn.title, 'Spawn file-picker')
  assert.equal(sub.title, 'File Picker')
  assert.equal(sub.kind ?? 'other', 'other')
  assert.equal(sub._meta.codebuff.parentToolCallId, spawn.toolCallId)
  assert.equal(read._meta.codebuff.parentToolCallId, sub.toolCallId)
  assert.equal(read.kind, 'read')
  assert.deepEqual(read.locations, [{ path: path.join(work, 'hello.txt') }])
  assert.deepEqual(sub.statuses, ['in_progress', 'completed'])
  assert.deepEqual(sub.content, [
    { type: 'content', content: { type: 'text', text: 'hello.txt holds the greeting.' } },
  ])
  for (const c of calls) assert.equal(c.status, 'completed', `${c.title}: ${c.status}`)
  // The subagent's text is its tool call's, not the conversation's.
  assert.equal(
    agentText(updates),
    'Let me find the relevant files.The file picker says hello.txt holds the greeting.',
  )
  await agent.stop()
})

test('ask: a form (elicitation), accepted: the answers reach the agent', async (t) => {
  const { agent, id } = await session(t, {
    answer: {
      elicitation: async () => ({
        action: 'accept',
        content: { q1: 'vitest', q2: ['unit', 'snapshot'] },
      }),
    },
  })
  const { response } = await agent.prompt(id, 'ask')
  assert.equal(response.stopReason, 'end_turn')
  assert.equal(agent.requests.length, 1)
  const { method, params } = agent.requests[0]
  assert.equal(method, 'elicitation/create')
  assert.equal(params.mode, 'form')
  assert.equal(params.sessionId, id)
  const ask = toolCalls(agent.updatesOf(id)).find((c) => c._meta.codebuff.toolName === 'ask_user')
  assert.equal(params.toolCallId, ask.toolCallId, 'scoped to the ask_user tool call')
  const props = params.requestedSchema.properties
  assert.deepEqual(
    props.q1.oneOf.map((o) => o.const),
    ['vitest', 'jest'],
  )
  assert.equal(props.q2.type, 'array')
  assert.equal(props.q1_other.type, 'string')
  assert.match(agentText(agent.updatesOf(id)), /You chose: vitest; unit, snapshot/)
  await agent.stop()
})

test('ask: a free answer replaces the choice', async (t) => {
  const { agent, id } = await session(t, {
    answer: {
      elicitation: async () => ({ action: 'accept', content: { q1: 'jest', q1_other: 'node:test' } }),
    },
  })
  await agent.prompt(id, 'ask')
  assert.match(agentText(agent.updatesOf(id)), /You chose: node:test/)
  await agent.stop()
})

test('ask: a declined form skips the questions', async (t) => {
  const { agent, id } = await session(t, {
    answer: { elicitation: async () => ({ action: 'decline' }) },
  })
  const { response } = await agent.prompt(id, 'ask')
  assert.equal(response.stopReason, 'end_turn')
  assert.match(agentText(agent.updatesOf(id)), /You skipped the question/)
  await agent.stop()
})

test('ask without forms: the first question as a permission request', async (t) => {
  const { agent, id } = await session(t, {
    caps: { fs: {}, terminal: false },
    answer: {
      permission: async (params) => {
        const jest = params.options.find((o) => o.name === 'jest')
        return { outcome: { outcome: 'selected', optionId: jest.optionId } }
      },
    },
  })
  const { response } = await agent.prompt(id, 'ask')
  assert.equal(response.stopReason, 'end_turn')
  const [req] = agent.requests
  assert.equal(req.method, 'session/request_permission')
  assert.deepEqual(
    req.params.options.map((o) => [o.name, o.kind]),
    [
      ['vitest', 'allow_once'],
      ['jest', 'allow_once'],
      ['Skip', 'reject_once'],
    ],
  )
  assert.match(agentText(agent.updatesOf(id)), /You chose: jest/)
  await agent.stop()
})

test('error: a notice, then the turn goes on', async (t) => {
  const { agent, id } = await session(t)
  const { response } = await agent.prompt(id, 'error')
  assert.equal(response.stopReason, 'end_turn')
  const updates = agent.updatesOf(id)
  const notice = updates.find((u) => u.sessionUpdate === 'notice')
  assert.equal(notice.severity, 'warning')
  assert.match(notice.title, /overloaded/)
  assert.equal(agentText(updates), 'Recovered after a provider error.')
  await agent.stop()
})

test('error without notices: no notice is sent', async (t) => {
  const { agent, id } = await session(t, { caps: { ...FULL_CAPS, session: {} } })
  await agent.prompt(id, 'error')
  assert.ok(!agent.updatesOf(id).some((u) => u.sessionUpdate === 'notice'))
  await agent.stop()
})

test('fail: the prompt answers an error with the typed cause', async (t) => {
  const { agent, id } = await session(t)
  const { error } = await agent.prompt(id, 'fail')
  assert.ok(error, 'a failed turn is an error, never a silent end_turn')
  assert.equal(error.code, -32603)
  assert.match(error.message, /unreachable/)
  assert.equal(error.data.status, 'failed')
  assert.equal(error.data.code, 'backend_error')
  assert.equal(error.data.exitCode, 3)
  assert.equal(error.data.error.code, 'backend_error')
  assert.equal(
    error.data.stderrTail,
    'mock-agent: scenario Fail, agent base2\n' +
      'mock-agent: connecting to the Codebuff backend…\n' +
      'mock-agent: POST /api/v1/agent-runs failed: connection refused (mock)\n' +
      'mock-agent: giving up',
  )
  // The session goes on.
  const { response } = await agent.prompt(id, 'echo still here')
  assert.equal(response.stopReason, 'end_turn')
  await agent.stop()
})

test('crash: killed by a signal mid-stream is an error with the signal', async (t) => {
  const { agent, id } = await session(t)
  const { error } = await agent.prompt(id, 'crash')
  assert.ok(error)
  assert.equal(error.data.status, 'failed')
  assert.equal(error.data.signal, 9)
  assert.equal(error.data.stderrTail, 'mock-agent: scenario Crash, agent base2\nmock-agent: crashing (SIGKILL)')
  assert.equal(agentText(agent.updatesOf(id)), 'About to crash')
  const { response } = await agent.prompt(id, 'echo after the crash')
  assert.equal(response.stopReason, 'end_turn')
  await agent.stop()
})

test('hang + session/cancel: the prompt answers cancelled and the session goes on', async (t) => {
  const { agent, id } = await session(t)
  const hanging = agent.prompt(id, 'hang')
  await sleep(500)
  await agent.notify(acp.methods.agent.session.cancel, { sessionId: id })
  const { response } = await hanging
  assert.equal(response.stopReason, 'cancelled')
  const [u] = usage(agent.updatesOf(id))
  assert.equal(u._meta.codebuff.turn.status, 'cancelled')
  const { response: next } = await agent.prompt(id, 'echo next')
  assert.equal(next.stopReason, 'end_turn')
  await agent.stop()
})

test('a prompt while a prompt runs waits for it (queued); cancel cancels both', async (t) => {
  const { agent, id } = await session(t)
  const first = agent.prompt(id, 'stream a b c d e f')
  const second = agent.prompt(id, 'echo second')
  const [a, b] = await Promise.all([first, second])
  assert.equal(a.response.stopReason, 'end_turn')
  assert.equal(b.response.stopReason, 'end_turn')
  const texts = agent
    .updatesOf(id)
    .filter((u) => u.sessionUpdate === 'agent_message_chunk')
    .map((u) => u.content.text)
  assert.equal(texts.join(''), 'a b c d e fsecond', 'in order, not interleaved')

  const hang = agent.prompt(id, 'hang')
  const queued = agent.prompt(id, 'echo never')
  await sleep(500)
  await agent.notify(acp.methods.agent.session.cancel, { sessionId: id })
  const [h, q] = await Promise.all([hang, queued])
  assert.equal(h.response.stopReason, 'cancelled')
  assert.equal(q.response.stopReason, 'cancelled')
  assert.ok(!agentText(agent.updatesOf(id)).includes('never'))
  await agent.stop()
})

test('a question pending at cancel is withdrawn from the client', async (t) => {
  const { agent, id } = await session(t, {
    answer: {
      // Never answers: waits until the request is cancelled.
      elicitation: (_params, signal) =>
        new Promise((resolve) => signal.addEventListener('abort', () => resolve({ action: 'cancel' }))),
    },
  })
  const asking = agent.prompt(id, 'ask')
  const req = await agent.waitForRequests(1)
  await agent.notify(acp.methods.agent.session.cancel, { sessionId: id })
  const { response } = await asking
  assert.equal(response.stopReason, 'cancelled')
  for (let i = 0; i < 100 && !req.signal.aborted; i++) await sleep(10)
  assert.ok(req.signal.aborted, 'the pending elicitation got $/cancel_request')
  await agent.stop()
})

test('images reach the agent as image files; links and resources as text', async (t) => {
  const { agent, id, data } = await session(t)
  const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex')
  const { response } = await agent.prompt(id, [
    { type: 'text', text: 'echo look at ' },
    { type: 'resource_link', uri: 'file:///src/main.rs', name: 'main.rs' },
    { type: 'image', data: png.toString('base64'), mimeType: 'image/png' },
    {
      type: 'resource',
      resource: { uri: 'file:///src/lib.rs', text: 'pub fn x() {}', mimeType: 'text/x-rust' },
    },
  ])
  assert.equal(response.stopReason, 'end_turn')
  const text = agentText(agent.updatesOf(id))
  assert.match(text, /^look at \/src\/main\.rs/)
  assert.match(text, /<context ref="file:\/\/\/src\/lib\.rs">\npub fn x\(\) \{\}\n<\/context>/)
  const image = text.match(/\[image (\S+) image\/png (\d+) bytes\]/)
  assert.ok(image, text)
  assert.equal(Number(image[2]), png.length)
  assert.ok(image[1].startsWith(path.join(data, 'acp-images')), image[1])
  await agent.stop()
})

test('audio and empty prompts are invalid params', async (t) => {
  const { agent, id } = await session(t)
  const audio = await agent.prompt(id, [{ type: 'audio', data: 'AAAA', mimeType: 'audio/wav' }])
  assert.equal(audio.error.code, -32602)
  const empty = await agent.prompt(id, [{ type: 'text', text: '  ' }])
  assert.equal(empty.error.code, -32602)
  await agent.stop()
})

test('set_mode: the agent mode changes, with current_mode_update', async (t) => {
  const { agent, id } = await session(t)
  await agent.request(acp.methods.agent.session.setMode, { sessionId: id, modeId: 'max' })
  const update = await agent.waitForUpdate(id, (u) => u.sessionUpdate === 'current_mode_update')
  assert.equal(update.currentModeId, 'max')
  const list = await agent.request(acp.methods.agent.session.list, {})
  const entry = list.sessions.find((s) => s.sessionId === id)
  assert.equal(entry._meta.codebuff.agentMode, 'max')
  await assert.rejects(
    agent.request(acp.methods.agent.session.setMode, { sessionId: id, modeId: 'turbo' }),
    (e) => e.code === -32602,
  )
  await agent.stop()
})

test('close: the session ends and takes no more prompts', async (t) => {
  const { agent, id } = await session(t)
  await agent.prompt(id, 'echo before')
  await agent.request(acp.methods.agent.session.close, { sessionId: id })
  const { error } = await agent.prompt(id, 'echo after')
  assert.equal(error.code, -32600)
  assert.equal(error.data.code, 'session_terminated')
  const list = await agent.request(acp.methods.agent.session.list, {})
  assert.equal(list.sessions.find((s) => s.sessionId === id)._meta.codebuff.ended, true)
  await agent.stop()
})

test('permissions: gated tools ask the client; allow runs, reject fails the call', async (t) => {
  const { agent, id, work } = await session(t, {
    args: ['--permission-mode', 'default'],
    answer: {
      permission: async (params) => {
        const kind = params.toolCall.kind === 'execute' ? 'reject_once' : 'allow_once'
        return {
          outcome: { outcome: 'selected', optionId: params.options.find((o) => o.kind === kind).optionId },
        }
      },
    },
  })
  const { response } = await agent.prompt(id, 'tools gated')
  assert.equal(response.stopReason, 'end_turn')
  const asked = agent.requests.filter((r) => r.method === 'session/request_permission')
  assert.ok(asked.length >= 2, `asked ${asked.length} times`)
  for (const { params } of asked) {
    assert.deepEqual(
      params.options.map((o) => o.kind),
      ['allow_once', 'allow_always', 'reject_once', 'reject_always'],
    )
  }
  const calls = toolCalls(agent.updatesOf(id))
  const write = calls.find((c) => c._meta.codebuff.toolName === 'write_file')
  const run = calls.find((c) => c._meta.codebuff.toolName === 'run_terminal_command')
  const writeAsk = asked.find((r) => r.params.toolCall.kind === 'edit')
  assert.equal(writeAsk.params.toolCall.toolCallId, write.toolCallId, 'the request names the gated call')
  assert.equal(write.status, 'completed')
  assert.equal(fs.readFileSync(path.join(work, 'hello.txt'), 'utf8'), 'gated\n')
  assert.equal(run.status, 'failed')
  await agent.stop()
})

test('permissions block the tool for real: nothing runs until allowed, a rejected call never runs', async (t) => {
  const seen = []
  const { agent, id, work } = await session(t, {
    args: ['--permission-mode', 'default'],
    answer: {
      permission: async (params) => {
        // While the client is asked, the gated tool has not run.
        seen.push({
          kind: params.toolCall.kind,
          file: fs.existsSync(path.join(work, 'gated.txt')),
          cmd: fs.existsSync(path.join(work, 'gated-cmd.txt')),
        })
        await sleep(200)
        const kind = params.toolCall.kind === 'execute' ? 'reject_once' : 'allow_once'
        return {
          outcome: { outcome: 'selected', optionId: params.options.find((o) => o.kind === kind).optionId },
        }
      },
    },
  })
  const { response } = await agent.prompt(id, 'gated')
  assert.equal(response.stopReason, 'end_turn')
  assert.deepEqual(seen, [
    { kind: 'edit', file: false, cmd: false },
    { kind: 'execute', file: true, cmd: false },
  ])
  assert.ok(fs.existsSync(path.join(work, 'gated.txt')), 'the allowed write ran')
  assert.ok(!fs.existsSync(path.join(work, 'gated-cmd.txt')), 'the rejected command never ran')
  const calls = toolCalls(agent.updatesOf(id))
  const write = calls.find((c) => c._meta.codebuff.toolName === 'write_file')
  const run = calls.find((c) => c._meta.codebuff.toolName === 'run_terminal_command')
  assert.equal(write.status, 'completed')
  assert.equal(run.status, 'failed')
  const [ask] = agent.requests
  assert.equal(ask.params.toolCall.toolCallId, write.toolCallId)
  assert.deepEqual(ask.params.toolCall.locations, [{ path: path.join(work, 'gated.txt') }])
  await agent.stop()
})

test('permissions: a cancel while the client is asked withdraws the request and rejects the tool', async (t) => {
  const { agent, id, work } = await session(t, {
    args: ['--permission-mode', 'default'],
    answer: {
      // Never answers: waits until the request is cancelled.
      permission: (_params, signal) =>
        new Promise((resolve) =>
          signal.addEventListener('abort', () => resolve({ outcome: { outcome: 'cancelled' } })),
        ),
    },
  })
  const running = agent.prompt(id, 'gated')
  const req = await agent.waitForRequests(1)
  assert.equal(req.params.toolCall.kind, 'edit')
  await agent.notify(acp.methods.agent.session.cancel, { sessionId: id })
  const { response } = await running
  assert.equal(response.stopReason, 'cancelled')
  for (let i = 0; i < 100 && !req.signal.aborted; i++) await sleep(10)
  assert.ok(req.signal.aborted, 'the pending permission request got $/cancel_request')
  assert.ok(!fs.existsSync(path.join(work, 'gated.txt')), 'the gated write never ran')
  assert.ok(!fs.existsSync(path.join(work, 'gated-cmd.txt')))
  const { response: next } = await agent.prompt(id, 'echo still here')
  assert.equal(next.stopReason, 'end_turn')
  await agent.stop()
})

test('a turn past --turn-timeout answers an error with status timed_out; the session goes on', async (t) => {
  const { agent, id } = await session(t, { args: ['--turn-timeout', '1'] })
  const { error } = await agent.prompt(id, 'hang')
  assert.ok(error, 'a timed-out turn is an error, never a silent end_turn')
  assert.equal(error.code, -32603)
  assert.equal(error.data.status, 'timed_out')
  assert.match(error.message, /time/)
  const [u] = usage(agent.updatesOf(id))
  assert.equal(u._meta.codebuff.turn.status, 'timed_out')
  const { response } = await agent.prompt(id, 'echo after the timeout')
  assert.equal(response.stopReason, 'end_turn')
  await agent.stop()
})

test('engine settings come from the config file and CODEBUFFD_* like the server', async (t) => {
  const conf = path.join(tempDir(t, 'conf'), 'codebuffd.toml')
  fs.writeFileSync(conf, 'permission_mode = "default"\nturn_timeout = 600\n')
  const asked = []
  const { agent, id, work } = await session(t, {
    args: ['--config', conf],
    env: { CODEBUFFD_PERMISSION_TIMEOUT: '300' },
    answer: {
      permission: async (params) => {
        asked.push(params.toolCall.kind)
        return { outcome: { outcome: 'selected', optionId: 'allow_once' } }
      },
    },
  })
  const { response } = await agent.prompt(id, 'gated')
  assert.equal(response.stopReason, 'end_turn')
  assert.deepEqual(asked, ['edit', 'execute'], 'permission_mode from the file')
  assert.equal(fs.readFileSync(path.join(work, 'gated-cmd.txt'), 'utf8'), 'gated-ok\n')
  await agent.stop()

  // A bad value is refused before anything starts, on stderr, with a non-zero exit.
  const bad = spawnAgent({ dataDir: tempDir(t, 'data'), env: { CODEBUFFD_PERMISSION_MODE: 'sometimes' } })
  bad.stdin.end()
  assert.notEqual(await exited(bad), 0)
  if (!bad.stderr.readableEnded) await new Promise((resolve) => bad.stderr.once('end', resolve))
  assert.match(bad.stderrText(), /permission mode `sometimes`/)
})
