// @codebuff/sdk 0.3.13's own client against /v1/ws, with the mock agent: CodebuffClient.run()
// for a streamed turn, a tool turn, a subagent turn, a failed turn, a budget-exhausted turn, run({previousRun})
// continuing the session, and a question the client cannot answer (declined after
// --ws-question-timeout); the SDK's WebSocketHandler (the client run() uses) for a turn
// cancelled with its cancelInput (`cancel-user-input`). Every frame the daemon sends is
// checked against the SDK's own schemas.

import test from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'

import {
  assertValidServerMessages,
  FrameLog,
  loadSchemas,
  loadSdk,
  startDaemon,
  tempDir,
  v1,
  waitFor,
} from './harness.mjs'

/** The budget of every session (each run without previousRun makes one). */
const BUDGET = 20

test('@codebuff/sdk 0.3.13 drives /v1/ws with the mock agent', async (t) => {
  const workdir = tempDir(t, 'ws-sdk-work')
  const daemon = await startDaemon(t, {
    args: [
      '--ws-default-agent', 'mock',
      '--max-session-credits', String(BUDGET),
      '--ws-question-timeout', '1',
      '--workdir', workdir,
    ],
  })
  const frames = new FrameLog()
  const { CodebuffClient, WebSocketHandler, generateInitialRunState } = await loadSdk(daemon)
  const schemas = await loadSchemas()
  const events = []
  const client = new CodebuffClient({
    apiKey: 'cb-test-key',
    // The SDK's default handler throws on error events (then an unhandled rejection): record.
    handleEvent: (event) => events.push(event),
  })
  let checked = 0
  const validated = () => {
    checked += assertValidServerMessages(schemas, frames.received)
  }
  t.beforeEach(() => {
    frames.clear()
    events.length = 0
  })

  await t.test('a streamed turn: the chunks, then the answer and a Codebuff session state', async (t) => {
    const cwd = tempDir(t, 'ws-sdk-project')
    const chunks = []
    const result = await client.run({
      agent: 'mock',
      prompt: 'stream alpha beta gamma',
      cwd,
      // (0.3.13 reads the files it discovers in `cwd` relative to the process's directory:
      // name them.)
      projectFiles: { 'knowledge.md': '# Notes\n', 'docs/plan.txt': 'plan\n' },
      handleStreamChunk: (chunk) => chunks.push(chunk),
    })
    assert.deepEqual(result.output, { type: 'lastMessage', value: 'alpha beta gamma' })
    assert.equal(chunks.join(''), 'alpha beta gamma')
    assert.equal(chunks.length, 3)
    const state = result.sessionState
    // The client's own fileContext came back.
    assert.equal(state.fileContext.projectRoot, cwd)
    assert.deepEqual(state.fileContext.knowledgeFiles, { 'knowledge.md': '# Notes\n' })
    assert.deepEqual(state.fileContext.fileTree.map((n) => n.name).sort(), ['docs', 'knowledge.md'])
    assert.deepEqual(state.mainAgentState.messageHistory, [
      { role: 'user', content: 'stream alpha beta gamma' },
      { role: 'assistant', content: [{ type: 'text', text: 'alpha beta gamma' }] },
    ])
    const session = state.mainAgentState.runId
    assert.match(session, /^ws-/)
    const info = await v1(daemon, `/v1/sessions/${session}`)
    assert.equal(info.agent, 'mock')
    assert.equal(info.turns, 1)
    assert.equal(state.mainAgentState.creditsUsed, info.cost.credits)
    const [response] = frames.actions('prompt-response')
    assert.equal(response.sessionState.remainingBalance, BUDGET - info.cost.credits)
    assert.deepEqual(frames.actions('response-chunk').map((c) => c.chunk), chunks)
    validated()
  })

  await t.test('a tool turn: tool calls and results in the protocol shapes, run by the daemon', async () => {
    const result = await client.run({ agent: 'mock', prompt: 'tools Hello from the SDK' })
    assert.equal(result.output.type, 'lastMessage')
    const [response] = frames.actions('prompt-response')
    assert.deepEqual(
      response.toolCalls.map((c) => c.toolName),
      ['write_file', 'str_replace', 'run_terminal_command'],
    )
    assert.equal(response.toolCalls[0].input.path, 'hello.txt')
    for (const r of response.toolResults) {
      assert.equal(r.type, 'tool-result')
      assert.equal(r.output[0].type, 'json')
    }
    assert.deepEqual(
      response.toolResults.map((r) => r.toolName),
      ['write_file', 'str_replace', 'run_terminal_command'],
    )
    const history = result.sessionState.mainAgentState.messageHistory
    assert.ok(history.some((m) => m.role === 'tool' && m.content.toolName === 'write_file'))
    // The daemon ran them, in the session's directory: the client ran nothing.
    assert.equal(fs.readFileSync(`${workdir}/hello.txt`, 'utf8'), 'Hello from the SDK\n')
    assert.equal(frames.actions('tool-call-request').length, 0)
    validated()
  })

  await t.test("a subagent turn: the subagent's tools listed, its messages not the answer", async () => {
    const chunks = []
    const result = await client.run({ agent: 'mock', prompt: 'subagent', handleStreamChunk: (c) => chunks.push(c) })
    assert.deepEqual(result.output, {
      type: 'lastMessage',
      value: 'The file picker says hello.txt holds the greeting.',
    })
    assert.equal(chunks.join(''), 'Let me find the relevant files.\n\nThe file picker says hello.txt holds the greeting.')
    const [response] = frames.actions('prompt-response')
    assert.deepEqual(response.toolCalls.map((c) => c.toolName), ['spawn_agents', 'read_files'])
    const history = result.sessionState.mainAgentState.messageHistory
    // The main agent's history: its own tool call and result, not the subagent's.
    assert.deepEqual(
      history.filter((m) => m.role === 'tool').map((m) => m.content.toolName),
      ['spawn_agents'],
    )
    validated()
  })

  await t.test('a failed turn: run() returns the error, the frame carries its typed cause', async () => {
    const result = await client.run({ agent: 'mock', prompt: 'fail' })
    const message = 'Codebuff backend unreachable (mock failure) (the agent exited with status 3)'
    assert.deepEqual(result.output, { type: 'error', message })
    assert.deepEqual(events, [{ type: 'error', message }])
    const [error] = frames.actions('prompt-error')
    assert.equal(error.error, 'backend_error')
    assert.equal(error.remainingBalance, BUDGET)
    validated()
  })

  await t.test('a budget-exhausted turn, then a prompt refused before its turn', async () => {
    const first = await client.run({ agent: 'mock', prompt: `spend ${BUDGET + 10}` })
    assert.equal(first.output.type, 'error')
    let [error] = frames.actions('prompt-error')
    assert.equal(error.error, 'budget_exhausted')
    assert.equal(error.remainingBalance, 0)
    // The SDK's run() hands back the state it sent (no session id in it): name the session
    // through the daemon's state of the failed prompt's session.
    const session = error.sessionId
    const info = await v1(daemon, `/v1/sessions/${session}`)
    assert.ok(info.cost.credits >= BUDGET)
    frames.clear()
    const state = (await generateInitialRunState({})).sessionState
    state.mainAgentState.runId = session
    const second = await client.run({ agent: 'mock', prompt: 'echo more', previousRun: { sessionState: state } })
    assert.equal(second.output.type, 'error')
    ;[error] = frames.actions('prompt-error')
    assert.equal(error.error, 'budget_exhausted')
    assert.equal(error.remainingBalance, 0)
    assert.match(error.message, /budget/)
    validated()
  })

  await t.test('run({previousRun}) continues the same session', async () => {
    const first = await client.run({ agent: 'mock', prompt: 'stream one two' })
    const session = first.sessionState.mainAgentState.runId
    const second = await client.run({ agent: 'mock', prompt: 'echo three', previousRun: first })
    assert.deepEqual(second.output, { type: 'lastMessage', value: 'three' })
    assert.equal(second.sessionState.mainAgentState.runId, session)
    // The SDK sent back the state it got, parsed by its schema: the session survived that.
    const [sent] = frames.sentActions('prompt').slice(-1)
    assert.equal(sent.sessionState.mainAgentState.runId, session)
    assert.equal(sent.sessionState.sessionId, undefined, 'the schema dropped our own field')
    const info = await v1(daemon, `/v1/sessions/${session}`)
    assert.equal(info.turns, 2)
    assert.equal(second.sessionState.mainAgentState.creditsUsed, info.cost.credits)
    validated()
  })

  await t.test('a question the client cannot answer is declined after the question timeout', async () => {
    const started = Date.now()
    const result = await client.run({ agent: 'mock', prompt: 'ask' })
    assert.deepEqual(result.output, { type: 'lastMessage', value: 'You skipped the question.' })
    assert.ok(Date.now() - started >= 1000)
    assert.equal(frames.actions('question').length, 0, 'no extension action it does not take')
    const session = result.sessionState.mainAgentState.runId
    const { events: log } = await v1(daemon, `/v1/sessions/${session}/events`)
    const resolved = log.filter((e) => e.type === 'question.resolved')
    assert.equal(resolved.length, 1)
    assert.equal(resolved[0].data.status, 'rejected')
    validated()
  })

  await t.test("a turn cancelled with the SDK's cancelInput (cancel-user-input)", async () => {
    let firstChunk
    const chunked = new Promise((resolve) => {
      firstChunk = resolve
    })
    let ended
    const end = new Promise((resolve) => {
      ended = resolve
    })
    const handler = new WebSocketHandler({
      apiKey: 'cb-test-key',
      readFiles: async () => ({}),
      handleToolCall: async () => ({ output: [] }),
      onResponseChunk: async () => firstChunk(),
      onPromptResponse: async (action) => ended(action),
      onPromptError: async (action) => ended(action),
    })
    await handler.connect()
    const promptId = `cancel-${Date.now()}`
    const { sessionState } = await generateInitialRunState({})
    handler.sendInput({
      promptId,
      prompt: 'spend 200',
      fingerprintId: 'ws-sdk-test',
      costMode: 'normal',
      sessionState,
      toolResults: [],
      agentId: 'mock',
    })
    await chunked
    handler.cancelInput({ promptId })
    const action = await end
    handler.close()
    assert.equal(action.type, 'prompt-error')
    assert.equal(action.userInputId, promptId)
    assert.equal(action.error, 'cancelled')
    // The session goes on (its status follows the turn's end a moment later).
    const info = await waitFor('the session idle again', async () => {
      const info = await v1(daemon, `/v1/sessions/${action.sessionId}`)
      return info.status === 'idle' && info
    })
    assert.ok(info.cost.credits < BUDGET, 'stopped long before the 200 steps')
    const [cancel] = frames.sentActions('cancel-user-input')
    assert.equal(cancel.promptId, promptId)
    validated()
  })

  assert.ok(checked > 20, `${checked} server messages checked against the SDK's schemas`)
  await daemon.stop()
})
