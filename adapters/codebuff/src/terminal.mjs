// run_terminal_command, as the adapter installs it (in every permission mode):
//
// * process_type SYNC (the default): the SDK's own runTerminalCommand, called with exactly the
//   arguments its built-in handler uses (cwd resolved against the project root, the client's `env`
//   on top of process.env), so results and failures are identical to ungated Codebuff.
// * process_type BACKGROUND: @codebuff/sdk 0.10.7 answers `BACKGROUND process_type not
//   implemented`. The adapter starts the command itself, like the Codebuff CLIs did:
//   `bash -c COMMAND` in the adapter's own process group (not a new session or group, so the
//   daemon's group signals reach it), stdin closed, stdout+stderr appended to a log file, not
//   waited for (it may outlive this process; the group kill ends it). After a short moment
//   (BACKGROUND_SETTLE_MS, or as soon as it exits) it returns the result shape of the SDK's
//   schema for background commands, {command, processId, backgroundProcessStatus}, plus the output
//   so far (`stdout`, both streams, bounded), `exitCode` if it already ended, `logFile`, and a
//   `message`.

import fs from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'

export const BACKGROUND_SETTLE_MS = 1000
const FIRST_OUTPUT_LIMIT = 10_000

/**
 * @param {object} deps
 * @param {Function} deps.runSync   the SDK's runTerminalCommand
 * @param {string} deps.cwd         project root
 * @param {object} deps.env         the client's `env` option (applied on top of process.env)
 * @param {() => string} deps.logDir where background logs go (created on first use)
 * @param {number} [deps.settleMs]
 */
export function createTerminalCommand({ runSync, cwd, env, logDir, settleMs = BACKGROUND_SETTLE_MS, log = () => {} }) {
  let counter = 0
  return async function runTerminalCommand(input) {
    const resolvedCwd = path.resolve(cwd, input?.cwd ?? '.')
    if (input?.process_type !== 'BACKGROUND') {
      return runSync({ ...input, cwd: resolvedCwd, env })
    }
    counter += 1
    return startBackground({
      command: input.command,
      cwd: resolvedCwd,
      env: { ...process.env, ...env },
      logFile: path.join(logDir(), `bg-${process.pid}-${Date.now()}-${counter}.log`),
      settleMs,
      log,
    })
  }
}

async function startBackground({ command, cwd, env, logFile, settleMs, log }) {
  fs.mkdirSync(path.dirname(logFile), { recursive: true, mode: 0o700 })
  const fd = fs.openSync(logFile, 'a', 0o600)
  let child
  try {
    child = spawn('bash', ['-c', command], {
      cwd,
      env,
      stdio: ['ignore', fd, fd],
      detached: false, // stays in the adapter's process group
    })
  } finally {
    fs.closeSync(fd)
  }
  const spawned = await new Promise((resolve) => {
    child.once('spawn', () => resolve(null))
    child.once('error', (error) => resolve(error))
  })
  if (spawned) {
    return [{ type: 'json', value: { command, errorMessage: `Failed to spawn command: ${spawned.message}` } }]
  }
  const pid = child.pid
  log(`background command started (pid ${pid}, log ${logFile}): ${command}`)
  let exitCode = null
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      exitCode = code ?? (signal ? 128 : null)
      resolve()
    })
  })
  let timer
  await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, settleMs)))])
  clearTimeout(timer)
  child.unref()

  let output = ''
  try {
    output = fs.readFileSync(logFile, 'utf8')
  } catch {
    // nothing written yet
  }
  if (output.length > FIRST_OUTPUT_LIMIT) output = `${output.slice(0, FIRST_OUTPUT_LIMIT)}\n[output truncated]`
  const running = exitCode === null
  const status = running ? 'running' : exitCode === 0 ? 'completed' : 'error'
  return [
    {
      type: 'json',
      value: {
        command,
        processId: pid,
        backgroundProcessStatus: status,
        stdout: output,
        ...(running ? {} : { exitCode }),
        logFile,
        message: running
          ? `Started in the background (pid ${pid}); output so far above, the rest goes to ${logFile}.`
          : `The background command exited with code ${exitCode} within ${settleMs} ms.`,
      },
    },
  ]
}
