// Test harness: starts `codebuffd acp` as a client would (a subprocess on stdio) and drives it
// with the official ACP TypeScript SDK's client side; raw JSON-RPC lines for malformed input;
// process checks for what the agent leaves behind.
//
// Every agent is started in a process session of its own (`detached`), so everything it spawns
// (agents, their children) carries its session id; `stop()` asserts none of them outlives it.
// What the Node suites share (the binary, scratch directories, process checks, the adapter's
// fake backend) is `tests/support/harness.mjs`.

import { spawn } from 'node:child_process'
import { Readable, Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import assert from 'node:assert/strict'

import * as acp from '@agentclientprotocol/sdk'

import {
  BIN,
  REPO,
  assertSessionGone,
  exited,
  fakeBackend,
  sessionMembers,
  tempDir as scratchDir,
} from '../support/harness.mjs'

export { acp }

export { REPO, BIN, sessionMembers, assertSessionGone, exited, fakeBackend }
export const LIMIT_MS = 60_000

/** A scratch directory, removed when the test ends. */
export function tempDir(t, tag) {
  return scratchDir(t, `acp-${tag}`)
}

/** Spawns `codebuffd acp` in a session of its own. */
export function spawnAgent({ dataDir, agent = 'mock', args = [], env = {}, cwd }) {
  const child = spawn(BIN, ['acp', '--agent', agent, '--data-dir', dataDir, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
    cwd: cwd ?? dataDir,
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'info', ...env },
  })
  const stderr = []
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk) => {
    stderr.push(chunk)
    if (process.env.CODEBUFFD_TEST_LOG) process.stderr.write(`[acp ${child.pid}] ${chunk}`)
  })
  child.stderrText = () => stderr.join('')
  return child
}

/** The client capabilities the tests advertise by default: forms and notices. */
export const FULL_CAPS = {
  fs: { readTextFile: false, writeTextFile: false },
  terminal: false,
  elicitation: { form: {} },
  session: { notices: {} },
}

/**
 * A running `codebuffd acp` with an SDK client connected to it.
 *
 * `answer.permission(params)` and `answer.elicitation(params)` answer the agent's requests
 * (default: cancelled / declined); every request is recorded in `requests`.
 */
export class AcpAgent {
  static async start(t, options = {}) {
    const child = spawnAgent(options)
    const agent = new AcpAgent(child, options)
    t.after(async () => {
      await agent.stop().catch(() => {})
    })
    agent.init = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: options.caps ?? FULL_CAPS,
      clientInfo: { name: 'codebuffd-tests', version: '0.0.0' },
    })
    return agent
  }

  constructor(child, options) {
    this.child = child
    this.sid = child.pid
    this.updates = []
    this.requests = []
    this.answer = options.answer ?? {}
    const app = acp
      .client({ name: 'codebuffd-tests' })
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        this.updates.push(params)
      })
      .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
        this.requests.push({ method: 'session/request_permission', params, signal })
        if (this.answer.permission) return this.answer.permission(params, signal)
        return { outcome: { outcome: 'cancelled' } }
      })
      .onRequest(acp.methods.client.elicitation.create, async ({ params, signal }) => {
        this.requests.push({ method: 'elicitation/create', params, signal })
        if (this.answer.elicitation) return this.answer.elicitation(params, signal)
        return { action: 'decline' }
      })
    this.connection = app.connect(
      acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)),
    )
  }

  request(method, params) {
    return this.connection.agent.request(method, params)
  }

  notify(method, params) {
    return this.connection.agent.notify(method, params)
  }

  async newSession(cwd) {
    const res = await this.request(acp.methods.agent.session.new, { cwd, mcpServers: [] })
    return res.sessionId
  }

  /** Sends a prompt (text or content blocks); resolves to `{response}` or `{error}`. */
  async prompt(sessionId, prompt) {
    const blocks = typeof prompt === 'string' ? [{ type: 'text', text: prompt }] : prompt
    try {
      const response = await this.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: blocks,
      })
      return { response }
    } catch (error) {
      return { error }
    }
  }

  /** The updates of `sessionId` so far (from index `from`). */
  updatesOf(sessionId, from = 0) {
    return this.updates
      .slice(from)
      .filter((u) => u.sessionId === sessionId)
      .map((u) => u.update)
  }

  /** Waits until an update of `sessionId` satisfies `pred`; returns it. */
  async waitForUpdate(sessionId, pred, limitMs = LIMIT_MS) {
    const deadline = Date.now() + limitMs
    for (;;) {
      const found = this.updatesOf(sessionId).find(pred)
      if (found) return found
      if (Date.now() > deadline) {
        throw new Error(`no such update of ${sessionId}: ${JSON.stringify(this.updatesOf(sessionId))}`)
      }
      await sleep(10)
    }
  }

  /** Waits until `n` requests from the agent have arrived. */
  async waitForRequests(n, limitMs = LIMIT_MS) {
    const deadline = Date.now() + limitMs
    while (this.requests.length < n) {
      if (Date.now() > deadline) throw new Error(`only ${this.requests.length} requests came`)
      await sleep(10)
    }
    return this.requests[n - 1]
  }

  /** Closes stdin (the client goes away) and waits for the exit; asserts exit 0 and that no
   * process is left. */
  async stop() {
    if (this.stopped) return this.exitCode
    this.stopped = true
    this.child.stdin.end()
    this.exitCode = await exited(this.child)
    await assertSessionGone(this.sid)
    assert.equal(this.exitCode, 0, `codebuffd acp exit; stderr:\n${this.child.stderrText()}`)
    return this.exitCode
  }

  /** SIGKILL: a crash. What it started is left running, as a crash leaves it; returns its
   * process session id. */
  async kill9() {
    this.stopped = true
    process.kill(this.child.pid, 'SIGKILL')
    await exited(this.child)
    return this.sid
  }
}

/** The text of the `agent_message_chunk`s among `updates`. */
export function agentText(updates) {
  return updates
    .filter((u) => u.sessionUpdate === 'agent_message_chunk')
    .map((u) => u.content.text)
    .join('')
}

/** The text of the `agent_thought_chunk`s among `updates`. */
export function thoughtText(updates) {
  return updates
    .filter((u) => u.sessionUpdate === 'agent_thought_chunk')
    .map((u) => u.content.text)
    .join('')
}

/** The `tool_call`s among `updates`, each with the fields of its later `tool_call_update`s
 * merged in, and the statuses it went through. */
export function toolCalls(updates) {
  const calls = new Map()
  for (const u of updates) {
    if (u.sessionUpdate === 'tool_call') {
      calls.set(u.toolCallId, { ...u, statuses: [u.status ?? 'pending'] })
    } else if (u.sessionUpdate === 'tool_call_update') {
      const call = calls.get(u.toolCallId)
      assert.ok(call, `an update of an unknown tool call ${u.toolCallId}`)
      const { sessionUpdate: _, ...fields } = u
      Object.assign(call, fields)
      if (u.status) call.statuses.push(u.status)
    }
  }
  return [...calls.values()]
}

/** The kinds of `updates`, in order, consecutive repeats folded. */
export function kinds(updates) {
  const out = []
  for (const u of updates) {
    if (out.at(-1) !== u.sessionUpdate) out.push(u.sessionUpdate)
  }
  return out
}

/**
 * A `codebuffd acp` driven with raw JSON-RPC lines (for input no SDK would send).
 */
export class RawAgent {
  static start(t, options) {
    const child = spawnAgent(options)
    const raw = new RawAgent(child)
    t.after(async () => {
      raw.child.stdin.end()
      const code = await exited(raw.child).catch(() => raw.child.kill('SIGKILL'))
      await assertSessionGone(raw.sid)
      assert.equal(code, 0, `codebuffd acp exit; stderr:\n${raw.child.stderrText()}`)
    })
    return raw
  }

  constructor(child) {
    this.child = child
    this.sid = child.pid
    this.messages = []
    this.nonJson = []
    let buffer = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk) => {
      buffer += chunk
      let i
      while ((i = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, i)
        buffer = buffer.slice(i + 1)
        try {
          this.messages.push(JSON.parse(line))
        } catch {
          this.nonJson.push(line)
        }
      }
    })
  }

  /** Writes one line: a message object or raw text. */
  send(message) {
    this.child.stdin.write(`${typeof message === 'string' ? message : JSON.stringify(message)}\n`)
  }

  /** Waits for a message satisfying `pred`. */
  async next(pred, limitMs = LIMIT_MS) {
    const deadline = Date.now() + limitMs
    for (;;) {
      const found = this.messages.find(pred)
      if (found) return found
      if (Date.now() > deadline) {
        throw new Error(`no such message; got ${JSON.stringify(this.messages)}`)
      }
      await sleep(10)
    }
  }

  /** Sends a request and waits for its response. */
  async call(id, method, params) {
    this.send({ jsonrpc: '2.0', id, method, params })
    return this.next((m) => m.id === id && ('result' in m || 'error' in m))
  }

  async initialize() {
    return this.call(0, 'initialize', {
      protocolVersion: 1,
      clientCapabilities: {},
      clientInfo: { name: 'raw', version: '0' },
    })
  }
}
