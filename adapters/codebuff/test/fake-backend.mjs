#!/usr/bin/env node
// A scripted stand-in for the Codebuff backend (https://www.codebuff.com), for offline tests.
//
// The real @codebuff/sdk, with its origin redirected here by the adapter's test-only
// CODEBUFFD_TEST_BACKEND_URL, runs end to end against this server: it answers the user
// lookup, agent-run bookkeeping, token counting, agent-definition fetches and the
// OpenAI-style streaming chat completions, whose replies come from a scenario in
// ./scenarios.mjs. Every request is recorded and served at GET /__requests.
//
// Interface (stable; Rust integration tests spawn exactly this):
//   node test/fake-backend.mjs --scenario NAME [--port 0] [--host 127.0.0.1]
//   stdout: exactly one line {"url":"http://127.0.0.1:PORT"} once listening; logs go to stderr.
//   exits on SIGTERM/SIGINT, and when its stdin (if a pipe) reaches EOF.
// Plain node:http, no dependencies.

import http from 'node:http'
import fs from 'node:fs'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

import { scenarios, AGENT_DEFINITIONS, SCRIPT_EXHAUSTED_REPLY } from './scenarios.mjs'

/** Fixed `created` timestamp so SSE chunks are byte-stable. */
const CREATED = 1700000000

function log(...parts) {
  process.stderr.write(`[fake-backend] ${parts.join(' ')}\n`)
}

/** Short id of an agent id: "codebuff/helper@0.0.1" → "helper". */
export function shortAgentId(agentId) {
  if (typeof agentId !== 'string') return ''
  const withoutVersion = agentId.split('@')[0]
  const parts = withoutVersion.split('/')
  return parts[parts.length - 1]
}

/** The mutable state of one backend instance: runs, reply queues, recorded requests. */
class BackendState {
  constructor(scenario) {
    this.scenario = scenario
    this.requests = []
    this.runs = new Map() // runId -> { agentId, ancestorRunIds, status }
    this.runCounter = 0
    this.stepCounter = 0
    this.completionCounter = 0
    // Reply queues: root agent ("main") and one per subagent short id.
    this.queues = new Map()
    this.queues.set('main', [...(scenario.replies ?? [])])
    for (const [agent, replies] of Object.entries(scenario.subagentReplies ?? {})) {
      this.queues.set(agent, [...replies])
    }
    this.chatRequestsSeen = 0
  }

  startRun(agentId, ancestorRunIds) {
    this.runCounter += 1
    const runId = `run-${String(this.runCounter).padStart(4, '0')}`
    this.runs.set(runId, { agentId, ancestorRunIds: ancestorRunIds ?? [], status: 'running' })
    return runId
  }

  nextStepId() {
    this.stepCounter += 1
    return `step-${String(this.stepCounter).padStart(4, '0')}`
  }

  /** Queue key for the agent that owns runId: "main" for a root run, else its short id. */
  queueKeyForRun(runId) {
    const run = this.runs.get(runId)
    if (!run) return 'main'
    if (run.ancestorRunIds.length === 0) return 'main'
    return shortAgentId(run.agentId)
  }

  nextReply(runId) {
    const key = this.queueKeyForRun(runId)
    const queue = this.queues.get(key)
    if (queue && queue.length > 0) return { key, reply: queue.shift() }
    return { key, reply: SCRIPT_EXHAUSTED_REPLY }
  }
}

function sendJson(res, status, body, headers = {}) {
  const text = JSON.stringify(body)
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  })
  res.end(text)
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.on('error', reject)
  })
}

function parseJsonOrRaw(text) {
  if (text === '') return null
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** Splits a string in two (roughly halves) so tool arguments arrive as streamed deltas. */
function splitInTwo(text) {
  if (text.length < 2) return [text]
  const mid = Math.floor(text.length / 2)
  return [text.slice(0, mid), text.slice(mid)]
}

/** Builds the SSE `data:` payloads (objects) for one scripted reply. */
export function buildChunks(reply, { completionId, model }) {
  const base = (choice, extra = {}) => ({
    id: completionId,
    object: 'chat.completion.chunk',
    created: CREATED,
    model,
    choices: [{ index: 0, ...choice }],
    ...extra,
  })
  const out = []
  out.push(base({ delta: { role: 'assistant', content: '' }, finish_reason: null }))
  for (const r of reply.reasoning ?? []) {
    out.push(base({ delta: { reasoning_content: r }, finish_reason: null }))
  }
  for (const t of reply.text ?? []) {
    out.push(base({ delta: { content: t }, finish_reason: null }))
  }
  ;(reply.toolCalls ?? []).forEach((call, index) => {
    const args = JSON.stringify(call.input ?? {})
    const [first, ...rest] = splitInTwo(args)
    out.push(
      base({
        delta: {
          tool_calls: [
            { index, id: call.id, type: 'function', function: { name: call.name, arguments: first } },
          ],
        },
        finish_reason: null,
      }),
    )
    for (const piece of rest) {
      out.push(
        base({
          delta: { tool_calls: [{ index, function: { arguments: piece } }] },
          finish_reason: null,
        }),
      )
    }
  })
  if (reply.stall || reply.break) return { chunks: out, stall: true }
  const finishReason = reply.finishReason ?? ((reply.toolCalls ?? []).length > 0 ? 'tool_calls' : 'stop')
  const completionTokens = (reply.text ?? []).join('').length + (reply.reasoning ?? []).join('').length
  out.push(
    base(
      { delta: {}, finish_reason: finishReason },
      {
        usage: {
          prompt_tokens: 1000,
          completion_tokens: completionTokens,
          total_tokens: 1000 + completionTokens,
          cost: reply.cost ?? 0,
        },
      },
    ),
  )
  return { chunks: out, stall: false }
}

async function handleChatCompletions(state, body, req, res) {
  state.chatRequestsSeen += 1
  const failure = state.scenario.failures?.chat
  if (failure && state.chatRequestsSeen > (failure.afterRequests ?? 0)) {
    // The real backend answers errors as {error: <code>, message}; that body does not match the
    // OpenAI error schema, so the SDK reports the HTTP status text ("Payment Required").
    return sendJson(res, failure.status, failure.body ?? { error: 'error', message: 'Scripted failure' }, failure.headers)
  }
  const runId = body?.codebuff_metadata?.run_id
  const run = typeof runId === 'string' ? state.runs.get(runId) : undefined
  if (!run) return sendJson(res, 400, { message: `runId Not Found: ${runId}` })
  if (run.status !== 'running') return sendJson(res, 400, { message: `runId Not Running: ${runId}` })

  const { key, reply } = state.nextReply(runId)
  state.completionCounter += 1
  const completionId = `chatcmpl-${String(state.completionCounter).padStart(4, '0')}`
  log(`chat completion ${completionId} for ${key} (${runId})`)
  if (reply.status) {
    return sendJson(res, reply.status, reply.body ?? { error: 'error', message: 'Scripted failure' }, reply.headers)
  }
  const { chunks, stall } = buildChunks(reply, { completionId, model: body?.model ?? 'unknown' })
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  })
  for (const chunk of chunks) {
    res.write(`data: ${JSON.stringify(chunk)}\n\n`)
    if (reply.chunkDelayMs) await new Promise((r) => setTimeout(r, reply.chunkDelayMs))
  }
  if (reply.break) {
    // The connection drops in the middle of the stream (no finish chunk, no [DONE]).
    state.broken = (state.broken ?? 0) + 1
    await new Promise((r) => setTimeout(r, 20))
    return res.destroy()
  }
  if (stall) {
    // Hold the stream open until the client goes away or the server shuts down.
    state.stalled = (state.stalled ?? 0) + 1
    return
  }
  res.end('data: [DONE]\n\n')
}

function handleAgentRuns(state, body, res) {
  if (body?.action === 'START') {
    const runId = state.startRun(body.agentId, body.ancestorRunIds)
    return sendJson(res, 200, { runId })
  }
  if (body?.action === 'FINISH') {
    const run = state.runs.get(body.runId)
    if (run) run.status = body.status ?? 'completed'
    return sendJson(res, 200, {})
  }
  return sendJson(res, 400, { message: 'Unknown action' })
}

function handleMe(state, url, res) {
  const failure = state.scenario.failures?.me
  if (failure) return sendJson(res, failure.status, failure.body ?? { message: 'Unauthorized' })
  const fields = (url.searchParams.get('fields') ?? 'id').split(',').filter(Boolean)
  const values = {
    id: 'user-fake-0001',
    email: 'test@example.invalid',
    discord_id: null,
    referral_code: 'ref-fake',
    stripe_customer_id: null,
    banned: false,
  }
  const out = {}
  for (const f of fields) out[f] = f in values ? values[f] : null
  return sendJson(res, 200, out)
}

function handleAgentDefinition(state, parts, res) {
  // /api/v1/agents/<publisher>/<id>/<version>
  const [publisher, id, version] = parts
  const definitions = { ...AGENT_DEFINITIONS, ...(state.scenario.agentDefinitions ?? {}) }
  const def = publisher === 'codebuff' ? definitions[id] : undefined
  if (!def) return sendJson(res, 404, { error: 'Agent not found' })
  const resolvedVersion = version === 'latest' ? def.version ?? '0.0.1' : version
  return sendJson(res, 200, { version: resolvedVersion, data: { ...def, id } })
}

/** Creates the server for one scenario. Returns { server, state }. */
export function createFakeBackend(scenario) {
  const state = new BackendState(scenario)
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake.invalid')
    const text = await readBody(req).catch(() => '')
    const body = parseJsonOrRaw(text)
    const path = url.pathname

    if (req.method === 'GET' && path === '/__requests') {
      return sendJson(res, 200, state.requests)
    }
    state.requests.push({
      method: req.method,
      path: url.pathname + url.search,
      authorization: req.headers.authorization ?? null,
      body,
    })

    try {
      if (req.method === 'GET' && path === '/api/v1/me') return handleMe(state, url, res)
      if (req.method === 'POST' && path === '/api/v1/agent-runs') return handleAgentRuns(state, body, res)
      const stepMatch = /^\/api\/v1\/agent-runs\/([^/]+)\/steps$/.exec(path)
      if (req.method === 'POST' && stepMatch) return sendJson(res, 200, { stepId: state.nextStepId() })
      if (req.method === 'POST' && path === '/api/v1/token-count') {
        const size = JSON.stringify(body?.messages ?? []).length + String(body?.system ?? '').length
        return sendJson(res, 200, { inputTokens: Math.ceil(size / 4) })
      }
      if (req.method === 'POST' && path === '/api/v1/chat/completions') {
        return await handleChatCompletions(state, body, req, res)
      }
      const agentMatch = /^\/api\/v1\/agents\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(path)
      if (req.method === 'GET' && agentMatch) {
        return handleAgentDefinition(state, agentMatch.slice(1).map(decodeURIComponent), res)
      }
      if (req.method === 'GET' && path === '/api/healthz') return sendJson(res, 200, { status: 'ok' })
    } catch (error) {
      log(`error handling ${req.method} ${path}: ${error?.stack ?? error}`)
      if (!res.headersSent) return sendJson(res, 500, { message: 'fake backend error' })
      return res.end()
    }
    log(`unknown route ${req.method} ${url.pathname}${url.search}`)
    return sendJson(res, 404, { message: `fake backend: no route for ${req.method} ${path}` })
  })
  return { server, state }
}

function stdinIsPipe() {
  try {
    const st = fs.fstatSync(0)
    return st.isFIFO() || st.isSocket()
  } catch {
    return false
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      scenario: { type: 'string' },
      port: { type: 'string', default: '0' },
      host: { type: 'string', default: '127.0.0.1' },
    },
  })
  const name = values.scenario
  if (!name || !scenarios[name]) {
    process.stderr.write(
      `usage: fake-backend.mjs --scenario NAME [--port 0]\nscenarios: ${Object.keys(scenarios).join(', ')}\n`,
    )
    process.exit(2)
  }
  const { server } = createFakeBackend(scenarios[name])
  const sockets = new Set()
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  const shutdown = (why) => {
    log(`shutting down (${why})`)
    server.close()
    for (const s of sockets) s.destroy()
    process.exit(0)
  }
  process.on('SIGTERM', () => shutdown('SIGTERM'))
  process.on('SIGINT', () => shutdown('SIGINT'))
  if (stdinIsPipe()) {
    process.stdin.on('end', () => shutdown('stdin closed'))
    process.stdin.on('error', () => shutdown('stdin error'))
    process.stdin.resume()
  }
  server.listen(Number(values.port), values.host, () => {
    const { port } = server.address()
    process.stdout.write(`${JSON.stringify({ url: `http://${values.host}:${port}` })}\n`)
    log(`scenario ${name} listening on ${values.host}:${port}`)
  })
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) {
  main()
}
