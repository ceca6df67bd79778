// The run's cost as it grows: `{"type":"cost","totalCost":N}` (contract §2), credits of this run so
// far, printed as soon as each model request's cost is known, subagents' requests included.
//
// Where @codebuff/sdk 0.10.7 learns a request's cost (read from its bundle, dist/index.mjs):
//   * Every model request to the Codebuff backend is `POST /api/v1/chat/completions`, made by the
//     AI SDK's OpenAICompatibleChatLanguageModel that createCodebuffBackendModel() builds afresh
//     for each request (getModelForRequest), through globalThis.fetch. Its metadataExtractor keeps
//     the last numeric `usage.cost` and `usage.cost_details.upstream_inference_cost` (USD) of the
//     streamed chunks (processChunk) — or of the JSON body for non-streaming calls — and ignores
//     them altogether when CODEBUFF_BYOK_OPENROUTER is set.
//   * promptAiSdkStream(), once the whole stream has been consumed, computes
//     costDollars = (cost ?? 0) + (upstreamInferenceCost ?? 0) and, if non-zero, calls
//     onCostCalculated(calculateUsedCredits({costDollars})) = round(costDollars × (1 +
//     PROFIT_MARGIN) × 100) credits, PROFIT_MARGIN = 0.055 (promptAiSdk / promptAiSdkStructured the
//     same for non-streaming calls).
//   * onCostCalculated (runAgentStep, runProgrammaticStep) adds to that agent's
//     agentState.creditsUsed; web_search / read_docs add the `creditsUsed` of their
//     /api/v1/web-search, /api/v1/docs-search answers the same way; spawn_agents adds each
//     subagent's creditsUsed to its parent when the subagent ends; callMainPrompt zeroes the root's
//     creditsUsed at the start of the run and reports it as `finish.totalCost`.
// None of that is observable through handleEvent, and a subagent's costs reach the root only when
// it ends, so the adapter reproduces the computation on the responses themselves: this wrapper of
// globalThis.fetch passes the chat completions body through to the SDK untouched, reads the same
// fields on the way, and — when the body has been read to its end, which is when the SDK counts it
// (a broken or aborted stream counts for neither) — adds the request's credits to the run's total.
// The adapter prints a `cost` event whenever that total changes and, before `finish`, one with
// finish.totalCost if the running total differs from it (not observed with the fake backend; e.g.
// spawn_agent_inline children, whose credits the SDK never adds to their parent).

/** The SDK's PROFIT_MARGIN (common/src/old-constants.ts). */
export const PROFIT_MARGIN = 0.055

/** The SDK's calculateUsedCredits(): USD → credits, rounded per request. */
export function creditsOf(costDollars) {
  return Math.round(costDollars * (1 + PROFIT_MARGIN) * 100)
}

/** The SDK's BYOK switch: with it set, the SDK ignores the backend's usage.cost. */
export const BYOK_OPENROUTER_ENV = 'CODEBUFF_BYOK_OPENROUTER'

const CHAT_PATH = '/api/v1/chat/completions'
/** Web API tools whose answers carry `creditsUsed`, and the field the SDK requires for success. */
const WEB_API_RESULT_FIELD = { '/api/v1/web-search': 'result', '/api/v1/docs-search': 'documentation' }

/** Upper bound for a non-streaming body kept for parsing (the SDK's own replies are far smaller). */
const MAX_JSON_CHARS = 16 * 1024 * 1024

/**
 * Reads `usage.cost` / `usage.cost_details.upstream_inference_cost` the way the SDK's metadata
 * extractor does: the last numeric value of each wins.
 */
export class UsageCost {
  constructor() {
    this.cost = null
    this.upstream = null
  }

  observe(parsed) {
    const usage = parsed?.usage
    if (typeof usage?.cost === 'number') this.cost = usage.cost
    if (typeof usage?.cost_details?.upstream_inference_cost === 'number') {
      this.upstream = usage.cost_details.upstream_inference_cost
    }
  }

  /** The request's credits, or 0 (the SDK counts nothing for a zero cost). */
  credits() {
    const dollars = (this.cost ?? 0) + (this.upstream ?? 0)
    return dollars ? creditsOf(dollars) : 0
  }
}

/**
 * A minimal server-sent-events reader: feed() text, get each event's `data` (lines joined by "\n")
 * through onData. Comments (":…") and other fields are skipped; CR, LF and CRLF end lines.
 */
export class SseReader {
  constructor(onData) {
    this.onData = onData
    this.buffer = ''
    this.data = null
  }

  feed(text) {
    this.buffer += text
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer)
      if (!match) break
      // A lone "\r" at the end may be the first half of "\r\n": wait for more.
      if (match[0] === '\r' && match.index === this.buffer.length - 1) break
      const line = this.buffer.slice(0, match.index)
      this.buffer = this.buffer.slice(match.index + match[0].length)
      this.#line(line)
    }
  }

  end() {
    if (this.buffer !== '') this.#line(this.buffer.replace(/\r$/, ''))
    this.buffer = ''
    this.#dispatch()
  }

  #line(line) {
    if (line === '') return this.#dispatch()
    if (line.startsWith(':')) return
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    if (field !== 'data') return
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    this.data = this.data === null ? value : `${this.data}\n${value}`
  }

  #dispatch() {
    if (this.data === null) return
    const data = this.data
    this.data = null
    this.onData(data)
  }
}

function parseJson(text) {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function describe(input, init) {
  let url
  try {
    if (typeof input === 'string') url = new URL(input)
    else if (input instanceof URL) url = input
    else if (input && typeof input.url === 'string') url = new URL(input.url)
    else return null
  } catch {
    return null
  }
  const requestMethod = input && typeof input === 'object' && typeof input.method === 'string' ? input.method : undefined
  const method = String(init?.method ?? requestMethod ?? 'GET').toUpperCase()
  return { origin: url.origin, path: url.pathname, method }
}

export class CostMeter {
  /**
   * @param {object} opts
   * @param {string[]} opts.origins   the Codebuff backend origins whose responses are metered
   * @param {object} [opts.env]       where CODEBUFF_BYOK_OPENROUTER is looked up (at request time)
   * @param {(msg: string) => void} [opts.log]
   */
  constructor({ origins, env = process.env, log = () => {} }) {
    this.origins = new Set(origins)
    this.env = env
    this.log = log
    this.total = 0
    this.requests = 0 // model requests whose cost was counted (including zero-credit ones)
    this.listener = null
  }

  /** listener(total, credits) is called each time the total grows. */
  onChange(listener) {
    this.listener = listener
  }

  add(credits, what) {
    if (!Number.isFinite(credits) || credits === 0) return
    this.total += credits
    this.log(`cost: +${credits} credits (${what}), ${this.total} so far`)
    try {
      this.listener?.(this.total, credits)
    } catch (error) {
      this.log(`cost listener failed: ${error?.message ?? error}`)
    }
  }

  /** Wraps a fetch function. */
  wrap(innerFetch) {
    const meter = this
    return async function meteringFetch(input, init) {
      const response = await innerFetch(input, init)
      let target = null
      try {
        target = describe(input, init)
      } catch {
        // never let bookkeeping break a request
      }
      if (!target || !meter.origins.has(target.origin) || target.method !== 'POST' || !response.ok) return response
      try {
        if (target.path === CHAT_PATH) return meter.#meterChat(response)
        const field = WEB_API_RESULT_FIELD[target.path]
        if (field) meter.#meterWebApi(response, field, target.path)
      } catch (error) {
        meter.log(`cost: could not meter ${target.path}: ${error?.message ?? error}`)
      }
      return response
    }
  }

  /** The chat completions response, its body passed through a reader of the usage fields. */
  #meterChat(response) {
    if (!response.body || this.env[BYOK_OPENROUTER_ENV] !== undefined) return response
    const usage = new UsageCost()
    const streaming = /text\/event-stream/i.test(response.headers.get('content-type') ?? '')
    const decoder = new TextDecoder()
    let json = ''
    const sse = new SseReader((data) => {
      if (data !== '[DONE]') usage.observe(parseJson(data))
    })
    const take = (text) => {
      if (streaming) sse.feed(text)
      else if (json.length < MAX_JSON_CHARS) json += text
    }
    const meter = this
    const body = response.body.pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          controller.enqueue(chunk)
          try {
            take(typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }))
          } catch {
            // the SDK's copy is what matters
          }
        },
        flush() {
          // The body was read to its end: the SDK counts this request now.
          try {
            take(decoder.decode())
            if (streaming) sse.end()
            else usage.observe(parseJson(json))
            meter.requests += 1
            meter.add(usage.credits(), 'model request')
          } catch (error) {
            meter.log(`cost: could not read a chat completions usage: ${error?.message ?? error}`)
          }
        },
      }),
    )
    const metered = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers })
    Object.defineProperty(metered, 'url', { value: response.url })
    return metered
  }

  /** web_search / read_docs: `creditsUsed` of a successful answer, as the SDK adds it. */
  #meterWebApi(response, field, path) {
    response
      .clone()
      .text()
      .then((text) => {
        const json = parseJson(text)
        const result = json?.[field]
        if (typeof result === 'string' && result !== '' && typeof json.creditsUsed === 'number') {
          this.add(json.creditsUsed, path)
        }
      })
      .catch(() => {})
  }
}
