// @codebuff/sdk 0.3.13's CodebuffClient against /v1/ws with codebuffd's real Codebuff agent (the
// adapter, on the current SDK) and the adapter's fake Codebuff backend: two runs, the second
// with `previousRun`, are two turns of one codebuffd session and one Codebuff conversation
// (the second model request carries the first exchange). Every frame the daemon sends is
// checked against the 0.3.13 SDK's own schemas.

import test from 'node:test'
import assert from 'node:assert/strict'

import {
  assertValidServerMessages,
  fakeBackend,
  FrameLog,
  loadSchemas,
  loadSdk,
  startDaemon,
  tempDir,
  v1,
} from './harness.mjs'

/** The model requests the fake backend was sent. */
async function chatRequests(backend) {
  const requests = await (await fetch(`${backend.url}/__requests`)).json()
  return requests.filter((r) => r.path.includes('chat/completions'))
}

test('@codebuff/sdk 0.3.13 continues one Codebuff conversation across runs', async (t) => {
  const backend = await fakeBackend(t, 'continue')
  const home = tempDir(t, 'ws-sdk-home')
  const workdir = tempDir(t, 'ws-sdk-work')
  const daemon = await startDaemon(t, {
    args: ['--ws-default-agent', 'codebuff', '--workdir', workdir],
    env: { CODEBUFFD_TEST_BACKEND_URL: backend.url, HOME: home },
  })
  const frames = new FrameLog()
  const { CodebuffClient } = await loadSdk(daemon)
  const schemas = await loadSchemas()
  const events = []
  // Its apiKey is the prompt's authToken: the credential of the session the prompt creates.
  const client = new CodebuffClient({ apiKey: 'test-key', handleEvent: (e) => events.push(e) })

  const chunks = []
  const first = await client.run({
    agent: 'base',
    prompt: 'Remember the number 42.',
    handleStreamChunk: (c) => chunks.push(c),
  })
  assert.deepEqual(events, [])
  assert.deepEqual(first.output, { type: 'lastMessage', value: 'OK, I will remember 42.' })
  assert.equal(chunks.join(''), 'OK, I will remember 42.')
  const session = first.sessionState.mainAgentState.runId
  const info = await v1(daemon, `/v1/sessions/${session}`)
  assert.equal(info.agent, 'codebuff')
  assert.ok(info.cost.credits > 0)
  assert.equal(first.sessionState.mainAgentState.creditsUsed, info.cost.credits)

  const second = await client.run({ agent: 'base', prompt: 'Which number did I mention?', previousRun: first })
  assert.deepEqual(second.output, { type: 'lastMessage', value: 'You asked me to remember 42.' })
  assert.equal(second.sessionState.mainAgentState.runId, session)
  assert.deepEqual(second.sessionState.mainAgentState.messageHistory, [
    { role: 'user', content: 'Which number did I mention?' },
    { role: 'assistant', content: [{ type: 'text', text: 'You asked me to remember 42.' }] },
  ])
  const after = await v1(daemon, `/v1/sessions/${session}`)
  assert.equal(after.turns, 2)
  // The same Codebuff conversation: the second model request carries the first exchange.
  const requests = await chatRequests(backend)
  assert.ok(requests.length >= 2, `${requests.length} model requests`)
  const last = JSON.stringify(requests.at(-1).body)
  assert.ok(last.includes('Remember the number 42.'), 'the first prompt is in the second request')
  assert.ok(last.includes('OK, I will remember 42.'), 'and the first answer')

  const checked = assertValidServerMessages(schemas, frames.received)
  assert.ok(checked >= 6, `${checked} server messages checked`)
  await daemon.stop()
})
