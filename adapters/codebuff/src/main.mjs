// One invocation of the agent command: parse flags, run one Codebuff turn through the SDK,
// stream its events, persist its run state, and exit with the contract's status.
//
// Exit statuses: 0 normal finish; 1 failed run (auth_failed, out_of_credits, backend_error);
// 2 bad invocation (invalid_arguments, invalid_session); 124 --timeout; 130 SIGINT; 143 SIGTERM.
// A failing run prints an `error` event with a `code` first whenever it can.

import fs from 'node:fs'
import path from 'node:path'

import { parseArgs, UsageError, USAGE } from './args.mjs'
import { emitLine, closeOutput, drainStdout } from './output.mjs'
import { EventTranslator } from './events.mjs'
import { StateStore, resolveStateDir, newSessionId, isValidSessionId } from './state.mjs'
import { AskUserRelay, LineReader, questionTimeoutMs } from './ask-user.mjs'
import { installOriginRedirect } from './origin-redirect.mjs'
import { installAbortableFetch } from './abortable-fetch.mjs'
import { resolveAgent } from './agents.mjs'
import { EXIT, classifyFailure, statusCodeOf, cleanMessage } from './errors.mjs'

/** How long an aborted run may take to wind down before the process exits anyway. */
const ABORT_GRACE_MS = 2000

function log(message) {
  process.stderr.write(`codebuff-agent: ${message}\n`)
}

function errorEvent(message, code, statusCode) {
  return {
    type: 'error',
    message: cleanMessage(message),
    code,
    ...(statusCode !== undefined && { statusCode }),
  }
}

async function exitNow(code) {
  closeOutput()
  await drainStdout()
  process.exit(code)
}

/** Prints one error event and exits (for failures before a run starts). */
async function failEarly(message, code, exitStatus, statusCode) {
  emitLine(errorEvent(message, code, statusCode))
  await exitNow(exitStatus)
}

export async function main(argv = process.argv.slice(2), env = process.env) {
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

  // One permanent listener per signal, whose behaviour changes once the run is set up. (Removing
  // the last listener stops Node's signal watcher, and a signal still queued — e.g. one that
  // arrived while the SDK module was being evaluated — would be lost.) Until then, a signal ends
  // the process at once.
  const startedAt = Date.now()
  let onSignal = (signal) => {
    failEarly(`Run cancelled by ${signal}`, 'aborted', signal === 'SIGINT' ? EXIT.sigint : EXIT.sigterm)
  }
  process.on('SIGINT', (signal) => onSignal(signal))
  process.on('SIGTERM', (signal) => onSignal(signal))

  const apiKey = env.CODEBUFF_API_KEY
  if (!apiKey || apiKey.trim() === '') {
    return failEarly('CODEBUFF_API_KEY is not set', 'auth_failed', EXIT.failed)
  }

  const cwd = path.resolve(args.cwd ?? process.cwd())
  try {
    if (!fs.statSync(cwd).isDirectory()) throw new Error('not a directory')
  } catch (error) {
    return failEarly(`--cwd ${cwd}: ${error.code ?? error.message}`, 'invalid_arguments', EXIT.usage)
  }

  const store = new StateStore(resolveStateDir(env))
  let sessionId
  let previousRun
  if (args.continueId !== undefined) {
    sessionId = args.continueId
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
  // run inside the project; the state directory was resolved above, before this.
  process.chdir(cwd)
  installOriginRedirect(env, log)
  const abortInflight = installAbortableFetch()
  const { CodebuffClient, loadLocalAgents } = await import('@codebuff/sdk')

  const controller = new AbortController()
  let abortReason = null // 'timeout' | 'SIGINT' | 'SIGTERM'
  let finished = false
  let injectedAgentId

  const relay = new AskUserRelay({ timeoutMs: questionTimeoutMs(env), signal: controller.signal, log })
  const stdinReader = new LineReader(process.stdin, {
    onLine: (line) => relay.acceptLine(line),
    onEnd: () => relay.endOfInput(),
    log,
  })
  const translator = new EventTranslator({
    emit: (event) => {
      if (!finished) emitLine(event)
    },
    sessionId,
    log,
    onToolCall: (event) => {
      if (event.toolName === 'ask_user') relay.announce(event.toolCallId, event.input)
    },
  })

  const timers = []

  /** Persists what the run left behind (see README: which state is kept when). */
  function saveState(runState) {
    try {
      if (runState && runState.sessionState) {
        const toSave = stripInjectedAgent(runState, injectedAgentId)
        store.save(sessionId, toSave)
      } else if (!store.exists(sessionId)) {
        // No state from the SDK for a brand-new session (e.g. aborted before it returned):
        // keep a stateless record so `--continue` still accepts the announced id.
        store.save(sessionId, {
          output: runState?.output ?? { type: 'error', message: 'Run ended before the SDK returned its state' },
        })
      }
    } catch (error) {
      log(`could not save run state for ${sessionId}: ${error.message}`)
    }
  }

  /** The single way out once the run has started. */
  async function finish({ exitStatus, error, runState, save = true }) {
    if (finished) return
    finished = true
    for (const t of timers) clearTimeout(t)
    if (error) emitLine(error)
    closeOutput()
    if (save) saveState(runState)
    stdinReader.close()
    await drainStdout()
    process.exit(exitStatus)
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
    timers.push(setTimeout(() => {
      log(`the SDK did not stop within ${ABORT_GRACE_MS} ms; exiting`)
      finishAborted(null)
    }, ABORT_GRACE_MS))
  }

  function finishAborted(runState) {
    if (abortReason === 'timeout') {
      return finish({
        exitStatus: EXIT.timeout,
        error: errorEvent(`Run timed out after ${args.timeoutSeconds} s`, 'timeout'),
        runState,
      })
    }
    return finish({
      exitStatus: abortReason === 'SIGINT' ? EXIT.sigint : EXIT.sigterm,
      error: errorEvent(`Run cancelled by ${abortReason}`, 'aborted'),
      runState,
    })
  }

  onSignal = abortRun
  if (args.timeoutSeconds !== undefined) {
    // Counted from the start of the process, not from the end of the SDK's import.
    const remaining = Math.max(0, args.timeoutSeconds * 1000 - (Date.now() - startedAt))
    timers.push(setTimeout(() => abortRun('timeout'), remaining))
  }
  process.on('unhandledRejection', (reason) => {
    log(`unhandled rejection (ignored): ${reason?.stack ?? reason}`)
  })
  process.on('uncaughtException', (error) => {
    log(`uncaught exception: ${error?.stack ?? error}`)
    finish({
      exitStatus: EXIT.failed,
      error: errorEvent(error?.message ?? String(error), 'backend_error'),
      save: false,
    })
  })

  let resolved
  try {
    resolved = await resolveAgent({
      mode: args.mode,
      model: args.model,
      apiKey,
      loadLocalAgents,
      fresh: !previousRun?.sessionState,
    })
  } catch (error) {
    if (abortReason) return finishAborted(null)
    const statusCode = statusCodeOf(error)
    return finish({
      exitStatus: EXIT.failed,
      error: errorEvent(error.message, classifyFailure({ statusCode, message: error.message }), statusCode),
      save: false,
    })
  }
  injectedAgentId = resolved.injectedAgentId

  const client = new CodebuffClient({
    apiKey,
    cwd,
    // Terminal commands the agent runs inherit process.env; keep the credential out of them (and
    // so out of tool results and the daemon's logs). The SDK itself still reads it from the env.
    env: { CODEBUFF_API_KEY: '' },
    handleEvent: translator.handleEvent,
    handleStreamChunk: translator.handleStreamChunk,
    overrideTools: { ask_user: relay.handler },
    ...(resolved.agentDefinitions && { agentDefinitions: resolved.agentDefinitions }),
  })

  let runState
  try {
    runState = await client.run({
      agent: resolved.agent,
      prompt: args.prompt,
      previousRun,
      signal: controller.signal,
      costMode: resolved.costMode,
    })
  } catch (error) {
    // e.g. 401 on /api/v1/me: "Authentication failed" before any event.
    if (abortReason) return finishAborted(null)
    const statusCode = statusCodeOf(error)
    const message = error?.message ?? String(error)
    return finish({
      exitStatus: EXIT.failed,
      error: errorEvent(message, classifyFailure({ statusCode, message }), statusCode),
      save: false,
    })
  }

  if (abortReason) return finishAborted(runState)

  const output = runState?.output
  if (!output || output.type === 'error') {
    // e.g. a 402 from chat completions: run() resolves with {type:"error", message:"Payment
    // Required", statusCode:402} without any error or finish event.
    const statusCode = typeof output?.statusCode === 'number' ? output.statusCode : undefined
    const message = output?.message ?? 'The run produced no output'
    return finish({
      exitStatus: EXIT.failed,
      error: errorEvent(message, classifyFailure({ statusCode, message }), statusCode),
      runState,
    })
  }
  return finish({ exitStatus: EXIT.ok, runState })
}

/** Removes a --model override definition from the saved state so it does not stick to later turns. */
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
