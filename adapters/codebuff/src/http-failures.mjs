// Remembers how the Codebuff backend answered, so a failed run can be reported with the backend's
// own words (contract §2.1) instead of the SDK's paraphrase.
//
// @codebuff/sdk 0.10.7 reduces HTTP failures to status texts ("Agent run error: Bad Request"), and
// after retries drops the status altogether ("Failed after 4 attempts. Last error: Too Many
// Requests"); an unreachable backend becomes a made-up 503 ("Network request failed"). This wrapper
// of globalThis.fetch records, for requests to the Codebuff origin only:
//   * every response that is not ok: method, path, status and (a bounded copy of) its body text,
//     read from a clone so the SDK still gets the whole response;
//   * every request that failed without a response (connection refused, DNS, reset): the cause;
//   * every ok response, which supersedes earlier failures of the same method + path (a retry that
//     succeeded, a non-fatal token-count failure followed by successful steps).
// failureFor() then picks the failure that explains the run's end.

const MAX_BODY_CHARS = 4000
const MAX_RECORDS = 200

export class HttpFailureRecorder {
  constructor({ origins }) {
    this.origins = new Set(origins)
    this.records = [] // {kind:'http'|'network', key, status?, body?, message?, seq}
    this.pendingBodies = new Set()
    this.seq = 0
  }

  /** Wraps a fetch function. */
  wrap(innerFetch) {
    const recorder = this
    return async function recordingFetch(input, init) {
      let target = null
      try {
        target = describe(input, init)
      } catch {
        // never let bookkeeping break a request
      }
      const watched = target && recorder.origins.has(target.origin)
      let response
      try {
        response = await innerFetch(input, init)
      } catch (error) {
        if (watched && !isAbort(error, init)) recorder.#network(target, error)
        throw error
      }
      if (watched) recorder.#response(target, response)
      return response
    }
  }

  #push(record) {
    record.seq = ++this.seq
    this.records.push(record)
    if (this.records.length > MAX_RECORDS) this.records.shift()
  }

  #network(target, error) {
    const cause = error?.cause
    const detail = cause?.code ?? cause?.message ?? error?.message ?? String(error)
    this.#push({ kind: 'network', key: target.key, origin: target.origin, message: String(detail) })
  }

  #response(target, response) {
    if (response.ok) {
      // A success supersedes earlier failures of the same request.
      this.records = this.records.filter((r) => r.key !== target.key)
      return
    }
    const record = { kind: 'http', key: target.key, status: response.status, statusText: response.statusText, body: '' }
    this.#push(record)
    let clone
    try {
      clone = response.clone()
    } catch {
      return
    }
    const pending = clone
      .text()
      .then((text) => {
        record.body = text.length > MAX_BODY_CHARS ? text.slice(0, MAX_BODY_CHARS) : text
      })
      .catch(() => {})
      .finally(() => this.pendingBodies.delete(pending))
    this.pendingBodies.add(pending)
  }

  /** Waits (briefly) for the bodies of failed responses still being read. */
  async settle(maxMs = 500) {
    if (this.pendingBodies.size === 0) return
    let timer
    await Promise.race([
      Promise.allSettled([...this.pendingBodies]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, maxMs)
      }),
    ])
    clearTimeout(timer)
  }

  /**
   * The recorded failure that explains a failed run, or null:
   *   * the SDK reported a status: the latest open HTTP failure with that status;
   *   * it reported none but its message names an HTTP failure (its retry wrapper "Failed after N
   *     attempts. Last error: Too Many Requests", or a recorded status text): that failure;
   *   * its message says the network failed: the latest open network failure.
   * "Open" = not superseded by a later success of the same request.
   */
  failureFor(statusCode, message = '') {
    const open = this.records
    const latest = (predicate) => {
      for (let i = open.length - 1; i >= 0; i--) if (predicate(open[i])) return open[i]
      return null
    }
    const text = String(message ?? '')
    if (statusCode !== undefined) {
      const exact = latest((r) => r.kind === 'http' && r.status === statusCode)
      if (exact) return exact
    }
    if (/Failed after \d+ attempts/.test(text)) {
      const named =
        latest((r) => r.kind === 'http' && r.statusText && text.includes(r.statusText)) ?? latest((r) => r.kind === 'http')
      if (named) return named
    }
    const byText = latest((r) => r.kind === 'http' && r.statusText && text.includes(r.statusText))
    if (statusCode === undefined && byText) return byText
    if (statusCode === 503 || NETWORK_RE.test(text)) {
      const network = latest((r) => r.kind === 'network')
      if (network) return network
    }
    return null
  }
}

/** How the SDK and undici word a request that got no response. */
const NETWORK_RE = /network request failed|fetch failed|cannot connect|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH/i

/** The backend's own message in an error body: JSON `message`, else a string `error`, else the text. */
export function backendMessage(record) {
  if (!record) return undefined
  if (record.kind === 'network') return undefined
  const text = (record.body ?? '').trim()
  if (text) {
    try {
      const json = JSON.parse(text)
      if (json && typeof json === 'object') {
        for (const value of [json.message, json.error?.message, json.error, json.detail]) {
          if (typeof value === 'string' && value.trim()) return value.trim()
        }
      }
    } catch {
      // not JSON: the text itself, if it is not an HTML page
    }
    if (!/^\s*</.test(text)) return text.length > 500 ? `${text.slice(0, 500)}…` : text
  }
  return record.statusText || undefined
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
  return { origin: url.origin, key: `${method} ${url.pathname}` }
}

function isAbort(error, init) {
  return error?.name === 'AbortError' || init?.signal?.aborted === true
}
