// End-to-end tests of bin/codebuff-agent.mjs: the real @codebuff/sdk against the scripted fake
// backend, plus unit tests of the adapter's pure parts. Run with `npm test` (node --test).
// Every process a test starts is killed in its finally/after.

import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { scenarios } from './scenarios.mjs'
import {
  startBackend,
  prepareWorkspace,
  adapterEnv,
  runAdapter,
  groupAlive,
  killGroup,
  afterReady,
  writeLine,
  killGroupAndWait,
  ADAPTER_BIN,
  READY_RE,
} from './harness.mjs'
import { parseArgs, UsageError } from '../src/args.mjs'
import { parseTurnLine } from '../src/turn.mjs'
import { EventTranslator } from '../src/events.mjs'
import { AskUserRelay } from '../src/ask-user.mjs'
import { PermissionRelay, describeRequest } from '../src/permissions.mjs'
import { createRedirectingFetch } from '../src/origin-redirect.mjs'
import { classifyFailure, describeFailure } from '../src/errors.mjs'
import { HttpFailureRecorder } from '../src/http-failures.mjs'
import { CostMeter, SseReader, UsageCost, creditsOf } from '../src/cost-meter.mjs'
import { isSensitiveFile, isSensitivePath, isEnvTemplateFile, dropSensitiveBlocks } from '../src/sensitive-files.mjs'

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'codebuffd-adapter-test-'))
after(() => fs.rmSync(tmpRoot, { recursive: true, force: true }))

let workspaceCounter = 0

/**
 * Runs one scenario end to end: fresh backend + workspace, adapter run, backend requests.
 * `body(ctx)` may do more runs; the backend is always stopped and every adapter's process group
 * killed. ctx.run runs the argv form; ctx.runTurn the --stdin-turn form (no key in the
 * environment; the turn's apiKey defaults to TURN_KEY, its cwd to the work dir).
 * `backendUrl` replaces the backend (e.g. an unreachable one); one is still started for `name`.
 */
async function withScenario(name, body, { backendUrl, setup } = {}) {
  const scenario = scenarios[name]
  const workspace = prepareWorkspace(path.join(tmpRoot, `${name}-${++workspaceCounter}`), scenario.files ?? {})
  setup?.(workspace)
  const backend = await startBackend(name)
  const url = backendUrl ?? backend.url
  const pids = []
  const checkStdout = (result) => {
    pids.push(result.pid)
    for (const line of result.stdout.split('\n').filter(Boolean)) {
      assert.doesNotThrow(() => JSON.parse(line), `stdout line is not JSON: ${line}`)
    }
    return result
  }
  const run = async ({ prompt = scenario.prompt, argv = [], env = {}, answers = scenario.answers, onEvent, timeoutMs } = {}) =>
    checkStdout(
      await runAdapter({
        argv: ['--cwd', workspace.workDir, ...argv],
        prompt,
        env: adapterEnv({ backendUrl: url, workspace, extra: { ...scenario.env, ...env } }),
        answers: answers ?? [],
        onEvent,
        timeoutMs,
      }),
    )
  const runTurn = async ({ turn = {}, env = {}, answers = scenario.answers, onEvent, onStderr, turnWhen, timeoutMs } = {}) =>
    checkStdout(
      await runAdapter({
        turn:
          typeof turn === 'string'
            ? turn
            : { prompt: scenario.prompt, cwd: workspace.workDir, apiKey: TURN_KEY, ...turn },
        turnWhen,
        env: adapterEnv({ backendUrl: url, workspace, extra: { ...scenario.env, ...env }, apiKey: null }),
        answers: answers ?? [],
        onEvent,
        onStderr,
        timeoutMs,
      }),
    )
  let bodyFailed = true
  try {
    const outcome = await body({ run, runTurn, backend, workspace, scenario, pids })
    bodyFailed = false
    return outcome
  } finally {
    const left = []
    for (const pid of pids) left.push(...(await killGroupAndWait(pid)))
    await backend.stop()
    // Checked only when the body passed (a failing body's error is the one worth seeing).
    if (!bodyFailed) assert.deepEqual(left, [], 'processes of the adapter groups still running')
  }
}

/** The credential of --stdin-turn runs: recognisable, so a leak anywhere is easy to find. */
const TURN_KEY = 'cb-turn-key-7Hq2xZ9'

const types = (events) => events.map((e) => e.type)
const deltasText = (events, agentId) =>
  events
    .filter((e) => e.type === 'text_delta' && e.agentId === agentId)
    .map((e) => e.text)
    .join('')
const chatRequests = (requests) => requests.filter((r) => r.path === '/api/v1/chat/completions')
const costs = (events) => events.filter((e) => e.type === 'cost').map((e) => e.totalCost)
/** The run's cost events end with one equal to finish.totalCost, right before finish. */
function assertCostsEndAtFinish(r) {
  const finish = r.events.at(-1)
  assert.equal(finish.type, 'finish')
  const lastCost = r.events.findLastIndex((e) => e.type === 'cost')
  assert.equal(r.events[lastCost].totalCost, finish.totalCost)
  assert.ok(r.events.slice(lastCost + 1, -1).every((e) => e.type !== 'cost'))
  // The metered total needed no correction: the adapter computed what the SDK computed.
  assert.doesNotMatch(r.stderr, /differs from the metered/)
}

describe('runs against the fake backend', () => {
  it('text: streams deltas, the consolidated text and finish; saves the state', async () => {
    await withScenario('text', async ({ run, workspace }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      assert.deepEqual(types(r.events), ['start', 'text_delta', 'text_delta', 'text_delta', 'text_delta', 'cost', 'text', 'finish'])
      const start = r.events[0]
      assert.match(start.sessionId, UUID_RE)
      assert.equal(start.messageHistoryLength, 0)
      assert.equal('agentId' in start, false, 'fresh start has no agentId')
      const text = r.events.find((e) => e.type === 'text')
      assert.equal(deltasText(r.events, undefined), text.text)
      assert.equal(text.text, 'Hello from the fake model.')
      const finish = r.events.at(-1)
      assert.deepEqual(finish, { type: 'finish', agentId: 'base2', totalCost: 5 })
      assert.deepEqual(r.events.find((e) => e.type === 'cost'), { type: 'cost', totalCost: 5 })
      const saved = JSON.parse(fs.readFileSync(path.join(workspace.stateDir, `${start.sessionId}.json`), 'utf8'))
      assert.equal(saved.sessionId, start.sessionId)
      assert.ok(saved.runState.sessionState.mainAgentState.messageHistory.length > 0)
    })
  })

  it('reasoning: reasoning_delta events carry the run id, then text', async () => {
    await withScenario('reasoning', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const reasoning = r.events.filter((e) => e.type === 'reasoning_delta')
      assert.equal(reasoning.map((e) => e.text).join(''), 'Let me think about this carefully.')
      for (const e of reasoning) {
        assert.equal(e.runId, 'run-0001')
        assert.deepEqual(e.ancestorRunIds, [])
      }
      const firstText = r.events.findIndex((e) => e.type === 'text_delta')
      assert.ok(r.events.findLastIndex((e) => e.type === 'reasoning_delta') < firstText)
      assert.equal(r.events.find((e) => e.type === 'text').text, 'The answer is 4.')
    })
  })

  it('tools: parallel calls edit real files, run real commands, report failures', async () => {
    await withScenario('tools', async ({ run, workspace }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const calls = r.events.filter((e) => e.type === 'tool_call')
      const results = r.events.filter((e) => e.type === 'tool_result')
      assert.deepEqual(calls.map((c) => c.toolName), [
        'write_file',
        'str_replace',
        'run_terminal_command',
        'str_replace',
        'run_terminal_command',
      ])
      // All calls, then all results in the same order.
      const lastCall = r.events.lastIndexOf(calls.at(-1))
      const firstResult = r.events.indexOf(results[0])
      assert.ok(lastCall < firstResult)
      assert.deepEqual(results.map((x) => x.toolCallId), calls.map((c) => c.toolCallId))
      for (const c of calls) assert.equal(c.agentId, 'main-agent')

      const value = (i) => results[i].output[0].value
      assert.equal(results[0].output[0].type, 'json')
      assert.equal(value(0).message, 'Created new file')
      assert.equal(typeof value(0).unifiedDiff, 'string')
      assert.match(value(1).unifiedDiff, /\+ {2}return 'Hello, ' \+ name/)
      assert.equal(value(2).exitCode, 0)
      assert.match(value(2).stdout, /Hello, /)
      assert.match(value(3).errorMessage, /does not exist/)
      assert.equal(value(4).exitCode, 3)
      assert.equal(value(4).stderr, 'failing\n')

      assert.equal(fs.readFileSync(path.join(workspace.workDir, 'notes/todo.md'), 'utf8'), '# TODO\n\n- write tests\n')
      assert.match(fs.readFileSync(path.join(workspace.workDir, 'src/greet.js'), 'utf8'), /'Hello, ' \+ name/)
      assert.equal(fs.existsSync(path.join(workspace.workDir, 'missing.txt')), false)

      // The SDK's lone "\n" after file edits is dropped; every delta belongs to a text event.
      assert.equal(r.events.some((e) => e.type === 'text_delta' && e.text === '\n'), false)
      const texts = r.events.filter((e) => e.type === 'text').map((e) => e.text).join('')
      assert.equal(deltasText(r.events, undefined), texts)
      assert.match(r.stderr, /dropped file-edit noise chunk "\\n"/)
    })
  })

  it('edit_fail: "No changes to existing files." noise is dropped too', async () => {
    await withScenario('edit_fail', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      assert.match(r.events.find((e) => e.type === 'tool_result').output[0].value.errorMessage, /does not exist/)
      assert.equal(deltasText(r.events, undefined), 'That file does not exist.')
      assert.match(r.stderr, /dropped file-edit noise chunk "No changes to existing files.\\n"/)
    })
  })

  it('terminal commands do not see CODEBUFF_API_KEY', async () => {
    await withScenario('command_env', async ({ run, workspace }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const result = r.events.find((e) => e.type === 'tool_result')
      assert.equal(result.output[0].value.stdout, `key=[] home=[${workspace.homeDir}]\n`)
      assert.equal(r.stdout.includes('test-key'), false)
    })
  })

  it('subagent: spawn_agents → subagent events → spawn result, with the SDK ids', async () => {
    await withScenario('subagent', async ({ run, backend }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const spawnCall = r.events.find((e) => e.type === 'tool_call' && e.toolName === 'spawn_agents')
      const start = r.events.find((e) => e.type === 'subagent_start')
      const finish = r.events.find((e) => e.type === 'subagent_finish')
      const spawnResult = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'spawn_agents')
      const sub = start.agentId
      assert.equal(start.agentType, 'codebuff/helper@0.0.1')
      assert.equal(start.parentAgentId, 'main-agent')
      assert.equal(start.onlyChild, true)
      const idx = (e) => r.events.indexOf(e)
      assert.ok(idx(spawnCall) < idx(start) && idx(start) < idx(finish) && idx(finish) < idx(spawnResult))

      const subCall = r.events.find((e) => e.type === 'tool_call' && e.toolName === 'read_files')
      const subResult = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'read_files')
      assert.equal(subCall.agentId, sub)
      assert.equal(subCall.parentAgentId, 'main-agent')
      assert.equal(subResult.parentAgentId, sub, 'quirk: a subagent result names the subagent itself')
      assert.match(JSON.stringify(subResult.output), /This project greets people/)

      const subTexts = r.events.filter((e) => e.type === 'text' && e.agentId === sub).map((e) => e.text).join('')
      assert.equal(deltasText(r.events, sub), subTexts)
      assert.equal(deltasText(r.events, undefined), 'Spawning the helper.The helper says the project greets people.')
      assert.equal(r.events.at(-1).totalCost, 8, 'finish includes the subagent cost')

      const requests = await backend.requests()
      assert.ok(requests.some((q) => q.path === '/api/v1/agents/codebuff/helper/latest'))
      const starts = requests.filter((q) => q.path === '/api/v1/agent-runs' && q.body?.action === 'START')
      assert.deepEqual(starts.map((q) => q.body.agentId), ['codebuff/base2@0.0.1', 'codebuff/helper@0.0.1'])
      assert.deepEqual(starts[1].body.ancestorRunIds, ['run-0001'])
    })
  })

  it('ask_user (single): the stdin answer is the tool result and reaches the model', async () => {
    await withScenario('ask_user_single', async ({ run, backend }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const call = r.events.find((e) => e.type === 'tool_call' && e.toolName === 'ask_user')
      const result = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'ask_user')
      assert.equal(result.toolCallId, call.toolCallId)
      assert.deepEqual(result.output, [{ type: 'json', value: { answers: [{ questionIndex: 0, selectedOption: 'vitest' }] } }])
      const chats = chatRequests(await backend.requests())
      assert.equal(chats.length, 2)
      const toolMessages = chats[1].body.messages.filter((m) => m.role === 'tool')
      assert.ok(toolMessages.some((m) => m.tool_call_id === call.toolCallId && m.content.includes('"selectedOption":"vitest"')))
    })
  })

  it('ask_user (multi): selectedOptions and otherText pass through', async () => {
    await withScenario('ask_user_multi', async ({ run, backend }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const result = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'ask_user')
      assert.deepEqual(result.output[0].value.answers, [
        { questionIndex: 0, otherText: 'bun' },
        { questionIndex: 1, selectedOptions: ['unit', 'snapshot'] },
      ])
      const chats = chatRequests(await backend.requests())
      assert.match(JSON.stringify(chats[1].body.messages), /selectedOptions/)
    })
  })

  it('ask_user (timeout): no answer → skipped after the question timeout', async () => {
    await withScenario('ask_user_timeout', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      const result = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'ask_user')
      assert.deepEqual(result.output, [{ type: 'json', value: { skipped: true } }])
      assert.ok(r.durationMs >= 1000)
    })
  })

  it('ask_user: an explicit skip line, and stdin EOF, both skip', async () => {
    await withScenario('ask_user_single', async ({ run }) => {
      const skipped = await run({ answers: [{ type: 'ask_user_skip' }] })
      const r1 = skipped.events.find((e) => e.type === 'tool_result')
      assert.deepEqual(r1.output[0].value, { skipped: true })
    })
    await withScenario('ask_user_single', async ({ run }) => {
      // Close stdin as soon as the question appears.
      const r = await run({ answers: [], onEvent: (e, child) => e.type === 'tool_call' && child.stdin.end() })
      assert.equal(r.exitCode, 0, r.stderr)
      assert.deepEqual(r.events.find((e) => e.type === 'tool_result').output[0].value, { skipped: true })
    })
  })

  it('continue: the second run resumes the saved state with the first run’s history', async () => {
    await withScenario('continue', async ({ run, backend, scenario }) => {
      const first = await run()
      assert.equal(first.exitCode, 0, first.stderr)
      const id = first.events[0].sessionId
      const second = await run({ prompt: scenario.continueWith.prompt, argv: ['--continue', id] })
      assert.equal(second.exitCode, 0, second.stderr)
      const start = second.events[0]
      assert.equal(start.sessionId, id)
      assert.equal(start.agentId, 'base2')
      assert.ok(start.messageHistoryLength > 0)
      const chats = chatRequests(await backend.requests())
      const history = JSON.stringify(chats.at(-1).body.messages)
      assert.ok(history.includes(scenario.prompt), 'first prompt is in the resumed history')
      assert.ok(history.includes('I will remember 42.'), 'first answer is in the resumed history')
      assert.ok(history.includes(scenario.continueWith.prompt))
    })
  })

  it('continue: an unknown or malformed session id → invalid_session, exit 2', async () => {
    await withScenario('text', async ({ run, backend }) => {
      for (const id of ['no-such-session', '../escape']) {
        const r = await run({ argv: ['--continue', id] })
        assert.equal(r.exitCode, 2)
        assert.equal(r.events.length, 1)
        assert.equal(r.events[0].type, 'error')
        assert.equal(r.events[0].code, 'invalid_session')
      }
      assert.equal((await backend.requests()).length, 0)
    })
  })

  it('payment_required: 402 → error out_of_credits, exit 1, no finish; state kept', async () => {
    await withScenario('payment_required', async ({ run, workspace }) => {
      const r = await run()
      assert.equal(r.exitCode, 1)
      assert.deepEqual(types(r.events), ['start', 'error'])
      assert.deepEqual(r.events[1], {
        type: 'error',
        message: 'Insufficient credits. Please add credits.',
        code: 'out_of_credits',
        statusCode: 402,
        fatal: true,
      })
      assert.ok(fs.existsSync(path.join(workspace.stateDir, `${r.events[0].sessionId}.json`)))
    })
  })

  it('auth_failed: 401 on /me → only an error auth_failed, exit 1', async () => {
    await withScenario('auth_failed', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 1)
      assert.deepEqual(r.events, [{ type: 'error', message: 'Invalid API key', code: 'auth_failed', statusCode: 401, fatal: true }])
    })
  })

  it('a missing CODEBUFF_API_KEY → auth_failed, exit 1, no request', async () => {
    await withScenario('text', async ({ run, backend }) => {
      const r = await run({ env: { CODEBUFF_API_KEY: '' } })
      assert.equal(r.exitCode, 1)
      assert.equal(r.events.length, 1)
      assert.equal(r.events[0].code, 'auth_failed')
      assert.equal((await backend.requests()).length, 0)
    })
  })

  for (const [signal, status] of [['SIGTERM', 143], ['SIGINT', 130]]) {
    it(`${signal} mid-run → error aborted, exit ${status} promptly, no process left, state saved`, async () => {
      await withScenario('stall', async ({ run, workspace }) => {
        let sentAt = 0
        const r = await run({
          onEvent: (e, child) => {
            if (e.type === 'text_delta' && !sentAt) {
              sentAt = Date.now()
              child.kill(signal)
            }
          },
          timeoutMs: 15_000,
        })
        assert.ok(sentAt > 0, 'the stalled reply streamed a first chunk')
        assert.equal(r.exitCode, status, r.stderr)
        assert.ok(r.exitedAt - sentAt < 2500, `exited ${r.exitedAt - sentAt} ms after ${signal}`)
        const last = r.events.at(-1)
        assert.equal(last.type, 'error')
        assert.equal(last.code, 'aborted')
        assert.equal(r.events.some((e) => e.type === 'finish'), false)
        assert.equal(groupAlive(r.pid), false, 'no process of the adapter group is left')
        const sessionId = r.events[0].sessionId
        const saved = JSON.parse(fs.readFileSync(path.join(workspace.stateDir, `${sessionId}.json`), 'utf8'))
        assert.ok(saved.runState.sessionState, 'the aborted run state was saved')
      })
    })
  }

  it('--timeout 1 with a stalled reply → error timeout, exit 124', async () => {
    await withScenario('stall', async ({ run }) => {
      const r = await run({ argv: ['--timeout', '1'], timeoutMs: 15_000 })
      assert.equal(r.exitCode, 124, r.stderr)
      assert.equal(r.events.at(-1).code, 'timeout')
      assert.ok(r.durationMs < 6000, `took ${r.durationMs} ms`)
      assert.equal(groupAlive(r.pid), false)
    })
  })

  it('mode flags pick base2-lite/max/plan and the cost mode, like the CLI', async () => {
    await withScenario('text', async ({ run, backend }) => {
      const expected = {
        '--free': ['base2-lite', 'lite'],
        '--lite': ['base2-lite', 'lite'],
        '--max': ['base2-max', 'max'],
        '--plan': ['base2-plan', 'normal'],
      }
      let seen = 0
      for (const [flag, [agentId, costMode]] of Object.entries(expected)) {
        const r = await run({ argv: [flag] })
        assert.equal(r.exitCode, 0, r.stderr)
        assert.equal(r.events.at(-1).agentId, agentId)
        const requests = (await backend.requests()).slice(seen)
        seen += requests.length
        assert.ok(requests.some((q) => q.path === `/api/v1/agents/codebuff/${agentId}/latest`))
        const chat = chatRequests(requests)[0]
        assert.equal(chat.body.model, `fake/${agentId}-model`)
        assert.equal(chat.body.codebuff_metadata.cost_mode, costMode)
      }
    })
  })

  it('--model overrides the root agent model without sticking to the saved state', async () => {
    await withScenario('text', async ({ run, backend, workspace }) => {
      const r = await run({ argv: ['--model', 'openai/gpt-test'] })
      assert.equal(r.exitCode, 0, r.stderr)
      const chat = chatRequests(await backend.requests())[0]
      assert.equal(chat.body.model, 'openai/gpt-test')
      const saved = JSON.parse(fs.readFileSync(path.join(workspace.stateDir, `${r.events[0].sessionId}.json`), 'utf8'))
      assert.equal('base2' in saved.runState.sessionState.fileContext.agentTemplates, false)
      const again = await run({ argv: ['--continue', r.events[0].sessionId], prompt: 'again' })
      assert.equal(again.exitCode, 0, again.stderr)
      assert.equal(chatRequests(await backend.requests()).at(-1).body.model, 'fake/base2-model')
    })
  })

  it('bad arguments → invalid_arguments, exit 2', async () => {
    await withScenario('text', async ({ run }) => {
      for (const argv of [['--timeout', 'soon'], ['--bogus'], ['--max', '--plan']]) {
        const r = await run({ argv })
        assert.equal(r.exitCode, 2, JSON.stringify(argv))
        assert.equal(r.events.length, 1)
        assert.equal(r.events[0].code, 'invalid_arguments')
      }
    })
  })
})

describe('cost as it grows', () => {
  it('budget_steps: one cost event per model request as soon as it is known, increasing, the last equal to finish.totalCost', async () => {
    await withScenario('budget_steps', async ({ runTurn, backend }) => {
      const r = await runTurn({ turn: { permissionMode: 'bypass' } })
      assert.equal(r.exitCode, 0, r.stderr)
      // 2 credits (0.02 USD × 1.055 × 100, rounded) per step, 1 for the final text.
      assert.deepEqual(costs(r.events), [2, 4, 6, 8, 10, 11])
      assert.deepEqual(r.events.filter((e) => e.type === 'cost')[0], { type: 'cost', totalCost: 2 })
      assert.deepEqual(r.events.at(-1), { type: 'finish', agentId: 'base2', totalCost: 11 })
      assertCostsEndAtFinish(r)
      assert.equal(chatRequests(await backend.requests()).length, 6)
      // Step n's cost is printed after its reply streamed and before step n+1 starts.
      const at = (predicate) => r.events.findIndex(predicate)
      for (let n = 1; n <= 5; n++) {
        const cost = at((e) => e.type === 'cost' && e.totalCost === 2 * n)
        assert.ok(at((e) => e.type === 'text_delta' && e.text === `Step ${n}.`) < cost, `cost of step ${n} after its reply`)
        const next = n < 5 ? `Step ${n + 1}.` : 'All five'
        assert.ok(cost < at((e) => e.type === 'text_delta' && e.text === next), `cost of step ${n} before the next step`)
      }
      assert.deepEqual(
        r.events.filter((e) => e.type === 'tool_result').map((e) => e.output[0].value.stdout),
        ['step 1\n', 'step 2\n', 'step 3\n', 'step 4\n', 'step 5\n'],
      )
    })
  })

  it('tools and subagent: the subagent\'s requests are counted while it runs; the last cost equals finish.totalCost', async () => {
    await withScenario('tools', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      assert.deepEqual(costs(r.events), [5, 7])
      assertCostsEndAtFinish(r)
    })
    await withScenario('subagent', async ({ run }) => {
      const r = await run()
      assert.equal(r.exitCode, 0, r.stderr)
      // main 0.04 USD → 4; helper 0.01 → 1, 0.01 → 1; main 0.02 → 2.
      assert.deepEqual(costs(r.events), [4, 5, 6, 8])
      assertCostsEndAtFinish(r)
      const idx = (predicate) => r.events.findIndex(predicate)
      const subStart = idx((e) => e.type === 'subagent_start')
      const subFinish = idx((e) => e.type === 'subagent_finish')
      for (const total of [5, 6]) {
        const at = idx((e) => e.type === 'cost' && e.totalCost === total)
        assert.ok(subStart < at && at < subFinish, `the helper's request (total ${total}) is counted before the helper ends`)
      }
    })
  })

  it('a run stopped mid-turn (as for a spent budget) has printed the cost so far', async () => {
    await withScenario('budget_steps', async ({ runTurn }) => {
      let stoppedAt = null
      const r = await runTurn({
        onEvent: (e, child) => {
          if (e.type === 'cost' && e.totalCost >= 5 && stoppedAt === null) {
            stoppedAt = e.totalCost
            child.kill('SIGINT')
          }
        },
      })
      assert.equal(stoppedAt, 6)
      assert.equal(r.exitCode, 130, r.stderr)
      const printed = costs(r.events)
      assert.deepEqual(printed, [2, 4, 6, 8, 10, 11].slice(0, printed.length))
      assert.ok(printed.includes(6))
      assert.equal(r.events.some((e) => e.type === 'finish'), false)
      assert.equal(r.events.at(-1).code, 'aborted')
    })
  })
})

// Concurrency 2: the unreachable-backend test spends ~8 s in the SDK's retry back-off, idle.
describe('truthful endings: one fatal error, no finish', { concurrency: 2 }, () => {
  /**
   * A port nothing listens on: bindable now, and below the ephemeral range, so no backend that
   * another test starts meanwhile (on port 0) can take it.
   */
  async function closedPort() {
    const net = await import('node:net')
    for (;;) {
      const port = 20000 + Math.floor(Math.random() * 10000)
      const server = net.createServer()
      const ok = await new Promise((resolve) => {
        server.once('error', () => resolve(false))
        server.listen(port, '127.0.0.1', () => resolve(true))
      })
      if (ok) {
        await new Promise((resolve) => server.close(resolve))
        return port
      }
    }
  }

  const cases = [
    ['auth_failed', '401 on /me', { code: 'auth_failed', statusCode: 401, message: 'Invalid API key', started: false }],
    ['payment_required', '402 on chat', { code: 'out_of_credits', statusCode: 402, message: 'Insufficient credits. Please add credits.' }],
    ['account_suspended', '403 on chat', { code: 'account_suspended', statusCode: 403, message: 'Your account has been suspended for abuse.' }],
    ['rate_limited', '429 on chat (after the SDK\'s retries)', { code: 'rate_limited', statusCode: 429, message: 'Too many requests: try again in 20 seconds.' }],
    ['server_error', '500 on chat (after the SDK\'s retries)', { code: 'backend_error', statusCode: 500, message: 'The upstream model provider crashed.' }],
    ['model_unavailable', '400 on chat', { code: 'invalid_request', statusCode: 400, message: 'model fake/base2-model is not available' }],
    ['stream_break', 'a stream that breaks mid-way', { code: 'backend_error', message: "The Codebuff backend's response stream broke (terminated)", deltas: 'Hello there' }],
  ]
  for (const [name, what, expected] of cases) {
    it(`${what} → ${expected.code}${expected.statusCode ? ` ${expected.statusCode}` : ''}, the backend's message, exit 1`, async () => {
      await withScenario(name, async ({ runTurn, backend }) => {
        const r = await runTurn()
        assert.equal(r.exitCode, 1, r.stderr)
        assert.equal(r.events.some((e) => e.type === 'finish'), false, 'no finish')
        const errors = r.events.filter((e) => e.type === 'error')
        assert.equal(errors.length, 1)
        assert.deepEqual(r.events.at(-1), {
          type: 'error',
          message: expected.message,
          code: expected.code,
          ...(expected.statusCode && { statusCode: expected.statusCode }),
          fatal: true,
        })
        assert.equal(r.events[0].type, expected.started === false ? 'error' : 'start')
        // No request completed: no cost (a broken stream counts for the SDK neither).
        assert.deepEqual(costs(r.events), [])
        if (expected.deltas) assert.equal(deltasText(r.events, undefined), expected.deltas)
        if (name === 'rate_limited' || name === 'server_error') {
          // The SDK retried (4 attempts) before giving up.
          assert.equal(chatRequests(await backend.requests()).length, 4)
          assert.match(r.stderr, /Failed after 4 attempts/)
        }
        if (!['auth_failed', 'payment_required'].includes(name)) {
          // The SDK emitted its finish before failing; the adapter held it back.
          assert.match(r.stderr, /the SDK emitted finish before the run failed; not printed: \{"type":"finish"/)
        }
      })
    })
  }

  it('an unreachable backend → network_error, exit 1', async () => {
    const port = await closedPort()
    await withScenario(
      'text',
      async ({ runTurn }) => {
        const r = await runTurn({ timeoutMs: 30_000 })
        assert.equal(r.exitCode, 1, r.stderr)
        assert.deepEqual(r.events, [
          {
            type: 'error',
            message: 'Cannot reach the Codebuff backend (https://www.codebuff.com): ECONNREFUSED',
            code: 'network_error',
            fatal: true,
          },
        ])
      },
      { backendUrl: `http://127.0.0.1:${port}` },
    )
  })
})

describe('sensitive files', () => {
  /** Makes the work dir a git repository whose every file has uncommitted changes. */
  function gitRepoWithChanges(workspace) {
    const git = (...args) =>
      execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...args], {
        cwd: workspace.workDir,
        env: { PATH: process.env.PATH, HOME: workspace.homeDir, GIT_CONFIG_NOSYSTEM: '1' },
        stdio: 'pipe',
      })
    const files = scenarios.sensitive_files.files
    const old = (content) => content.replace(/SECRET-([A-Z]+)-/g, 'SECRET-$1-OLD-').replace('ordinary-content', 'ordinary-old-line')
    for (const [rel, content] of Object.entries(files)) fs.writeFileSync(path.join(workspace.workDir, rel), old(content))
    git('init', '-q')
    git('add', '-A')
    git('commit', '-q', '-m', 'initial')
    for (const [rel, content] of Object.entries(files)) fs.writeFileSync(path.join(workspace.workDir, rel), content)
    const diff = git('diff').toString()
    assert.match(diff, /SECRET-ENV-77c2/, 'the unfiltered git diff shows the secret')
  }

  it('private keys, .env, *.pem never reach the backend (read_files, code_search, git diff); ordinary files and templates do', async () => {
    await withScenario(
      'sensitive_files',
      async ({ runTurn, backend }) => {
        const r = await runTurn()
        assert.equal(r.exitCode, 0, r.stderr)
        const requests = await backend.requests()
        const everything = JSON.stringify(requests)
        for (const secret of ['SECRET-RSA', 'SECRET-ENV', 'SECRET-PEM']) {
          assert.equal(everything.includes(secret), false, `${secret} reached the backend`)
          assert.equal(r.stdout.includes(secret), false, `${secret} is on stdout`)
        }
        const chats = chatRequests(requests)
        assert.equal(chats.length, 2)
        const first = JSON.stringify(chats[0].body.messages)
        const second = JSON.stringify(chats[1].body.messages)
        // The context the SDK gathered: file tree (names only) and the git diff of the ordinary file.
        assert.match(first, /notes\.txt/)
        assert.match(first, /id_rsa/, 'file names stay in the tree')
        assert.match(first, /-ordinary-old-line/, 'the git diff is in the context')
        // read_files: the ordinary file and the template (marked) arrive; the others are blocked.
        const read = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'read_files')
        const readText = JSON.stringify(read.output)
        assert.match(readText, /ordinary-content-5d3e/)
        assert.match(readText, /\[TEMPLATE\]\\nAPI_TOKEN=<your token here>/)
        assert.match(second, /ordinary-content-5d3e/)
        // code_search found the ordinary and template lines, not the secrets.
        const search = r.events.find((e) => e.type === 'tool_result' && e.toolName === 'code_search')
        assert.match(search.output[0].value.stdout, /notes\.txt:\n1:ordinary-content-5d3e/)
        assert.doesNotMatch(search.output[0].value.stdout, /id_rsa|deploy\.pem|^\.env:/m)
      },
      { setup: gitRepoWithChanges },
    )
  })
})

describe('permission requests (permissionMode "ask")', () => {
  /**
   * Runs a scenario in "ask" mode; `decide(request, workspace)` returns a permission_reply (without
   * type/requestId) or null to close stdin instead.
   */
  async function runAsking(name, decide) {
    return withScenario(name, async ({ runTurn, backend, workspace }) => {
      const seenBefore = []
      const r = await runTurn({
        turn: { permissionMode: 'ask' },
        onEvent: (event, child) => {
          if (event.type !== 'permission_request') return
          seenBefore.push({ request: event, files: snapshot(workspace) })
          const reply = decide(event, workspace)
          if (reply === null) child.stdin.end()
          else writeLine(child, { type: 'permission_reply', requestId: event.requestId, ...reply })
        },
      })
      return { r, requests: await backend.requests(), workspace, seenBefore }
    })
  }

  async function runBypass(name) {
    return withScenario(name, async ({ runTurn, workspace }) => {
      const r = await runTurn()
      return { r, workspace }
    })
  }

  /** Relative path → content of every file in the work dir. */
  function snapshot(workspace) {
    const out = {}
    const walk = (dir) => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const full = path.join(dir, entry.name)
        if (entry.isDirectory()) walk(full)
        else out[path.relative(workspace.workDir, full)] = fs.readFileSync(full, 'utf8')
      }
    }
    walk(workspace.workDir)
    return out
  }

  const toolResults = (events) => events.filter((e) => e.type === 'tool_result').map((e) => ({ toolName: e.toolName, output: e.output }))

  it('each mutating call asks first, with the toolCallId of its tool_call; reject → nothing happens, the model is told', async () => {
    const { r, requests, workspace, seenBefore } = await runAsking('permissions', () => ({ decision: 'reject', message: 'not in this repo' }))
    assert.equal(r.exitCode, 0, r.stderr)
    const calls = r.events.filter((e) => e.type === 'tool_call')
    const asked = r.events.filter((e) => e.type === 'permission_request')
    assert.equal(asked.length, 2)
    const [write, cmd] = asked
    assert.deepEqual(
      { ...write, requestId: undefined },
      {
        type: 'permission_request',
        requestId: undefined,
        toolCallId: calls[0].toolCallId,
        toolName: 'write_file',
        kind: 'edit',
        title: 'Write notes/todo.md',
        paths: ['notes/todo.md'],
        input: calls[0].input,
      },
    )
    assert.deepEqual(
      { ...cmd, requestId: undefined },
      {
        type: 'permission_request',
        requestId: undefined,
        toolCallId: calls[1].toolCallId,
        toolName: 'run_terminal_command',
        kind: 'execute',
        title: 'Run `echo ran > ran.txt; echo command-output`',
        command: 'echo ran > ran.txt; echo command-output',
        paths: [],
        input: calls[1].input,
      },
    )
    assert.notEqual(write.requestId, cmd.requestId)
    // Each request comes after its tool_call and before its tool_result.
    for (const [i, request] of asked.entries()) {
      const at = r.events.indexOf(request)
      assert.ok(r.events.indexOf(calls[i]) < at)
      assert.ok(at < r.events.findIndex((e) => e.type === 'tool_result' && e.toolCallId === calls[i].toolCallId))
    }
    const denial = 'The user rejected this tool call: not in this repo'
    assert.deepEqual(toolResults(r.events), [
      { toolName: 'write_file', output: [{ type: 'json', value: { errorMessage: denial } }] },
      { toolName: 'run_terminal_command', output: [{ type: 'json', value: { errorMessage: denial } }] },
    ])
    assert.deepEqual(Object.keys(snapshot(workspace)), [], 'nothing written, nothing run')
    assert.equal(seenBefore.length, 2)
    const next = JSON.stringify(chatRequests(requests)[1].body.messages)
    assert.equal(next.split(denial).length - 1, 2, 'the model sees both denials')
  })

  it('allow → nothing before the answer, then the same results and files as ungated Codebuff', async () => {
    const ungated = await runBypass('permissions')
    assert.equal(ungated.r.events.some((e) => e.type === 'permission_request'), false, 'bypass never asks')
    const { r, workspace, seenBefore } = await runAsking('permissions', () => ({ decision: 'allow' }))
    assert.equal(r.exitCode, 0, r.stderr)
    assert.deepEqual(seenBefore.map((s) => Object.keys(s.files)), [[], ['notes/todo.md']], 'each tool waited for its answer')
    assert.deepEqual(toolResults(r.events), toolResults(ungated.r.events))
    assert.equal(toolResults(r.events)[0].output[0].value.message, 'Created new file')
    assert.equal(toolResults(r.events)[1].output[0].value.stdout, 'command-output\n')
    assert.deepEqual(snapshot(workspace), snapshot(ungated.workspace))
    assert.equal(fs.readFileSync(path.join(workspace.workDir, 'ran.txt'), 'utf8'), 'ran\n')
  })

  it('str_replace and apply_patch (update, delete) ask with their kinds; allowed, they match ungated Codebuff', async () => {
    const ungated = await runBypass('permissions_patch')
    const { r, workspace } = await runAsking('permissions_patch', () => ({ decision: 'allow' }))
    assert.equal(r.exitCode, 0, r.stderr)
    const asked = r.events.filter((e) => e.type === 'permission_request')
    assert.deepEqual(
      asked.map((a) => [a.toolName, a.kind, a.title, a.paths]),
      [
        ['str_replace', 'edit', 'Edit src/greet.js', ['src/greet.js']],
        ['apply_patch', 'edit', 'Edit lib/fib.txt', ['lib/fib.txt']],
        ['apply_patch', 'delete', 'Delete old.txt', ['old.txt']],
      ],
    )
    assert.deepEqual(toolResults(r.events), toolResults(ungated.r.events))
    assert.equal(toolResults(r.events)[1].output[0].value.message, 'Applied 1 patch operation.')
    assert.deepEqual(snapshot(workspace), snapshot(ungated.workspace))
    assert.equal(fs.readFileSync(path.join(workspace.workDir, 'lib/fib.txt'), 'utf8'), 'one\nTWO\nthree\n')
    assert.equal(fs.existsSync(path.join(workspace.workDir, 'old.txt')), false)
  })

  it('permissions_repeat: bypass runs both steps; "ask" asks for every call (the identical command again), allowed it matches bypass', async () => {
    const ungated = await runBypass('permissions_repeat')
    assert.equal(ungated.r.exitCode, 0, ungated.r.stderr)
    assert.equal(ungated.r.events.some((e) => e.type === 'permission_request'), false)
    assert.deepEqual(snapshot(ungated.workspace), { 'first.txt': 'first\n', 'log.txt': 'one\none\n', 'second.txt': 'second\n' })
    assert.equal(ungated.r.events.findLast((e) => e.type === 'text').text, 'Done.')
    assert.deepEqual(costs(ungated.r.events), [1, 2, 3])
    assertCostsEndAtFinish(ungated.r)

    const { r, workspace, seenBefore } = await runAsking('permissions_repeat', () => ({ decision: 'allow' }))
    assert.equal(r.exitCode, 0, r.stderr)
    const calls = r.events.filter((e) => e.type === 'tool_call')
    const asked = r.events.filter((e) => e.type === 'permission_request')
    const log = ['run_terminal_command', 'execute', 'Run `echo one >> log.txt`', 'echo one >> log.txt', []]
    assert.deepEqual(
      asked.map((a) => [a.toolName, a.kind, a.title, a.command, a.paths]),
      [
        ['write_file', 'edit', 'Write first.txt', undefined, ['first.txt']],
        log,
        ['write_file', 'edit', 'Write second.txt', undefined, ['second.txt']],
        log,
      ],
    )
    assert.deepEqual(asked.map((a) => a.toolCallId), calls.map((c) => c.toolCallId))
    assert.equal(new Set(asked.map((a) => a.requestId)).size, 4, 'a new request each time')
    assert.deepEqual(asked[3].input, asked[1].input, 'the second command is identical to the first')
    // Each call waited for its answer: the files before each request.
    const sorted = (files) => Object.fromEntries(Object.entries(files).sort())
    assert.deepEqual(seenBefore.map((s) => sorted(s.files)), [
      {},
      { 'first.txt': 'first\n' },
      { 'first.txt': 'first\n', 'log.txt': 'one\n' },
      { 'first.txt': 'first\n', 'log.txt': 'one\n', 'second.txt': 'second\n' },
    ])
    assert.deepEqual(toolResults(r.events), toolResults(ungated.r.events))
    assert.deepEqual(snapshot(workspace), snapshot(ungated.workspace))
    assert.equal(r.events.findLast((e) => e.type === 'text').text, 'Done.')
    assertCostsEndAtFinish(r)
  })

  it('stdin closing rejects the open request and every later one', async () => {
    const { r, workspace } = await runAsking('permissions', () => null)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.events.filter((e) => e.type === 'permission_request').length, 1, 'no request after EOF')
    const denial = 'The user rejected this tool call: stdin closed'
    assert.deepEqual(
      toolResults(r.events).map((t) => t.output[0].value.errorMessage),
      [denial, denial],
    )
    assert.deepEqual(Object.keys(snapshot(workspace)), [])
  })
})

describe('background commands', () => {
  /** [state, pgid] of a process from /proc/PID/stat, or null when it is gone. */
  function procStat(pid) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      return { state: fields[0], pgid: Number(fields[2]) }
    } catch {
      return null
    }
  }
  const running = (pid) => {
    const stat = procStat(pid)
    return stat !== null && stat.state !== 'Z'
  }

  it('BACKGROUND starts the command in the adapter\'s process group, returns its pid and first output; the group kill ends it', async () => {
    await withScenario('background', async ({ runTurn, backend, workspace }) => {
      const r = await runTurn()
      assert.equal(r.exitCode, 0, r.stderr)
      const [bg, failed] = r.events.filter((e) => e.type === 'tool_result').map((e) => e.output[0].value)
      assert.equal(bg.command, 'echo started-bg; echo to-stderr >&2; exec sleep 60')
      assert.equal(bg.backgroundProcessStatus, 'running')
      assert.equal(typeof bg.processId, 'number')
      assert.match(bg.stdout, /started-bg\n/)
      assert.match(bg.stdout, /to-stderr\n/)
      assert.ok(bg.logFile.startsWith(path.join(workspace.stateDir, 'background')), bg.logFile)
      assert.equal('exitCode' in bg, false)
      assert.deepEqual(
        { status: failed.backgroundProcessStatus, exitCode: failed.exitCode, stdout: failed.stdout },
        { status: 'error', exitCode: 3, stdout: 'quick\n' },
      )
      // The model saw the pid.
      assert.ok(JSON.stringify(chatRequests(await backend.requests())[1].body.messages).includes(String(bg.processId)))

      // The adapter has exited; the command lives on in its process group...
      assert.ok(running(bg.processId), 'the background command outlives the adapter process')
      assert.equal(procStat(bg.processId).pgid, r.pid, 'in the adapter\'s process group')
      // ...until the group is killed, as the daemon does.
      killGroup(r.pid, 'SIGTERM')
      const deadline = Date.now() + 3000
      while (running(bg.processId) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
      assert.equal(running(bg.processId), false, 'the group kill ended the background command')
      assert.equal(groupAlive(r.pid) && running(bg.processId), false)
    })
  })

  it('in "ask" mode a BACKGROUND command asks first', async () => {
    await withScenario('background', async ({ runTurn }) => {
      const r = await runTurn({
        turn: { permissionMode: 'ask' },
        onEvent: (event, child) => {
          if (event.type === 'permission_request') writeLine(child, { type: 'permission_reply', requestId: event.requestId, decision: 'reject' })
        },
      })
      assert.equal(r.exitCode, 0, r.stderr)
      const asked = r.events.filter((e) => e.type === 'permission_request')
      assert.deepEqual(asked.map((a) => a.title), [
        'Run `echo started-bg; echo to-stderr >&2; exec sleep 60` in the background',
        'Run `echo quick; exit 3` in the background',
      ])
      assert.deepEqual(
        r.events.filter((e) => e.type === 'tool_result').map((e) => e.output[0].value.errorMessage),
        ['The user rejected this tool call.', 'The user rejected this tool call.'],
      )
    })
  })
})

describe('images', () => {
  // A 1×1 PNG.
  const PNG = Buffer.from(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
    'base64',
  )

  it('turn images reach the model as image content parts, not as paths in the text', async () => {
    await withScenario(
      'text',
      async ({ runTurn, backend, workspace }) => {
        const r = await runTurn({
          turn: {
            prompt: 'What is in these pictures?',
            images: [{ path: path.join(workspace.workDir, 'shot.png'), mime: 'image/png' }, { path: 'pics/second.png' }],
          },
        })
        assert.equal(r.exitCode, 0, r.stderr)
        const chat = chatRequests(await backend.requests())[0]
        const user = chat.body.messages.filter((m) => m.role === 'user' && Array.isArray(m.content) && m.content.some((p) => p.type === 'image_url'))
        assert.equal(user.length, 1, JSON.stringify(chat.body.messages))
        const parts = user[0].content
        const url = `data:image/png;base64,${PNG.toString('base64')}`
        assert.deepEqual(
          parts.filter((p) => p.type === 'image_url').map((p) => p.image_url.url),
          [url, url],
        )
        const text = parts.filter((p) => p.type === 'text').map((p) => p.text).join('')
        assert.match(text, /What is in these pictures\?/)
        assert.doesNotMatch(JSON.stringify(chat.body.messages), /shot\.png|second\.png/)
      },
      {
        setup: (workspace) => {
          fs.writeFileSync(path.join(workspace.workDir, 'shot.png'), PNG)
          fs.mkdirSync(path.join(workspace.workDir, 'pics'))
          fs.writeFileSync(path.join(workspace.workDir, 'pics/second.png'), PNG)
        },
      },
    )
  })
})

describe('--stdin-turn', () => {
  it('the turn on stdin (after the ready line, no key in the environment) runs like the argv form; the SDK is loaded before the turn', async (t) => {
    await withScenario('text', async ({ runTurn, backend }) => {
      let idleRssKiB
      let firstEventAt
      const r = await runTurn({
        turnWhen: async (child, getStderr) => {
          await afterReady(300)(child, getStderr)
          idleRssKiB = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1])
        },
        onEvent: () => (firstEventAt ??= Date.now()),
      })
      assert.equal(r.exitCode, 0, r.stderr)
      // Warm start: the SDK import is paid before the turn line, so the first event follows the
      // turn line much sooner than the process became ready.
      const readyMs = Number(READY_RE.exec(r.stderr)[1])
      const turnToFirstEvent = firstEventAt - r.turnWrittenAt
      t.diagnostic(`spawn → ready ${readyMs} ms; turn line → first event ${turnToFirstEvent} ms; idle RSS ${idleRssKiB} KiB`)
      assert.ok(turnToFirstEvent < readyMs, `turn → first event ${turnToFirstEvent} ms, spawn → ready ${readyMs} ms`)
      assert.deepEqual(types(r.events), ['start', 'text_delta', 'text_delta', 'text_delta', 'text_delta', 'cost', 'text', 'finish'])
      assert.match(r.events[0].sessionId, UUID_RE)
      assert.equal(r.events.find((e) => e.type === 'text').text, 'Hello from the fake model.')
      assert.deepEqual(r.events.at(-1), { type: 'finish', agentId: 'base2', totalCost: 5 })
      // The SDK authenticates with the turn's key.
      const requests = await backend.requests()
      const me = requests.find((q) => q.path.startsWith('/api/v1/me'))
      assert.equal(me.authorization, `Bearer ${TURN_KEY}`)
      assert.ok(chatRequests(requests).every((q) => q.authorization === `Bearer ${TURN_KEY}`))
      assert.match(chatRequests(requests)[0].body.messages.map((m) => JSON.stringify(m.content)).join(''), /Say hello\./)
    })
  })

  it('stdin closing before a turn → exit 0 without output', async () => {
    await withScenario('text', async ({ backend, workspace, pids }) => {
      const child = spawn(process.execPath, [ADAPTER_BIN, '--stream-json', '--stdin-turn'], {
        env: adapterEnv({ backendUrl: backend.url, workspace, apiKey: null }),
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: true,
      })
      pids.push(child.pid)
      let stdout = ''
      let stderr = ''
      child.stdout.on('data', (c) => (stdout += c))
      child.stderr.on('data', (c) => (stderr += c))
      await afterReady(0)(child, () => stderr)
      child.stdin.end()
      const code = await new Promise((resolve) => child.once('close', resolve))
      assert.equal(code, 0, stderr)
      assert.equal(stdout, '')
      assert.equal(groupAlive(child.pid), false)
      assert.equal((await backend.requests()).length, 0)
    })
  })

  it('SIGTERM before a turn → exit 143 without output', async () => {
    await withScenario('text', async ({ backend, workspace, pids }) => {
      const child = spawn(process.execPath, [ADAPTER_BIN, '--stream-json', '--stdin-turn'], {
        env: adapterEnv({ backendUrl: backend.url, workspace, apiKey: null }),
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: true,
      })
      pids.push(child.pid)
      let stdout = ''
      let stderr = ''
      child.stdout.on('data', (c) => (stdout += c))
      child.stderr.on('data', (c) => (stderr += c))
      await afterReady(0)(child, () => stderr)
      child.kill('SIGTERM')
      const [code, signal] = await new Promise((resolve) => child.once('close', (c, s) => resolve([c, s])))
      assert.deepEqual([code, signal], [143, null], stderr)
      assert.equal(stdout, '')
    })
  })

  it('the key stays secret: not in any command\'s environment, not in /proc/$PPID/environ, not on stdout/stderr; the SDK still authenticates', async () => {
    const key = 'cb-SECRET-key-Zx81Lq0w'
    await withScenario('secret_env', async ({ runTurn, backend, workspace }) => {
      const r = await runTurn({ turn: { apiKey: key, env: { PROJECT: 'demo' } } })
      assert.equal(r.exitCode, 0, r.stderr)
      const result = r.events.find((e) => e.type === 'tool_result')
      const stdout = result.output[0].value.stdout
      // The command really ran, saw the turn's env and cwd, and printed both environments.
      assert.match(stdout, /\nPROJECT=demo\n/)
      assert.match(stdout, new RegExp(`pwd=\\[${workspace.workDir}\\]`))
      assert.match(stdout, /CODEBUFFD_TEST_BACKEND_URL=/, 'the adapter environ was read')
      assert.equal(stdout.includes(key), false, 'the key is in the command output')
      assert.equal(r.stdout.includes(key), false, 'the key is on stdout')
      assert.equal(r.stderr.includes(key), false, 'the key is on stderr')
      const requests = await backend.requests()
      // The model saw the command output (in the next chat request): without the key.
      const chats = chatRequests(requests)
      assert.equal(chats.length, 2)
      assert.ok(JSON.stringify(chats[1].body.messages).includes('PROJECT=demo'))
      for (const q of requests) assert.equal(JSON.stringify(q.body ?? '').includes(key), false, `the key is in the body of ${q.path}`)
      // ...while the SDK authenticated with it.
      assert.equal(requests.find((q) => q.path.startsWith('/api/v1/me')).authorization, `Bearer ${key}`)
      assert.ok(chats.every((q) => q.authorization === `Bearer ${key}`))
    })
  })

  it('a malformed turn line → invalid_arguments, exit 2, no request', async () => {
    await withScenario('text', async ({ runTurn, backend, workspace }) => {
      // (Field-by-field validation is unit-tested with parseTurnLine.)
      const bad = [
        'not json',
        JSON.stringify({ type: 'turn', prompt: 'x', mode: 'turbo' }),
        JSON.stringify({ type: 'turn', prompt: 'x', cwd: path.join(workspace.root, 'missing'), apiKey: 'k' }),
        JSON.stringify({ type: 'turn', prompt: 'x', cwd: workspace.workDir, apiKey: 'k', images: [{ path: 'nope.png' }] }),
      ]
      for (const line of bad) {
        const r = await runTurn({ turn: line })
        assert.equal(r.exitCode, 2, line)
        assert.equal(r.events.length, 1, line)
        assert.equal(r.events[0].code, 'invalid_arguments', line)
        assert.equal(r.events[0].fatal, true)
      }
      assert.equal((await backend.requests()).length, 0)
    })
  })

  it('no apiKey in the turn → auth_failed, exit 1, no request (a key in the environment is not used)', async () => {
    await withScenario('text', async ({ runTurn, backend }) => {
      const r = await runTurn({ turn: { apiKey: null }, env: { CODEBUFF_API_KEY: 'env-key' } })
      assert.equal(r.exitCode, 1)
      assert.deepEqual(types(r.events), ['error'])
      assert.equal(r.events[0].code, 'auth_failed')
      assert.equal((await backend.requests()).length, 0)
    })
  })

  it('timeoutSeconds counts from the turn line, not from the start of the process', async () => {
    await withScenario('stall', async ({ runTurn }) => {
      // Idle 1.5 s before the turn; a timeout counted from the start would fire before the run.
      const r = await runTurn({ turn: { timeoutSeconds: 1 }, turnWhen: afterReady(1500), timeoutMs: 20_000 })
      assert.equal(r.exitCode, 124, r.stderr)
      assert.ok(r.events.some((e) => e.type === 'text_delta' && e.text === 'Working'), 'the run started')
      assert.deepEqual(r.events.at(-1), { type: 'error', message: 'Run timed out after 1 s', code: 'timeout', fatal: true })
      const sinceTurn = r.exitedAt - r.turnWrittenAt
      assert.ok(sinceTurn >= 1000 && sinceTurn < 5000, `exited ${sinceTurn} ms after the turn line`)
      assert.equal(groupAlive(r.pid), false)
    })
  })
})

describe('unit', () => {
  it('parseArgs: the prompt is the last element even if it looks like a flag', () => {
    assert.deepEqual(parseArgs(['--stream-json', '--max', '--timeout', '5', '--cwd', '/w', '--model', 'm', '--continue', 'abc', '--help me']), {
      prompt: '--help me',
      mode: 'max',
      continueId: 'abc',
      timeoutSeconds: 5,
      cwd: '/w',
      model: 'm',
      streamJson: true,
    })
    assert.equal(parseArgs(['--free', 'p']).mode, 'lite')
    assert.equal(parseArgs(['--stream-json', '--', '-h please']).prompt, '-h please')
    assert.equal(parseArgs(['--timeout=2.5', 'p']).timeoutSeconds, 2.5)
    assert.throws(() => parseArgs([]), UsageError)
    assert.throws(() => parseArgs(['--cwd', 'p']), UsageError)
    assert.throws(() => parseArgs(['--timeout', '0', 'p']), UsageError)
    assert.deepEqual(parseArgs(['--help']), { help: true })
  })

  it('parseArgs: --stdin-turn takes nothing but --stream-json; after "--" it is a prompt', () => {
    assert.deepEqual(parseArgs(['--stream-json', '--stdin-turn']), { stdinTurn: true, streamJson: true })
    assert.deepEqual(parseArgs(['--stdin-turn']), { stdinTurn: true, streamJson: false })
    assert.throws(() => parseArgs(['--stream-json', '--stdin-turn', '--max']), UsageError)
    assert.equal(parseArgs(['--stream-json', '--', '--stdin-turn']).prompt, '--stdin-turn')
  })

  it('parseTurnLine: fields, defaults, modes; unknown fields ignored', () => {
    const t = parseTurnLine(
      JSON.stringify({
        type: 'turn',
        prompt: 'fix it',
        mode: 'free',
        model: null,
        continue: 'abc',
        timeoutSeconds: 3600,
        cwd: '/w',
        env: { PROJECT: 'demo' },
        apiKey: 'k',
        permissionMode: 'ask',
        images: [{ path: 'a.png', mime: 'image/png' }, { path: 'b.jpg' }],
        extra: true,
      }),
    )
    assert.deepEqual(t, {
      prompt: 'fix it',
      mode: 'lite',
      model: undefined,
      continueId: 'abc',
      timeoutSeconds: 3600,
      cwd: '/w',
      env: { PROJECT: 'demo' },
      apiKey: 'k',
      permissionMode: 'ask',
      images: [{ path: 'a.png', mime: 'image/png' }, { path: 'b.jpg' }],
      streamJson: true,
    })
    const d = parseTurnLine('{"type":"turn","prompt":""}')
    assert.equal(d.mode, 'default')
    assert.equal(d.permissionMode, 'bypass')
    assert.deepEqual(d.images, [])
    assert.equal(parseTurnLine('{"type":"turn","prompt":"p","mode":"build"}').mode, 'default')
    for (const bad of ['[]', '{"prompt":"p"}', '{"type":"turn","prompt":"p","continue":""}', '{"type":"turn","prompt":"p","images":[{}]}']) {
      assert.throws(() => parseTurnLine(bad), UsageError, bad)
    }
  })

  it('isSensitiveFile: the CLI\'s list (keys, .env but not its templates, credential files)', () => {
    for (const f of ['id_rsa', '.ssh/id_ed25519', 'id_ecdsa_old', '.env', 'app/.env.local', '.env.production', 'cert.pem', 'a/b.KEY', 'x.p12', 'x.pfx',
      '.npmrc', '.netrc', '.pypirc', 'auth.json', 'credentials', '.aws/credentials', 'credentials.json', '.git-credentials', 'aws_credentials',
      'my-kubeconfig.yaml', 'terraform.tfstate', 'secrets.yaml']) {
      assert.equal(isSensitiveFile(f), true, f)
    }
    for (const f of ['id_rsa.pub', '.env.example', 'config/.env.sample', '.env.template', 'README.md', 'src/env.ts', 'keys.txt', 'environment.md', 'secrets.md']) {
      assert.equal(isSensitiveFile(f), false, f)
    }
    assert.equal(isEnvTemplateFile('.env.example'), true)
    assert.equal(isEnvTemplateFile('.env'), false)
  })

  it('isSensitivePath: symbolic links are judged by what they point to', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cb-links-'))
    try {
      const work = path.join(root, 'work')
      const home = path.join(root, 'home')
      fs.mkdirSync(path.join(home, '.ssh'), { recursive: true })
      fs.mkdirSync(path.join(work, 'src'), { recursive: true })
      fs.writeFileSync(path.join(work, '.env'), 'SECRET')
      fs.writeFileSync(path.join(work, 'plain.txt'), 'plain')
      fs.writeFileSync(path.join(home, '.ssh', 'id_ed25519'), 'KEY')
      fs.writeFileSync(path.join(home, '.ssh', 'notes.txt'), 'KEY')
      fs.symlinkSync('.env', path.join(work, 'notes.txt'))
      fs.symlinkSync(path.join(home, '.ssh', 'id_ed25519'), path.join(work, 'deploy-notes.txt'))
      fs.symlinkSync(path.join(home, '.ssh'), path.join(work, 'keys'))
      fs.symlinkSync('../plain.txt', path.join(work, 'src', 'plain-link.txt'))
      for (const p of ['notes.txt', 'deploy-notes.txt', 'keys/notes.txt', 'src/../notes.txt', './.env', '.ssh/config']) {
        assert.equal(isSensitivePath(p, work), true, p)
      }
      for (const p of ['plain.txt', 'src/plain-link.txt', 'missing.txt']) {
        assert.equal(isSensitivePath(p, work), false, p)
      }
      // The project itself may live anywhere.
      assert.equal(isSensitivePath('plain.txt', path.join(work)), false)
    } finally {
      fs.rmSync(root, { recursive: true, force: true })
    }
  })

  it('dropSensitiveBlocks: removes the result blocks of sensitive files only', () => {
    const out = 'notes.txt:\n1:ordinary\n\nid_rsa:\n2:SECRET\n3:more\n\n.env.example:\n1:API_TOKEN=\n\n[Results limited]'
    assert.equal(dropSensitiveBlocks(out), 'notes.txt:\n1:ordinary\n\n\n.env.example:\n1:API_TOKEN=\n\n[Results limited]')
  })

  it('PermissionRelay: matches the override to its tool_call by path/command, answers by requestId, EOF rejects', async () => {
    const printed = []
    const relay = new PermissionRelay({ emit: (e) => printed.push(e) })
    relay.announce({ type: 'tool_call', toolCallId: 't1', toolName: 'write_file', input: { path: 'a.txt', content: 'x' } })
    relay.announce({ type: 'tool_call', toolCallId: 't2', toolName: 'write_file', input: { path: 'b.txt', content: 'y' } })
    relay.announce({ type: 'tool_call', toolCallId: 't3', toolName: 'read_files', input: { paths: ['a'] } })
    // The SDK asks for b.txt first (a.txt's edit failed before reaching the client, say).
    const pb = relay.ask('write_file', { type: 'file', path: 'b.txt', content: 'y' })
    assert.equal(printed.length, 1)
    assert.equal(printed[0].toolCallId, 't2')
    assert.deepEqual(printed[0].input, { path: 'b.txt', content: 'y' })
    relay.acceptMessage({ type: 'permission_reply', requestId: 'unknown', decision: 'allow' })
    relay.acceptMessage({ type: 'permission_reply', requestId: printed[0].requestId, decision: 'maybe' })
    relay.acceptMessage({ type: 'permission_reply', requestId: printed[0].requestId, decision: 'reject', message: 'no' })
    assert.deepEqual(await pb, { allowed: false, message: 'no' })
    const pa = relay.ask('write_file', { type: 'patch', path: 'a.txt', content: '@@' })
    assert.equal(printed[1].toolCallId, 't1')
    relay.acceptMessage({ type: 'permission_reply', requestId: printed[1].requestId, decision: 'allow' })
    assert.deepEqual(await pa, { allowed: true })
    const pc = relay.ask('run_terminal_command', { command: 'ls', mode: 'assistant', process_type: 'SYNC' })
    assert.equal(printed[2].toolCallId, null, 'no tool_call announced')
    relay.endOfInput()
    assert.deepEqual(await pc, { allowed: false, message: 'stdin closed' })
    assert.deepEqual(await relay.ask('write_file', { path: 'c' }), { allowed: false, message: 'stdin closed' })
    assert.equal(printed.length, 3, 'nothing printed after EOF')
    assert.deepEqual(describeRequest('apply_patch', { operation: { type: 'create_file', path: 'n.txt', diff: '+x' } }), {
      kind: 'edit',
      title: 'Create n.txt',
      paths: ['n.txt'],
    })
  })

  it('HttpFailureRecorder + describeFailure: the backend\'s words for the failure that ended the run', async () => {
    const recorder = new HttpFailureRecorder({ origins: ['https://www.codebuff.com'] })
    const responses = {
      '/api/v1/token-count': () => new Response('{"error":"busy"}', { status: 503, statusText: 'Service Unavailable' }),
      '/api/v1/chat/completions': () =>
        new Response('{"error":"rate_limited","message":"Slow down"}', { status: 429, statusText: 'Too Many Requests' }),
      '/api/v1/agent-runs': () => new Response('{}', { status: 200 }),
    }
    const f = recorder.wrap(async (url) => {
      const u = new URL(url)
      if (u.pathname === '/down') throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } })
      return responses[u.pathname]()
    })
    await f('https://www.codebuff.com/api/v1/token-count', { method: 'POST' })
    await f('https://www.codebuff.com/api/v1/chat/completions', { method: 'POST' })
    await f('https://www.codebuff.com/api/v1/agent-runs', { method: 'POST' })
    await f('https://us.i.posthog.com/api/v1/chat/completions', { method: 'POST' }).catch(() => {})
    await recorder.settle()
    const rec = recorder.failureFor(undefined, 'Failed after 4 attempts. Last error: Too Many Requests')
    assert.equal(rec.status, 429)
    assert.deepEqual(describeFailure({ message: 'Agent run error: Failed after 4 attempts. Last error: Too Many Requests', recorded: rec }), {
      code: 'rate_limited',
      message: 'Slow down',
      statusCode: 429,
    })
    // A later success of the same request supersedes its failure.
    responses['/api/v1/token-count'] = () => new Response('{"inputTokens":1}', { status: 200 })
    await f('https://www.codebuff.com/api/v1/token-count', { method: 'POST' })
    assert.equal(recorder.failureFor(503, 'x'), null)
    // Unrelated messages do not pick a recorded failure.
    assert.equal(recorder.failureFor(undefined, 'terminated'), null)
    await assert.rejects(f('https://www.codebuff.com/down'))
    const net = recorder.failureFor(503, 'Network request failed')
    assert.equal(net.kind, 'network')
    assert.deepEqual(describeFailure({ statusCode: 503, message: 'Network request failed', recorded: net }), {
      code: 'network_error',
      message: 'Cannot reach the Codebuff backend (https://www.codebuff.com): ECONNREFUSED',
    })
    assert.deepEqual(describeFailure({ message: 'Agent run error: Cannot read properties of undefined' }), {
      code: 'internal',
      message: 'Cannot read properties of undefined',
    })
  })

  it('creditsOf / UsageCost / SseReader: the SDK\'s arithmetic and the usage fields of a stream', () => {
    // calculateUsedCredits: round(USD × 1.055 × 100), per request.
    assert.deepEqual([0.05, 0.02, 0.01, 0.0001, 0.004, 1].map(creditsOf), [5, 2, 1, 0, 0, 106])
    const u = new UsageCost()
    assert.equal(u.credits(), 0)
    u.observe({ usage: { cost: 0.01 } })
    u.observe({ usage: { cost: 0.03, cost_details: { upstream_inference_cost: 0.02 } } })
    u.observe({ usage: { cost: 'x' } })
    u.observe(undefined)
    assert.equal(u.credits(), 5, 'the last numeric cost (0.03) plus the upstream cost (0.02)')
    const data = []
    const reader = new SseReader((d) => data.push(d))
    reader.feed(': OPENROUTER PROCESSING\n\ndata: {"a"')
    reader.feed(':1}\r')
    reader.feed('\n\r\ndata:{"b":2}\ndata: {"c":3}\n\nevent: x\ndata: [DONE]\n\ndata: tail')
    reader.end()
    assert.deepEqual(data, ['{"a":1}', '{"b":2}\n{"c":3}', '[DONE]', 'tail'])
  })

  it('CostMeter: counts a chat completion when its body has been read to the end, passes the body through untouched', async () => {
    const sse = (cost) =>
      [
        `data: ${JSON.stringify({ choices: [{ delta: { content: 'hi' } }] })}\n\n`,
        `data: ${JSON.stringify({ choices: [{ delta: {}, finish_reason: 'stop' }], usage: { cost } })}\n\n`,
        'data: [DONE]\n\n',
      ].join('')
    const env = {}
    const meter = new CostMeter({ origins: ['https://www.codebuff.com'], env })
    const seen = []
    meter.onChange((total, credits) => seen.push([total, credits]))
    let next = () => new Response(sse(0.05), { headers: { 'content-type': 'text/event-stream' } })
    const f = meter.wrap(async () => next())
    const chat = 'https://www.codebuff.com/api/v1/chat/completions'

    const res = await f(chat, { method: 'POST' })
    assert.equal(res.status, 200)
    assert.deepEqual(seen, [], 'nothing before the body is read')
    assert.equal(await res.text(), sse(0.05), 'the SDK gets the body unchanged')
    assert.deepEqual(seen, [[5, 5]])

    // Split across chunks at awkward places.
    const bytes = new TextEncoder().encode(sse(0.02))
    next = () =>
      new Response(
        new ReadableStream({
          start(controller) {
            for (let i = 0; i < bytes.length; i += 7) controller.enqueue(bytes.slice(i, i + 7))
            controller.close()
          },
        }),
        { headers: { 'content-type': 'text/event-stream' } },
      )
    await (await f(chat, { method: 'POST' })).text()
    assert.deepEqual(seen.at(-1), [7, 2])

    // A body that is not read to the end (cancelled: an abort, a broken stream) counts nothing.
    next = () => new Response(sse(0.05), { headers: { 'content-type': 'text/event-stream' } })
    await (await f(chat, { method: 'POST' })).body.cancel()
    // Zero cost, other origins, other paths, failed responses: nothing.
    next = () => new Response(sse(0), { headers: { 'content-type': 'text/event-stream' } })
    await (await f(chat, { method: 'POST' })).text()
    next = () => new Response(sse(0.05), { headers: { 'content-type': 'text/event-stream' } })
    await (await f('https://us.i.posthog.com/api/v1/chat/completions', { method: 'POST' })).text()
    await (await f('https://www.codebuff.com/api/v1/token-count', { method: 'POST' })).text()
    next = () => new Response(sse(0.05), { status: 500, headers: { 'content-type': 'text/event-stream' } })
    await (await f(chat, { method: 'POST' })).text()
    // With CODEBUFF_BYOK_OPENROUTER set the SDK ignores the backend's cost.
    env.CODEBUFF_BYOK_OPENROUTER = 'or-key'
    next = () => new Response(sse(0.05), { headers: { 'content-type': 'text/event-stream' } })
    await (await f(chat, { method: 'POST' })).text()
    delete env.CODEBUFF_BYOK_OPENROUTER
    assert.deepEqual(seen, [[5, 5], [7, 2]])

    // A non-streaming completion (generateText): usage of the JSON body.
    next = () => new Response(JSON.stringify({ choices: [], usage: { cost: 0.01 } }), { headers: { 'content-type': 'application/json' } })
    assert.deepEqual(await (await f(chat, { method: 'POST' })).json(), { choices: [], usage: { cost: 0.01 } })
    // web_search's creditsUsed, counted only with a result (as the SDK does).
    next = () => new Response(JSON.stringify({ result: 'found', creditsUsed: 3 }), { headers: { 'content-type': 'application/json' } })
    await (await f('https://www.codebuff.com/api/v1/web-search', { method: 'POST' })).text()
    next = () => new Response(JSON.stringify({ error: 'none', creditsUsed: 9 }), { headers: { 'content-type': 'application/json' } })
    await (await f('https://www.codebuff.com/api/v1/docs-search', { method: 'POST' })).text()
    await new Promise((resolve) => setTimeout(resolve, 10))
    assert.deepEqual(seen, [[5, 5], [7, 2], [8, 1], [11, 3]])
    assert.equal(meter.total, 11)
  })

  it('EventTranslator: "\\n" is dropped only right after a tool event', () => {
    const out = []
    const t = new EventTranslator({ emit: (e) => out.push(e), sessionId: 's' })
    t.handleEvent({ type: 'start', messageHistoryLength: 0 })
    t.handleStreamChunk('a')
    t.handleStreamChunk('\n') // model text: kept
    t.handleEvent({ type: 'text', text: 'a\n' })
    t.handleEvent({ type: 'tool_call', toolCallId: 'x', toolName: 'write_file', input: {}, agentId: 'main-agent' })
    t.handleStreamChunk('\n') // SDK noise: dropped
    t.handleEvent({ type: 'tool_result', toolCallId: 'x', toolName: 'write_file', output: [] })
    t.handleStreamChunk({ type: 'subagent_chunk', agentId: 'sub', agentType: 'h', chunk: 'hi' })
    t.handleStreamChunk({ type: 'reasoning_chunk', agentId: 'run-1', ancestorRunIds: ['run-0'], chunk: 'hm' })
    assert.deepEqual(out, [
      { type: 'start', messageHistoryLength: 0, sessionId: 's' },
      { type: 'text_delta', text: 'a' },
      { type: 'text_delta', text: '\n' },
      { type: 'text', text: 'a\n' },
      { type: 'tool_call', toolCallId: 'x', toolName: 'write_file', input: {}, agentId: 'main-agent' },
      { type: 'tool_result', toolCallId: 'x', toolName: 'write_file', output: [] },
      { type: 'text_delta', text: 'hi', agentId: 'sub' },
      { type: 'reasoning_delta', text: 'hm', runId: 'run-1', ancestorRunIds: ['run-0'] },
    ])
  })

  it('AskUserRelay: answers by toolCallId, keeps early lines, skips on EOF', async () => {
    const relay = new AskUserRelay({ timeoutMs: 5000 })
    const q = (text) => ({ questions: [{ question: text, options: [{ label: 'a' }, { label: 'b' }] }] })
    relay.announce('t1', q('one'))
    relay.announce('t2', q('two'))
    relay.acceptLine(JSON.stringify({ type: 'ask_user_answer', toolCallId: 't2', answers: [{ questionIndex: 0, selectedOption: 'b' }] }))
    const p1 = relay.handler({ ...q('one'), extra: 1 })
    relay.acceptLine('not json')
    relay.acceptLine(JSON.stringify({ type: 'ask_user_skip', toolCallId: 't1' }))
    assert.deepEqual(await p1, [{ type: 'json', value: { skipped: true } }])
    assert.deepEqual(await relay.handler(q('two')), [{ type: 'json', value: { answers: [{ questionIndex: 0, selectedOption: 'b' }] } }])
    relay.announce('t3', q('three'))
    const p3 = relay.handler(q('three'))
    relay.endOfInput()
    assert.deepEqual(await p3, [{ type: 'json', value: { skipped: true } }])
  })

  it('AskUserRelay: the question timeout skips', async () => {
    const relay = new AskUserRelay({ timeoutMs: 50 })
    relay.announce('t', { questions: [{ question: 'q' }] })
    assert.deepEqual(await relay.handler({ questions: [{ question: 'q' }] }), [{ type: 'json', value: { skipped: true } }])
  })

  it('origin redirect: Codebuff origin → test URL; every other host refused', async () => {
    const seen = []
    const fake = async (url, init) => {
      seen.push([String(url), init?.method])
      return new Response('{}')
    }
    const f = createRedirectingFetch('http://127.0.0.1:9/base', fake)
    await f('https://www.codebuff.com/api/v1/me?fields=id', { method: 'GET' })
    await f(new URL('https://www.codebuff.com/api/v1/agent-runs'), { method: 'POST' })
    await f(new Request('https://www.codebuff.com/api/v1/token-count', { method: 'POST', body: '{}' }))
    assert.deepEqual(seen.slice(0, 2), [
      ['http://127.0.0.1:9/base/api/v1/me?fields=id', 'GET'],
      ['http://127.0.0.1:9/base/api/v1/agent-runs', 'POST'],
    ])
    assert.equal(seen.length, 3)
    for (const url of ['https://us.i.posthog.com/batch/', 'https://api.anthropic.com/v1/messages', 'http://127.0.0.1:9/x']) {
      await assert.rejects(f(url), /refused/)
    }
  })

  it('classifyFailure maps statuses and messages to codes', () => {
    const cases = [
      [{ statusCode: 401 }, 'auth_failed'],
      [{ statusCode: 402, message: 'Payment Required' }, 'out_of_credits'],
      [{ statusCode: 403 }, 'account_suspended'],
      [{ statusCode: 429 }, 'rate_limited'],
      [{ statusCode: 500, message: 'Server error' }, 'backend_error'],
      [{ statusCode: 503 }, 'backend_error'],
      [{ statusCode: 400 }, 'invalid_request'],
      [{ statusCode: 404 }, 'invalid_request'],
      [{ statusCode: 413 }, 'invalid_request'],
      [{ statusCode: 409 }, 'internal'],
      [{ message: 'Authentication failed' }, 'auth_failed'],
      [{ message: 'Invalid API key or user not found' }, 'auth_failed'],
      [{ message: 'terminated' }, 'backend_error'],
      [{ message: 'fetch failed' }, 'network_error'],
      [{ message: 'Cannot read properties of undefined' }, 'internal'],
    ]
    for (const [input, code] of cases) assert.equal(classifyFailure(input), code, JSON.stringify(input))
  })
})
