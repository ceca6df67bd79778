// The page's only way to the daemon: the public /v1 API, with the token (if the daemon has
// one) as a bearer header. The token is asked once, kept in this tab's sessionStorage, and
// never put in a URL.

import { SseParser } from './sse.js'

const TOKEN_KEY = 'codebuffd.token'

/** A /v1 error: the problem document's `detail` as message. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`)
    this.status = status
    this.problem = problem ?? null
    this.kind = String(problem?.type ?? '').replace('urn:sandbox-agent:error:', '')
  }

  static async from(resp) {
    let problem = null
    try {
      problem = await resp.json()
    } catch {}
    return new ApiError(resp.status, problem)
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    })
  })

export class Api {
  /**
   * `root`: the URL of /v1 (`new URL('../v1/', location)` for a page at /ui/); `askToken(why)`:
   * resolves with a token typed by the user.
   */
  constructor(root, askToken) {
    this.root = root
    this.askToken = askToken
    this.asking = null
  }

  get token() {
    return sessionStorage.getItem(TOKEN_KEY)
  }

  forgetToken() {
    sessionStorage.removeItem(TOKEN_KEY)
  }

  url(path) {
    return new URL(path.replace(/^\//, ''), this.root)
  }

  headers(extra = {}) {
    const headers = { ...extra }
    const token = this.token
    if (token) headers.authorization = `Bearer ${token}`
    return headers
  }

  /** Asks for the token (once for all the requests that need it at the same time). */
  async authenticate(problem) {
    if (!this.asking) {
      const why = this.token ? 'The token was not accepted.' : problem?.detail ?? ''
      this.forgetToken()
      this.asking = this.askToken(why).then((token) => {
        sessionStorage.setItem(TOKEN_KEY, token)
        this.asking = null
      })
    }
    await this.asking
  }

  /** A /v1 request; the parsed JSON answer (null for 204). Throws ApiError. */
  async request(method, path, body, { signal } = {}) {
    for (;;) {
      const json = body !== undefined
      const resp = await fetch(this.url(path), {
        method,
        headers: this.headers(json ? { 'content-type': 'application/json' } : {}),
        body: json ? JSON.stringify(body) : undefined,
        cache: 'no-store',
        signal,
      })
      if (resp.status === 401) {
        await this.authenticate(await ApiError.from(resp).then((e) => e.problem))
        continue
      }
      if (!resp.ok) throw await ApiError.from(resp)
      if (resp.status === 204) return null
      const type = resp.headers.get('content-type') ?? ''
      return type.includes('json') ? resp.json() : resp.text()
    }
  }

  get(path, options) {
    return this.request('GET', path, undefined, options)
  }

  post(path, body, options) {
    return this.request('POST', path, body, options)
  }

  delete(path) {
    return this.request('DELETE', path)
  }

  /** The session's path under /v1. */
  static session(id, rest = '') {
    return `sessions/${encodeURIComponent(id)}${rest}`
  }

  /**
   * Follows a session's log over SSE: replay after `after`, then live. A dropped connection is
   * resumed after the last event received (`?offset=`), so `onEvents` sees every event once,
   * in order: what arrives at or before the last sequence is dropped, and a gap (which the
   * daemon never leaves) makes it reconnect from the last event it has.
   *
   * `onEvents(batch)` gets each read's new events; `onState(state, detail)` says `connecting`,
   * `live`, `reconnecting` (with the error) or `gone` (the session was deleted). Stops when
   * `signal` aborts.
   */
  follow(id, after, { onEvents, onState, signal }) {
    let last = after
    const run = async () => {
      let delay = 250
      let first = true
      while (!signal.aborted) {
        try {
          onState(first ? 'connecting' : 'reconnecting')
          first = false
          const resp = await fetch(this.url(Api.session(id, `/events/sse?offset=${last}`)), {
            headers: this.headers({ accept: 'text/event-stream' }),
            cache: 'no-store',
            signal,
          })
          if (resp.status === 401) {
            await this.authenticate((await ApiError.from(resp)).problem)
            continue
          }
          if (resp.status === 404) {
            onState('gone', await ApiError.from(resp))
            return
          }
          if (!resp.ok) throw await ApiError.from(resp)
          onState('live')
          delay = 250
          const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader()
          const parser = new SseParser()
          for (;;) {
            const { value, done } = await reader.read()
            if (done) break
            const batch = []
            let gap = false
            for (const message of parser.push(value)) {
              const event = JSON.parse(message.data)
              if (event.sequence <= last) continue
              if (event.sequence !== last + 1) {
                gap = true
                break
              }
              last = event.sequence
              batch.push(event)
            }
            if (batch.length > 0) onEvents(batch)
            if (gap) {
              await reader.cancel()
              break
            }
          }
          if (!signal.aborted) onState('reconnecting', new Error('the stream closed'))
        } catch (error) {
          if (signal.aborted) return
          onState('reconnecting', error)
        }
        await sleep(delay, signal)
        delay = Math.min(delay * 2, 4000)
      }
    }
    run()
  }
}
