// Process plumbing shared by the capture script and the adapter tests: start the fake backend,
// prepare a scratch workspace, run bin/codebuff-agent.mjs against it (answering ask_user on
// stdin), and make sure every process started here is gone afterwards.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
export const ADAPTER_DIR = path.resolve(HERE, '..')
export const ADAPTER_BIN = path.join(ADAPTER_DIR, 'bin', 'codebuff-agent.mjs')
export const FAKE_BACKEND = path.join(HERE, 'fake-backend.mjs')

/** Reads newline-separated lines from a stream, calling onLine for each complete line. */
function onLines(stream, onLine) {
  let buffer = ''
  stream.setEncoding('utf8')
  stream.on('data', (chunk) => {
    buffer += chunk
    let nl
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl)
      buffer = buffer.slice(nl + 1)
      onLine(line)
    }
  })
  return () => buffer
}

function waitForExit(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true)
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    child.once('exit', () => {
      clearTimeout(timer)
      resolve(true)
    })
  })
}

/** Kills a whole process group (created with detached:true); ignores groups already gone. */
export function killGroup(pid, signal = 'SIGKILL') {
  try {
    process.kill(-pid, signal)
    return true
  } catch {
    return false
  }
}

/** PIDs of the group's processes that are still running (not zombies), from /proc. */
export function groupMembers(pgid) {
  const members = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') members.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return members
}

/** Kills the group and waits (up to maxMs) until none of its processes runs; returns those left. */
export async function killGroupAndWait(pgid, maxMs = 3000) {
  killGroup(pgid)
  const deadline = Date.now() + maxMs
  let left = groupMembers(pgid)
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    killGroup(pgid)
    left = groupMembers(pgid)
  }
  return left
}

/** True while any process of the group still exists. */
export function groupAlive(pid) {
  try {
    process.kill(-pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * Starts `node test/fake-backend.mjs --scenario NAME --port 0`.
 * Returns {url, stop(), requests(), stderr()}.
 */
export async function startBackend(name) {
  const child = spawn(process.execPath, [FAKE_BACKEND, '--scenario', name, '--port', '0'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  })
  let stderr = ''
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (c) => {
    stderr += c
  })
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fake backend did not start:\n${stderr}`)), 10_000)
    onLines(child.stdout, (line) => {
      clearTimeout(timer)
      try {
        resolve(JSON.parse(line).url)
      } catch (error) {
        reject(error)
      }
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`fake backend exited (${code}):\n${stderr}`))
    })
  })
  return {
    url,
    pid: child.pid,
    stderr: () => stderr,
    async requests() {
      const res = await fetch(`${url}/__requests`)
      return res.json()
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        if (!(await waitForExit(child, 2000))) child.kill('SIGKILL')
        await waitForExit(child, 2000)
      }
      killGroup(child.pid)
    },
  }
}

/** Wipes and recreates root/{work,home,state}; writes the scenario's files into work. */
export function prepareWorkspace(root, files = {}) {
  fs.rmSync(root, { recursive: true, force: true })
  const workDir = path.join(root, 'work')
  const homeDir = path.join(root, 'home')
  const stateDir = path.join(root, 'state')
  for (const dir of [workDir, homeDir, stateDir]) fs.mkdirSync(dir, { recursive: true })
  for (const [rel, content] of Object.entries(files)) {
    const file = path.join(workDir, rel)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, content)
  }
  return { root, workDir, homeDir, stateDir }
}

/**
 * The environment of an adapter run: nothing inherited but PATH, a scratch HOME. `apiKey: null`
 * leaves CODEBUFF_API_KEY out (the --stdin-turn form gets the key from the turn line).
 */
export function adapterEnv({ backendUrl, workspace, extra = {}, apiKey = 'test-key' }) {
  return {
    PATH: process.env.PATH,
    HOME: workspace.homeDir,
    ...(apiKey !== null && { CODEBUFF_API_KEY: apiKey }),
    CODEBUFF_STATE_DIR: workspace.stateDir,
    CODEBUFFD_TEST_BACKEND_URL: backendUrl,
    ...extra,
  }
}

/** The line the adapter logs on stderr once it is ready for a turn (--stdin-turn). */
export const READY_RE = /ready for a turn \((\d+) ms after start\)/

/** A turnWhen for runAdapter: resolves once the adapter says it is ready for a turn (+ delayMs). */
export function afterReady(delayMs = 0) {
  return (child, getStderr) =>
    new Promise((resolve, reject) => {
      const started = Date.now()
      const poll = setInterval(() => {
        if (READY_RE.test(getStderr())) {
          clearInterval(poll)
          setTimeout(resolve, delayMs)
        } else if (child.exitCode !== null || Date.now() - started > 20_000) {
          clearInterval(poll)
          reject(new Error('the adapter never became ready'))
        }
      }, 10)
    })
}

/** Writes one JSON line to a child's stdin. */
export function writeLine(child, object) {
  const line = JSON.stringify(object)
  child.stdin.write(`${line}\n`)
  return line
}

/**
 * Runs the adapter once. Options:
 *   argv            flags (after --stream-json), e.g. ['--cwd', dir]; the prompt is appended
 *   prompt, env
 *   turn            instead of argv/prompt: run `--stream-json --stdin-turn` and write this object
 *                   (type "turn" added) as the first stdin line — at once, or when
 *                   turnWhen(child, stderrSoFar) resolves
 *   answers         stdin answer objects; one is written (with toolCallId) per ask_user tool_call
 *   onEvent(event, child)  observer for each stdout event (e.g. to send a signal)
 *   onStderr(text, child)  observer for stderr chunks
 *   timeoutMs       hard limit; the process group is killed and the promise rejects
 * (`turn` may also be a string: written verbatim, for malformed-turn tests.)
 * Resolves {exitCode, signal, stdout, events, stderr, stdinLines, pid, exitedAt, durationMs,
 * turnWrittenAt}.
 */
export function runAdapter({ argv = [], prompt, env, turn, turnWhen, answers = [], onEvent, onStderr, timeoutMs = 30_000 }) {
  const started = Date.now()
  const args = turn ? [ADAPTER_BIN, '--stream-json', '--stdin-turn'] : [ADAPTER_BIN, '--stream-json', ...argv, prompt]
  const child = spawn(process.execPath, args, {
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  })
  const pending = [...answers]
  const stdinLines = []
  const events = []
  let stdout = ''
  let stderr = ''
  let turnWrittenAt = null
  if (turn) {
    const write = () => {
      turnWrittenAt = Date.now()
      if (typeof turn === 'string') {
        stdinLines.push(turn)
        child.stdin.write(`${turn}\n`)
      } else {
        stdinLines.push(writeLine(child, { type: 'turn', ...turn }))
      }
    }
    if (turnWhen) Promise.resolve(turnWhen(child, () => stderr)).then(write, () => {})
    else write()
  }
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (c) => {
    stderr += c
    onStderr?.(c, child)
  })
  child.stdin.on('error', () => {})
  onLines(child.stdout, (line) => {
    stdout += `${line}\n`
    let event
    try {
      event = JSON.parse(line)
    } catch {
      event = { unparsed: line }
    }
    events.push(event)
    if (event.type === 'tool_call' && event.toolName === 'ask_user' && pending.length > 0) {
      const answer = { ...pending.shift() }
      const line = JSON.stringify({ type: answer.type, toolCallId: event.toolCallId, ...answer })
      stdinLines.push(line)
      child.stdin.write(`${line}\n`)
    }
    onEvent?.(event, child)
  })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      killGroup(child.pid)
      reject(new Error(`adapter run timed out after ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`))
    }, timeoutMs)
    child.once('error', (error) => {
      clearTimeout(timer)
      reject(error)
    })
    child.once('close', (exitCode, signal) => {
      clearTimeout(timer)
      child.stdin.destroy()
      resolve({
        exitCode,
        signal,
        stdout,
        events,
        stderr,
        stdinLines,
        pid: child.pid,
        exitedAt: Date.now(),
        durationMs: Date.now() - started,
        turnWrittenAt,
      })
    })
  })
}
