// `codebuffd acp` with the real Codebuff adapter and SDK (`adapters/codebuff`) against the
// adapter's scripted fake backend: what an editor sees of a real Codebuff run.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'

import { AcpAgent, acp, agentText, fakeBackend, tempDir, thoughtText, toolCalls } from './harness.mjs'

/** `codebuffd acp` (the codebuff agent) talking to `backend`, with a scratch HOME. */
async function codebuffAgent(t, backend, options = {}) {
  const home = tempDir(t, 'home')
  return AcpAgent.start(t, {
    dataDir: options.dataDir ?? tempDir(t, 'data'),
    agent: 'codebuff',
    env: {
      CODEBUFFD_TEST_BACKEND_URL: backend.url,
      CODEBUFF_API_KEY: 'test-key',
      HOME: home,
      ...options.env,
    },
    answer: options.answer,
    args: options.args,
  })
}

/** Credits the fake backend reports for a reply costing `usd`. */
const credits = (usd) => Math.round(usd * 1.055 * 100)

const greetJs = "export function greet(name) {\n  return 'Hello ' + name\n}\n"

test('codebuff: edits as diffs, commands with their output, a failed edit, the cost', async (t) => {
  const backend = await fakeBackend(t, 'tools')
  const agent = await codebuffAgent(t, backend)
  assert.deepEqual(
    agent.init.authMethods.map((m) => m.id),
    ['codebuff-api-key'],
  )
  const work = tempDir(t, 'work')
  fs.mkdirSync(path.join(work, 'src'))
  fs.writeFileSync(path.join(work, 'src/greet.js'), greetJs)
  const id = await agent.newSession(work)
  const { response, error } = await agent.prompt(id, 'Edit the project.')
  assert.equal(error, undefined, JSON.stringify(error))
  assert.equal(response.stopReason, 'end_turn')
  const updates = agent.updatesOf(id)
  assert.equal(agentText(updates), 'I will edit the files.Edited two files and ran the commands.')

  const calls = toolCalls(updates)
  const byTitle = Object.fromEntries(calls.map((c) => [c.title, c]))
  const write = byTitle['Write notes/todo.md']
  assert.equal(write.kind, 'edit')
  assert.equal(write.status, 'completed')
  assert.deepEqual(write.content, [
    { type: 'diff', path: path.join(work, 'notes/todo.md'), newText: '# TODO\n\n- write tests\n' },
  ])
  const replace = byTitle['Edit src/greet.js']
  assert.equal(replace.status, 'completed')
  assert.equal(replace.content[0].type, 'diff')
  assert.equal(replace.content[0].path, path.join(work, 'src/greet.js'))
  assert.match(replace.content[0].oldText, /return 'Hello ' \+ name/)
  assert.match(replace.content[0].newText, /return 'Hello, ' \+ name/)
  assert.deepEqual(replace.locations, [{ path: path.join(work, 'src/greet.js') }])
  const cat = byTitle['Run `cat src/greet.js notes/todo.md`']
  assert.equal(cat.kind, 'execute')
  assert.match(cat.content[0].content.text, /Hello, ' \+ name[\s\S]*# TODO/)
  const failing = byTitle['Run `echo failing >&2; exit 3`']
  assert.match(failing.content[0].content.text, /failing\nexit code 3/)
  const missing = byTitle['Edit missing.txt']
  assert.equal(missing.status, 'failed')
  for (const c of calls) {
    assert.deepEqual(c.statuses.slice(0, 2), ['pending', 'in_progress'], c.title)
  }

  const usage = updates.filter((u) => u.sessionUpdate === 'usage_update')
  const total = credits(0.05) + credits(0.02)
  assert.equal(usage.at(-1)._meta.codebuff.credits, total)
  assert.deepEqual(usage.at(-1).cost, { amount: total / 100, currency: 'USD' })
  await agent.stop()
})

test('codebuff: reasoning is thought, ask_user is a form', async (t) => {
  const backend = await fakeBackend(t, 'ask_user_single')
  const agent = await codebuffAgent(t, backend, {
    answer: { elicitation: async () => ({ action: 'accept', content: { q1: 'vitest' } }) },
  })
  const id = await agent.newSession(tempDir(t, 'work'))
  const { response } = await agent.prompt(id, 'Set up tests.')
  assert.equal(response.stopReason, 'end_turn')
  const [req] = agent.requests
  assert.equal(req.method, 'elicitation/create')
  assert.equal(req.params.message, 'Which test framework should I use?')
  assert.deepEqual(
    req.params.requestedSchema.properties.q1.oneOf.map((o) => o.const),
    ['vitest', 'jest'],
  )
  assert.equal(agentText(agent.updatesOf(id)), 'I need to ask.Using vitest.')
  // The answer reached the model as the tool's result.
  const chats = await backend.chatRequests()
  assert.match(JSON.stringify(chats.at(-1)), /vitest/)
  await agent.stop()

  const reasoning = await fakeBackend(t, 'reasoning')
  const thinker = await codebuffAgent(t, reasoning)
  const rid = await thinker.newSession(tempDir(t, 'work'))
  await thinker.prompt(rid, 'Think, then answer.')
  assert.equal(thoughtText(thinker.updatesOf(rid)), 'Let me think about this carefully.')
  assert.equal(agentText(thinker.updatesOf(rid)), 'The answer is 4.')
  await thinker.stop()
})

test('codebuff: a 402 fails the prompt with out_of_credits, a 500 with backend_error, a 401 asks for authentication', async (t) => {
  const broke = await fakeBackend(t, 'payment_required')
  const agent = await codebuffAgent(t, broke)
  const id = await agent.newSession(tempDir(t, 'work'))
  const { error } = await agent.prompt(id, 'Say hello.')
  assert.ok(error, 'never a silent end_turn')
  assert.equal(error.code, -32603)
  assert.equal(error.data.code, 'out_of_credits')
  assert.equal(error.data.status, 'failed')
  assert.equal(error.data.exitCode, 1)
  assert.match(error.message, /Insufficient credits/)
  await agent.stop()

  const crashed = await fakeBackend(t, 'server_error')
  const third = await codebuffAgent(t, crashed)
  const id3 = await third.newSession(tempDir(t, 'work'))
  const failed = await third.prompt(id3, 'Say hello.')
  assert.equal(failed.error.code, -32603)
  assert.equal(failed.error.data.code, 'backend_error')
  assert.equal(failed.error.data.status, 'failed')
  assert.match(failed.error.message, /upstream model provider crashed/)
  const again = await third.prompt(id3, 'Say hello.')
  assert.equal(again.error.data.code, 'backend_error', 'the session takes the next prompt')
  await third.stop()

  const refused = await fakeBackend(t, 'auth_failed')
  const other = await codebuffAgent(t, refused)
  const id2 = await other.newSession(tempDir(t, 'work'))
  const res = await other.prompt(id2, 'Say hello.')
  assert.equal(res.error.code, -32000)
  assert.equal(res.error.data.code, 'auth_failed')
  await other.stop()
})

test('codebuff: without any key, session/new asks for authentication', async (t) => {
  const backend = await fakeBackend(t, 'text')
  const agent = await codebuffAgent(t, backend, { env: { CODEBUFF_API_KEY: '' } })
  // The message itself says where to get a key and names the mock (clients such as acpx show
  // only the message), as the terminal and HTTP do.
  await assert.rejects(
    agent.request(acp.methods.agent.authenticate, { methodId: 'codebuff-api-key' }),
    (e) =>
      e.code === -32000 &&
      e.message.startsWith('Authentication required: no Codebuff credential') &&
      e.message.includes('https://www.codebuff.com/api-keys') &&
      e.message.includes('--agent mock'),
  )
  await assert.rejects(
    agent.request(acp.methods.agent.session.new, { cwd: tempDir(t, 'work'), mcpServers: [] }),
    (e) => e.code === -32000 && e.data.code === 'credentials_missing',
  )
  await agent.stop()
})

test('codebuff: load in a new process, and the next prompt continues the conversation', async (t) => {
  const backend = await fakeBackend(t, 'continue')
  const data = tempDir(t, 'data')
  const work = tempDir(t, 'work')
  const first = await codebuffAgent(t, backend, { dataDir: data })
  await first.request(acp.methods.agent.authenticate, { methodId: 'codebuff-api-key' })
  const id = await first.newSession(work)
  await first.prompt(id, 'Remember the number 42.')
  await first.stop()

  const second = await codebuffAgent(t, backend, { dataDir: data })
  await second.request(acp.methods.agent.session.load, { sessionId: id, cwd: work, mcpServers: [] })
  assert.equal(agentText(second.updatesOf(id)), 'OK, I will remember 42.')
  const before = second.updates.length
  const { response } = await second.prompt(id, 'Which number did I mention?')
  assert.equal(response.stopReason, 'end_turn')
  assert.equal(agentText(second.updatesOf(id, before)), 'You asked me to remember 42.')
  const chats = await backend.chatRequests()
  assert.match(JSON.stringify(chats.at(-1)), /Remember the number 42/, 'the history went with it')
  await second.stop()
})

test('codebuff: with --permission-mode default each tool waits for the client; always covers the command, reject keeps the file away', async (t) => {
  const backend = await fakeBackend(t, 'permissions_repeat')
  const work = tempDir(t, 'work')
  const read = (f) => (fs.existsSync(path.join(work, f)) ? fs.readFileSync(path.join(work, f), 'utf8') : null)
  const seen = []
  const choices = ['allow_once', 'allow_always', 'reject_once']
  const agent = await codebuffAgent(t, backend, {
    args: ['--permission-mode', 'default'],
    answer: {
      permission: async (params) => {
        // What is on disk while the client is asked: the gated call has not run.
        seen.push({
          title: params.toolCall.title,
          kind: params.toolCall.kind,
          first: read('first.txt'),
          log: read('log.txt'),
          second: read('second.txt'),
        })
        const kind = choices[seen.length - 1] ?? 'reject_once'
        return { outcome: { outcome: 'selected', optionId: params.options.find((o) => o.kind === kind).optionId } }
      },
    },
  })
  const id = await agent.newSession(work)
  const { response, error } = await agent.prompt(id, 'Write two files and log twice.')
  assert.equal(error, undefined, JSON.stringify(error))
  assert.equal(response.stopReason, 'end_turn')
  assert.deepEqual(seen, [
    { title: 'Write first.txt', kind: 'edit', first: null, log: null, second: null },
    { title: 'Run `echo one >> log.txt`', kind: 'execute', first: 'first\n', log: null, second: null },
    { title: 'Write second.txt', kind: 'edit', first: 'first\n', log: 'one\n', second: null },
  ])
  // The repeated command ran without asking (allowed always); the rejected write never ran.
  assert.equal(read('log.txt'), 'one\none\n')
  assert.equal(read('second.txt'), null)
  const calls = toolCalls(agent.updatesOf(id))
  const second = calls.find((c) => c.title === 'Write second.txt')
  assert.equal(second.status, 'failed')
  const asked = agent.requests.map((r) => r.params.toolCall.toolCallId)
  assert.deepEqual(
    asked,
    calls.filter((c) => c.kind === 'edit' || c.title.startsWith('Run')).map((c) => c.toolCallId).slice(0, 3),
    'each request names the gated call',
  )
  assert.equal(agentText(agent.updatesOf(id)).endsWith('Done.'), true)
  await agent.stop()
})
