// One invocation of the agent command (docs/agent-command.md): get the turn (from argv, or from
// the first stdin line with --stdin-turn), run it through the SDK, stream its events, persist its
// run state, and exit with the contract's status.
//
// Exit statuses: 0 success (last event `finish`); 1 failed run (auth_failed, out_of_credits,
// account_suspended, rate_limited, backend_error, network_error, invalid_request, internal);
// 2 bad invocation (invalid_arguments, invalid_session); 124 timeout; 130 SIGINT; 143 SIGTERM.
// A failing run's last event is its one `error` with `fatal:true`; `finish` is printed only after
// run() has succeeded (the SDK emits its `finish` before it fails on a backend error, so it is held
// back until then).

import fs from 'node:fs'
import path from 'node:path'

import { parseArgs, UsageError, USAGE } from './args.mjs'
import { parseTurnLine } from './turn.mjs'
import { emitLine, closeOutput, drainStdout } from './output.mjs'
import { EventTranslator } from './events.mjs'
import { StateStore, resolveStateDir, newSessionId, isValidSessionId } from './state.mjs'
import { AskUserRelay, questionTimeoutMs } from './ask-user.mjs'
import { StdinRouter } from './stdin.mjs'
import { PermissionRelay } from './permissions.mjs'
import { buildOverrideTools } from './tools.mjs'
import { createFilteringSpawn } from './sensitive-files.mjs'
import { loadImages, ImageError } from './images.mjs'
import { installOriginRedirect, CODEBUFF_ORIGINS } from './origin-redirect.mjs'
import { installAbortableFetch } from './abortable-fetch.mjs'
import { HttpFailureRecorder } from './http-failures.mjs'
import { CostMeter } from './cost-meter.mjs'
import { resolveAgent } from './agents.mjs'
import { EXIT, describeFailure, statusCodeOf, cleanMessage } from './errors.mjs'

/** How long an aborted run may take to wind down before the process exits anyway. */
const ABORT_GRACE_MS = 2000

const API_KEY_ENV = 'CODEBUFF_API_KEY'

function log(message) {
  process.stderr.write(`codebuff-agent: ${message}\n`)
}

/** The final `error` event (contract §2.1). */
function errorEvent(message, code, statusCode) {
  return {
    type: 'error',
    message: cleanMessage(message),
    code,
    ...(statusCode !== undefined && { statusCode }),
    fatal: true,
  }
}

async function exitNow(code) {
  closeOutput()
  await drainStdout()
  process.exit(code)
}

/** Prints the final error and exits (for failures before a run starts). */
async function failEarly(message, code, exitStatus, statusCode) {
  emitLine(errorEvent(message, code, statusCode))
  await exitNow(exitStatus)
}

const signalStatus = (signal) => (signal === 'SIGINT' ? EXIT.sigint : EXIT.sigterm)

/**
 * Installs the fetch wrappers (test redirect, failure recorder, cost meter, abort) and imports the
 * SDK. With --stdin-turn this happens before the turn line is read: the warm start.
 */
async function prepareSdk() {
  installOriginRedirect(process.env, log)
  const recorder = new HttpFailureRecorder({ origins: CODEBUFF_ORIGINS })
  globalThis.fetch = recorder.wrap(globalThis.fetch)
  const costMeter = new CostMeter({ origins: CODEBUFF_ORIGINS, log })
  globalThis.fetch = costMeter.wrap(globalThis.fetch)
  const abortInflight = installAbortableFetch()
  const sdk = await import('@codebuff/sdk')
  return { sdk, recorder, costMeter, abortInflight }
}

export async function main(argv = process.argv.slice(2)) {
  const startedAt = Date.now()
  let args
  try {
    args = parseArgs(argv)
  } catch (error) {
    if (error instanceof UsageError) {
      log(`${error.message}\n${USAGE}`)
      return failEarly(error.message, 'invalid_arguments', EXIT.usage)
    }
    throw error
  }
  if (args.help) {
    process.stderr.write(`${USAGE}\n`)
    return exitNow(EXIT.ok)
  }
  if (!args.streamJson) log('note: --stream-json not given; stream-json is the only output format')

  // One permanent listener per signal, whose behaviour changes as the invocation proceeds.
  // (Removing the last listener stops Node's signal watcher, and a signal still queued — e.g. one
  // that arrived while the SDK module was being evaluated — would be lost.)
  let onSignal = (signal) => failEarly(`Run cancelled by ${signal}`, 'aborted', signalStatus(signal))
  process.on('SIGINT', (signal) => onSignal(signal))
  process.on('SIGTERM', (signal) => onSignal(signal))

  if (!args.stdinTurn) {
    // The argv form: the credential comes from the environment and leaves it before anything
    // runs (the SDK is not even loaded yet), so no command the agent runs can inherit it.
    const apiKey = process.env[API_KEY_ENV]
    delete process.env[API_KEY_ENV]
    const router = new StdinRouter({ log })
    const prepared = await prepareSdk()
    return runTurn({
      turn: { ...args, env: {}, permissionMode: 'bypass', images: [] },
      apiKey,
      router,
      prepared,
      timeoutFrom: startedAt,
      setSignalHandler: (handler) => (onSignal = handler),
    })
  }

  // --stdin-turn: a spare that may wait a long time. A key in the environment is never used.
  delete process.env[API_KEY_ENV]
  onSignal = (signal) => {
    log(`${signal} before a turn arrived; exiting`)
    exitNow(signalStatus(signal))
  }
  let resolveLine
  const turnLine = new Promise((resolve) => (resolveLine = resolve))
  const router = new StdinRouter({
    expectTurn: true,
    // The timeout counts from the line's arrival, even if it came while the SDK was loading.
    onTurn: (line) => resolveLine({ line, at: Date.now() }),
    onEndBeforeTurn: () => resolveLine(null),
    log,
  })
  const prepared = await prepareSdk()
  log(`ready for a turn (${Date.now() - startedAt} ms after start)`)
  const received = await turnLine
  if (received === null) {
    // stdin closed before a turn: a spare that was not needed.
    router.close()
    return exitNow(EXIT.ok)
  }
  const { line, at: timeoutFrom } = received
  onSignal = (signal) => failEarly(`Run cancelled by ${signal}`, 'aborted', signalStatus(signal))
  let turn
  try {
    turn = parseTurnLine(line)
  } catch (error) {
    if (error instanceof UsageError) {
      log(error.message)
      return failEarly(error.message, 'invalid_arguments', EXIT.usage)
    }
    throw error
  }
  return runTurn({
    turn,
    apiKey: turn.apiKey,
    router,
    prepared,
    timeoutFrom,
    setSignalHandler: (handler) => (onSignal = handler),
  })
}

/**
 * Runs one turn. `turn` has the fields of the turn line in parseArgs() shape:
 * {prompt, mode, model, continueId, timeoutSeconds, cwd, env, permissionMode, images}.
 */
async function runTurn({ turn, apiKey, router, prepared, timeoutFrom, setSignalHandler }) {
  const { sdk, recorder, costMeter, abortInflight } = prepared

  if (typeof apiKey !== 'string' || apiKey.trim() === '') {
    return failEarly('No Codebuff API key was given', 'auth_failed', EXIT.failed)
  }

  const cwd = path.resolve(turn.cwd ?? process.cwd())
  try {
    if (!fs.statSync(cwd).isDirectory()) throw new Error('not a directory')
  } catch (error) {
    return failEarly(`cwd ${cwd}: ${error.code ?? error.message}`, 'invalid_arguments', EXIT.usage)
  }

  // The turn's environment, for the agent and every command it runs. Never the credential.
  for (const [name, value] of Object.entries(turn.env ?? {})) {
    if (name === API_KEY_ENV) {
      log(`turn.env.${API_KEY_ENV} ignored: the credential never enters the environment`)
      continue
    }
    process.env[name] = value
  }

  let content
  try {
    content = loadImages(turn.images, cwd)
  } catch (error) {
    if (error instanceof ImageError) return failEarly(error.message, 'invalid_arguments', EXIT.usage)
    throw error
  }

  const stateDir = resolveStateDir(process.env)
  const store = new StateStore(stateDir)
  let sessionId
  let previousRun
  if (turn.continueId !== undefined) {
    sessionId = turn.continueId
    if (!isValidSessionId(sessionId)) {
      return failEarly(`Invalid session id ${JSON.stringify(sessionId)}`, 'invalid_session', EXIT.usage)
    }
    try {
      previousRun = store.load(sessionId)
    } catch (error) {
      return failEarly(`Session ${sessionId} cannot be resumed: ${error.message}`, 'invalid_session', EXIT.usage)
    }
    if (!previousRun) {
      return failEarly(`Unknown session ${sessionId}`, 'invalid_session', EXIT.usage)
    }
  } else {
    sessionId = newSessionId()
  }

  // The SDK loads local agents (.agents) and skills relative to the process cwd, like the CLI
  // run inside the project.
  process.chdir(cwd)

  const controller = new AbortController()
  let abortReason = null // 'timeout' | 'SIGINT' | 'SIGTERM'
  let finished = false
  let injectedAgentId
  let heldFinish = null

  const emit = (event) => {
    if (!finished) emitLine(event)
  }
  // The run's cost as it grows (contract §2): a `cost` event whenever the metered total changes
  // (src/cost-meter.mjs), and before `finish` one with finish.totalCost if it differs.
  let printedCost = 0
  const emitCost = (totalCost) => {
    if (totalCost === printedCost) return
    printedCost = totalCost
    emit({ type: 'cost', totalCost })
  }
  costMeter.onChange((total) => emitCost(total))
  const askRelay = new AskUserRelay({ timeoutMs: questionTimeoutMs(process.env), signal: controller.signal, log })
  const permissions =
    turn.permissionMode === 'ask' ? new PermissionRelay({ emit, signal: controller.signal, log }) : null
  router.attach({ askUser: askRelay, permissions })

  const translator = new EventTranslator({
    emit: (event) => {
      if (event.type === 'finish') {
        // Held back until run() has returned successfully (contract §2.1).
        heldFinish = event
        return
      }
      emit(event)
    },
    sessionId,
    log,
    onToolCall: (event) => {
      if (event.toolName === 'ask_user') askRelay.announce(event.toolCallId, event.input)
      permissions?.announce(event)
    },
  })

  const timers = []

  /** Persists what the run left behind (see README: which state is kept when). */
  function saveState(runState) {
    try {
      if (runState && runState.sessionState) {
        store.save(sessionId, stripInjectedAgent(runState, injectedAgentId))
      } else if (!store.exists(sessionId)) {
        // No state from the SDK for a brand-new session (e.g. aborted before it returned):
        // keep a stateless record so `continue` still accepts the announced id.
        store.save(sessionId, {
          output: runState?.output ?? { type: 'error', message: 'Run ended before the SDK returned its state' },
        })
      }
    } catch (error) {
      log(`could not save run state for ${sessionId}: ${error.message}`)
    }
  }

  /** The single way out once the run has started. */
  async function finish({ exitStatus, error, last, runState, save = true }) {
    if (finished) return
    if (error && heldFinish) log(`the SDK emitted finish before the run failed; not printed: ${JSON.stringify(heldFinish)}`)
    if (last?.type === 'finish' && typeof last.totalCost === 'number') {
      if (last.totalCost !== costMeter.total) {
        log(`cost: finish.totalCost ${last.totalCost} differs from the metered ${costMeter.total} credits; printing the SDK's`)
      }
      emitCost(last.totalCost)
    }
    if (last) emit(last)
    if (error) emit(error)
    finished = true
    for (const t of timers) clearTimeout(t)
    closeOutput()
    if (save) saveState(runState)
    router.close()
    await drainStdout()
    process.exit(exitStatus)
  }

  /** The final error of a failed run, worded by the backend where it said something. */
  async function failure(statusCode, message) {
    await recorder.settle()
    const recorded = recorder.failureFor(statusCode, message)
    const described = describeFailure({ statusCode, message, recorded })
    return errorEvent(described.message, described.code, described.statusCode)
  }

  function abortRun(reason) {
    if (abortReason) {
      // A second signal: stop waiting for the SDK.
      if (reason === 'SIGINT' || reason === 'SIGTERM') finishAborted(null)
      return
    }
    abortReason = reason
    log(`aborting run (${reason})`)
    controller.abort(new Error(reason === 'timeout' ? 'Run timed out' : `Run cancelled (${reason})`))
    abortInflight()
    timers.push(
      setTimeout(() => {
        log(`the SDK did not stop within ${ABORT_GRACE_MS} ms; exiting`)
        finishAborted(null)
      }, ABORT_GRACE_MS),
    )
  }

  function finishAborted(runState) {
    if (abortReason === 'timeout') {
      return finish({
        exitStatus: EXIT.timeout,
        error: errorEvent(`Run timed out after ${turn.timeoutSeconds} s`, 'timeout'),
        runState,
      })
    }
    return finish({
      exitStatus: signalStatus(abortReason),
      error: errorEvent(`Run cancelled by ${abortReason}`, 'aborted'),
      runState,
    })
  }

  setSignalHandler(abortRun)
  if (turn.timeoutSeconds !== undefined) {
    // Counted from the turn line (--stdin-turn) or the start of the process (argv form).
    const remaining = Math.max(0, turn.timeoutSeconds * 1000 - (Date.now() - timeoutFrom))
    timers.push(setTimeout(() => abortRun('timeout'), remaining))
  }
  process.on('unhandledRejection', (reason) => {
    log(`unhandled rejection (ignored): ${reason?.stack ?? reason}`)
  })
  process.on('uncaughtException', (error) => {
    log(`uncaught exception: ${error?.stack ?? error}`)
    finish({
      exitStatus: EXIT.failed,
      error: errorEvent(error?.message ?? String(error), 'internal'),
      save: false,
    })
  })

  let resolved
  try {
    resolved = await resolveAgent({
      mode: turn.mode,
      model: turn.model,
      apiKey,
      loadLocalAgents: sdk.loadLocalAgents,
      fresh: !previousRun?.sessionState,
    })
  } catch (error) {
    if (abortReason) return finishAborted(null)
    return finish({ exitStatus: EXIT.failed, error: await failure(statusCodeOf(error), error.message), save: false })
  }
  injectedAgentId = resolved.injectedAgentId

  // Terminal commands the agent runs inherit process.env (plus this `env`): the credential is not
  // in process.env (see main), and is blanked here too for good measure.
  const clientEnv = { [API_KEY_ENV]: '' }
  const client = new sdk.CodebuffClient({
    apiKey,
    cwd,
    env: clientEnv,
    handleEvent: translator.handleEvent,
    handleStreamChunk: translator.handleStreamChunk,
    overrideTools: buildOverrideTools({
      sdk,
      cwd,
      env: clientEnv,
      permissionMode: turn.permissionMode,
      permissions,
      askUser: askRelay.handler,
      backgroundLogDir: () => path.join(stateDir, 'background'),
      log,
    }),
    ...(resolved.agentDefinitions && { agentDefinitions: resolved.agentDefinitions }),
  })

  let runState
  try {
    runState = await client.run({
      agent: resolved.agent,
      prompt: turn.prompt,
      ...(content.length > 0 && { content }),
      previousRun,
      signal: controller.signal,
      costMode: resolved.costMode,
      spawnSource: createFilteringSpawn(),
    })
  } catch (error) {
    // e.g. 401 on /api/v1/me: "Authentication failed" before any event.
    if (abortReason) return finishAborted(null)
    const message = error?.message ?? String(error)
    return finish({ exitStatus: EXIT.failed, error: await failure(statusCodeOf(error), message), save: false })
  }

  if (abortReason) return finishAborted(runState)

  const output = runState?.output
  if (!output || output.type === 'error') {
    // e.g. a 402 from chat completions: run() resolves with {type:"error", message:"Payment
    // Required", statusCode:402} without any error or finish event; a 400/429/5xx or a broken
    // stream: the same after the SDK has already emitted `finish`.
    const statusCode = typeof output?.statusCode === 'number' ? output.statusCode : undefined
    const message = output?.message ?? 'The run produced no output'
    return finish({ exitStatus: EXIT.failed, error: await failure(statusCode, message), runState })
  }
  const last = heldFinish ?? {
    type: 'finish',
    agentId: runState.sessionState?.mainAgentState?.agentType ?? undefined,
    totalCost: runState.sessionState?.mainAgentState?.creditsUsed ?? 0,
  }
  return finish({ exitStatus: EXIT.ok, last, runState })
}

/** Removes a model override definition from the saved state so it does not stick to later turns. */
function stripInjectedAgent(runState, agentId) {
  const templates = runState?.sessionState?.fileContext?.agentTemplates
  if (!agentId || !templates || !(agentId in templates)) return runState
  const copy = {
    ...runState,
    sessionState: {
      ...runState.sessionState,
      fileContext: { ...runState.sessionState.fileContext, agentTemplates: { ...templates } },
    },
  }
  delete copy.sessionState.fileContext.agentTemplates[agentId]
  return copy
}
