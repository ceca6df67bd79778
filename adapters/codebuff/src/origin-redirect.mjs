// TEST ONLY: sends the SDK's Codebuff backend traffic to a local fake backend.
//
// Active only when CODEBUFFD_TEST_BACKEND_URL is set (e.g. http://127.0.0.1:PORT); never set it in
// production. @codebuff/sdk 0.10.7 has a fixed backend origin (https://www.codebuff.com, baked in
// at build time) and makes every HTTP request through globalThis.fetch (its own calls, the AI SDK
// provider, PostHog analytics); it opens no websockets (the `ws` dependency is unused). So wrapping
// globalThis.fetch is enough: requests for the Codebuff origin are rewritten to the test URL, and
// every other host (PostHog, api.anthropic.com, …) is refused with an error, so a test never
// reaches the network.

/** Origins of the real Codebuff backend that get redirected. */
export const CODEBUFF_ORIGINS = ['https://www.codebuff.com', 'https://codebuff.com']

export const TEST_BACKEND_ENV = 'CODEBUFFD_TEST_BACKEND_URL'

function urlOf(input) {
  if (typeof input === 'string') return new URL(input)
  if (input instanceof URL) return new URL(input.href)
  if (input && typeof input.url === 'string') return new URL(input.url)
  return new URL(String(input))
}

/**
 * Wraps fetch so Codebuff-origin requests go to `target` and all others fail.
 * Returns the wrapped function (does not install it).
 */
export function createRedirectingFetch(target, realFetch = globalThis.fetch, log = () => {}) {
  const targetUrl = new URL(target)
  if (targetUrl.protocol !== 'http:' && targetUrl.protocol !== 'https:') {
    throw new Error(`${TEST_BACKEND_ENV} must be an http(s) URL, got ${target}`)
  }
  const basePath = targetUrl.pathname.replace(/\/+$/, '')
  return async function redirectingFetch(input, init) {
    let url
    try {
      url = urlOf(input)
    } catch {
      throw new TypeError(`codebuffd test redirect: unparseable fetch target ${String(input)}`)
    }
    if (!CODEBUFF_ORIGINS.includes(url.origin)) {
      log(`refused request to ${url.origin} (test backend redirect active)`)
      throw new TypeError(
        `codebuffd test mode: refused request to ${url.origin}; only the Codebuff origin is served (by ${targetUrl.origin})`,
      )
    }
    const rewritten = new URL(targetUrl.origin)
    rewritten.pathname = `${basePath}${url.pathname}`
    rewritten.search = url.search
    if (typeof input === 'string' || input instanceof URL) return realFetch(rewritten, init)
    // A Request object: rebuild it against the new URL, keeping method, headers, body, signal.
    return realFetch(new Request(rewritten, input), init)
  }
}

/** Installs the redirect when CODEBUFFD_TEST_BACKEND_URL is set. Returns true when active. */
export function installOriginRedirect(env = process.env, log = () => {}) {
  const target = env[TEST_BACKEND_ENV]
  if (!target) return false
  globalThis.fetch = createRedirectingFetch(target, globalThis.fetch, log)
  log(`TEST MODE: Codebuff backend redirected to ${new URL(target).origin}; other hosts refused`)
  return true
}
