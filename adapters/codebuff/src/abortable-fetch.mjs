// Ties the SDK's in-flight HTTP requests to the run's abort, so SIGINT/SIGTERM/--timeout stop a
// run promptly.
//
// @codebuff/sdk 0.10.7 hands the run's AbortSignal to streamText as `signal`, not `abortSignal`,
// so the model stream itself is never aborted: the SDK only notices the abort when the next chunk
// arrives, and a stalled stream would keep the run alive indefinitely. This wrapper of
// globalThis.fetch remembers the requests in flight; abortInflight() aborts exactly those
// (requests made afterwards — e.g. the SDK reporting the run as cancelled — proceed normally).
// The aborted stream surfaces as an AbortError, which the SDK handles as a user cancellation
// and returns a RunState that can be saved.

export function createAbortableFetch(innerFetch) {
  let inflight = new Set()

  async function abortableFetch(input, init) {
    const controller = new AbortController()
    const signals = [controller.signal]
    if (init?.signal) signals.push(init.signal)
    else if (input && typeof input === 'object' && input.signal instanceof AbortSignal) signals.push(input.signal)
    const signal = signals.length > 1 ? AbortSignal.any(signals) : controller.signal
    // Kept until the next abortInflight(): the response body may still be streaming after
    // fetch() resolves. A run makes at most a few hundred requests.
    inflight.add(controller)
    return innerFetch(input, { ...init, signal })
  }

  function abortInflight() {
    const current = inflight
    inflight = new Set()
    for (const controller of current) controller.abort()
    return current.size
  }

  return { fetch: abortableFetch, abortInflight }
}

/** Wraps globalThis.fetch; returns abortInflight(). */
export function installAbortableFetch() {
  const { fetch, abortInflight } = createAbortableFetch(globalThis.fetch)
  globalThis.fetch = fetch
  return abortInflight
}
