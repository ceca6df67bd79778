// Sessions outlive their `codebuffd acp`: load after a clean exit and after SIGKILL mid-turn,
// list across processes, and the same sessions seen by `codebuffd server` on the data dir.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import readline from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'

import {
  AcpAgent,
  BIN,
  acp,
  agentText,
  assertSessionGone,
  exited,
  sessionMembers,
  spawnAgent,
  tempDir,
  toolCalls,
} from './harness.mjs'

/** Runs `codebuffd server` on `dataDir` while `fn(base)` runs, then stops it. */
async function withServer(dataDir, fn) {
  const child = spawn(BIN, ['server', '--no-token', '--port', '0', '--data-dir', dataDir], {
    stdio: ['ignore', 'pipe', 'ignore'],
    detached: true,
  })
  try {
    const lines = readline.createInterface({ input: child.stdout })
    const [line] = await Promise.race([
      new Promise((resolve) => lines.once('line', (l) => resolve([l]))),
      sleep(20_000).then(() => {
        throw new Error('the server did not start')
      }),
    ])
    return await fn(JSON.parse(line).url)
  } finally {
    child.kill('SIGTERM')
    await exited(child)
    await assertSessionGone(child.pid)
  }
}

test('load after a clean exit replays the conversation, then the next prompt continues it', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const first = await AcpAgent.start(t, { dataDir: data })
  const id = await first.newSession(work)
  await first.prompt(id, 'echo remember 42')
  await first.prompt(id, 'tools kept')
  await first.prompt(id, 'reasoning')
  await first.stop()

  const second = await AcpAgent.start(t, { dataDir: data })
  const list = await second.request(acp.methods.agent.session.list, {})
  const entry = list.sessions.find((s) => s.sessionId === id)
  assert.ok(entry, 'session/list shows the session of the earlier process')
  assert.equal(entry.cwd, work)
  assert.ok(Date.parse(entry.updatedAt) > 0, entry.updatedAt)

  const loaded = await second.request(acp.methods.agent.session.load, {
    sessionId: id,
    cwd: work,
    mcpServers: [],
  })
  assert.equal(loaded.modes.currentModeId, 'build')
  const replay = second.updatesOf(id)
  const users = replay
    .filter((u) => u.sessionUpdate === 'user_message_chunk')
    .map((u) => u.content.text)
  assert.deepEqual(users, ['echo remember 42', 'tools kept', 'reasoning'])
  assert.match(agentText(replay), /^remember 42I will write the file/)
  assert.ok(replay.some((u) => u.sessionUpdate === 'agent_thought_chunk'))
  const calls = toolCalls(replay)
  assert.deepEqual(
    calls.map((c) => c.status),
    ['completed', 'failed', 'completed'],
    'tool calls with their final status',
  )
  assert.equal(calls[0].content[0].type, 'diff')
  const usage = replay.filter((u) => u.sessionUpdate === 'usage_update')
  assert.equal(usage.length, 3)
  assert.equal(usage[2]._meta.codebuff.credits, 1.25 + 7.5 + 3.75)

  // The next prompt continues the conversation; the usage goes on from the replayed total.
  const before = second.updates.length
  const { response } = await second.prompt(id, 'echo and now?')
  assert.equal(response.stopReason, 'end_turn')
  const [next] = second.updatesOf(id, before).filter((u) => u.sessionUpdate === 'usage_update')
  assert.equal(next._meta.codebuff.credits, 1.25 + 7.5 + 3.75 + 1.25)
  await second.stop()

  // The same session, seen through the HTTP door on the same data directory.
  await withServer(data, async (base) => {
    const info = await (await fetch(`${base}/v1/sessions/${id}`)).json()
    assert.equal(info.turns, 4)
    assert.equal(info.agent, 'mock')
    const { events } = await (await fetch(`${base}/v1/sessions/${id}/events?limit=10000`)).json()
    const natives = new Set(
      events.filter((e) => e.type === 'turn.ended').map((e) => e.native_session_id),
    )
    assert.equal(natives.size, 1, 'one Codebuff conversation across the processes')
    const starts = events.filter(
      (e) => e.type === 'item.started' && e.data.item.content[0]?.label === 'codebuff.start',
    )
    assert.match(starts.at(-1).data.item.content[0].detail, /messageHistoryLength=[1-9]/)
  })
})

test('load after SIGKILL mid-turn: the turn shown as ended, the session goes on, nothing left', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const first = await AcpAgent.start(t, { dataDir: data })
  const id = await first.newSession(work)
  await first.prompt(id, 'echo before the crash')
  const hanging = first.prompt(id, 'hang')
  // The turn's agent runs beside the daemon (the mock keeps no warm spare).
  for (let i = 0; i < 200 && sessionMembers(first.sid).length < 2; i++) await sleep(10)
  await sleep(200)
  const sid = await first.kill9()
  const { error } = await hanging
  assert.ok(error, 'the prompt of a killed agent does not succeed')

  const second = await AcpAgent.start(t, { dataDir: data })
  await second.request(acp.methods.agent.session.load, { sessionId: id, cwd: work, mcpServers: [] })
  const replay = second.updatesOf(id)
  const usage = replay.filter((u) => u.sessionUpdate === 'usage_update')
  assert.equal(usage.length, 2)
  assert.equal(usage[1]._meta.codebuff.turn.status, 'interrupted')
  const notice = replay.find((u) => u.sessionUpdate === 'notice')
  assert.match(notice.title, /interrupted/)
  assert.deepEqual(
    replay.filter((u) => u.sessionUpdate === 'user_message_chunk').map((u) => u.content.text),
    ['echo before the crash', 'hang'],
  )
  // The crashed process's agent was killed by the new one; nothing of it is left.
  await assertSessionGone(sid)
  const { response } = await second.prompt(id, 'echo after the crash')
  assert.equal(response.stopReason, 'end_turn')
  assert.equal(agentText(second.updatesOf(id).slice(replay.length)), 'after the crash')
  await second.stop()
})

test('session/list: across processes, by cwd, paged with an opaque cursor', async (t) => {
  const data = tempDir(t, 'data')
  const a = tempDir(t, 'a')
  const b = tempDir(t, 'b')
  const first = await AcpAgent.start(t, { dataDir: data })
  const ids = [await first.newSession(a), await first.newSession(b), await first.newSession(a)]
  await first.stop()
  const second = await AcpAgent.start(t, { dataDir: data })
  const all = await second.request(acp.methods.agent.session.list, {})
  assert.deepEqual(
    new Set(all.sessions.map((s) => s.sessionId)),
    new Set(ids),
  )
  assert.equal(all.nextCursor ?? null, null)
  const inA = await second.request(acp.methods.agent.session.list, { cwd: a })
  assert.deepEqual(inA.sessions.map((s) => s.sessionId).sort(), [ids[0], ids[2]].sort())
  await assert.rejects(
    second.request(acp.methods.agent.session.list, { cursor: 'garbage' }),
    (e) => e.code === -32602,
  )
  // resume: no replay.
  const before = second.updates.length
  const resumed = await second.request(acp.methods.agent.session.resume, {
    sessionId: ids[0],
    cwd: a,
    mcpServers: [],
  })
  assert.equal(resumed.modes.currentModeId, 'build')
  await sleep(100)
  assert.equal(second.updates.length, before)
  await second.stop()
})

test('session/list: pages of 100 that cover every session once; titles from the first prompt', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const agent = await AcpAgent.start(t, { dataDir: data })
  const ids = []
  for (let i = 0; i < 103; i++) ids.push(await agent.newSession(work))
  await agent.prompt(ids[5], 'echo Fix the login bug\nand more details')
  const first = await agent.request(acp.methods.agent.session.list, {})
  assert.equal(first.sessions.length, 100)
  assert.equal(typeof first.nextCursor, 'string')
  const second = await agent.request(acp.methods.agent.session.list, { cursor: first.nextCursor })
  assert.equal(second.sessions.length, 3)
  assert.equal(second.nextCursor ?? null, null)
  const listed = [...first.sessions, ...second.sessions].map((s) => s.sessionId)
  assert.equal(new Set(listed).size, 103, 'no session twice')
  assert.deepEqual(new Set(listed), new Set(ids))
  const titled = [...first.sessions, ...second.sessions].find((s) => s.sessionId === ids[5])
  assert.equal(titled.title, 'echo Fix the login bug')
  assert.equal(titled._meta.codebuff.turns, 1)
  const untitled = first.sessions.find((s) => s.sessionId === ids[6]) ?? second.sessions.find((s) => s.sessionId === ids[6])
  assert.equal(untitled.title ?? null, null, 'no prompt, no title')
  await agent.stop()
})

test('a question answered over ACP is in the log as on HTTP (question.requested, question.resolved)', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const agent = await AcpAgent.start(t, {
    dataDir: data,
    answer: { elicitation: async () => ({ action: 'accept', content: { q1: 'jest', q2: ['unit'] } }) },
  })
  const id = await agent.newSession(work)
  const { response } = await agent.prompt(id, 'ask')
  assert.equal(response.stopReason, 'end_turn')
  await agent.stop()
  await withServer(data, async (base) => {
    const { events } = await (await fetch(`${base}/v1/sessions/${id}/events?limit=10000`)).json()
    const [asked] = events.filter((e) => e.type === 'question.requested')
    const [resolved] = events.filter((e) => e.type === 'question.resolved')
    assert.ok(asked && resolved, JSON.stringify(events.map((e) => e.type)))
    assert.equal(resolved.data.question_id, asked.data.question_id)
    assert.equal(resolved.data.status, 'answered')
    assert.deepEqual(resolved.data.answers, [['jest'], ['unit']])
  })
})

test('a second codebuffd acp on the same data directory works beside the first', async (t) => {
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const first = await AcpAgent.start(t, { dataDir: data })
  const id = await first.newSession(work)
  const hanging = first.prompt(id, 'hang')
  for (let i = 0; i < 200 && sessionMembers(first.sid).length < 2; i++) await sleep(10)
  // A second editor window: its own engine on the same log, its own session and turns.
  const second = await AcpAgent.start(t, { dataDir: data })
  const other = await second.newSession(work)
  const { response: echoed } = await second.prompt(other, 'echo from the second window')
  assert.equal(echoed.stopReason, 'end_turn')
  assert.equal(agentText(second.updatesOf(other)), 'from the second window')
  // It lists the first one's session too.
  const listed = await second.request(acp.methods.agent.session.list, {})
  const ids = listed.sessions.map((s) => s.sessionId)
  assert.ok(ids.includes(id) && ids.includes(other), JSON.stringify(ids))
  // The first one's turn was not touched: it is still running, and cancels normally.
  await first.notify(acp.methods.agent.session.cancel, { sessionId: id })
  const { response } = await hanging
  assert.equal(response.stopReason, 'cancelled')
  const { response: next } = await first.prompt(id, 'echo still mine')
  assert.equal(next.stopReason, 'end_turn')
  assert.equal(agentText(first.updatesOf(id)), 'still mine')
  await second.stop()
  await first.stop()
})
