// Failure classification: turns a failed run into the contract's final error (docs/agent-command.md
// §2.1): one `error` event with `fatal:true`, a `code`, the HTTP `statusCode` where there is one,
// and the backend's own message.
//
//   auth_failed 401 (or a missing credential) · out_of_credits 402 · account_suspended 403 ·
//   rate_limited 429 · backend_error 5xx or a broken stream · network_error unreachable ·
//   invalid_request 400/404/413 · internal otherwise — all exit 1;
//   invalid_arguments / invalid_session exit 2; timeout 124; aborted 130 / 143.

import { backendMessage } from './http-failures.mjs'

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  timeout: 124,
  sigint: 130,
  sigterm: 143,
}

const AUTH_MESSAGE_RE = /authentication failed|invalid api key|unauthori[sz]ed|api key not found|user not found/i
const CREDITS_MESSAGE_RE = /payment required|insufficient credits|out of credits/i
/** How undici / Node report a response stream that broke after the headers. */
const BROKEN_STREAM_RE = /\bterminated\b|other side closed|socket hang up|ECONNRESET|premature close|aborted by the server|UND_ERR_SOCKET/i
const NETWORK_MESSAGE_RE = /fetch failed|network request failed|cannot connect|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT/i

/** The code of an HTTP status (contract table). */
export function codeForStatus(statusCode) {
  if (statusCode === 401) return 'auth_failed'
  if (statusCode === 402) return 'out_of_credits'
  if (statusCode === 403) return 'account_suspended'
  if (statusCode === 429) return 'rate_limited'
  if (statusCode === 400 || statusCode === 404 || statusCode === 413) return 'invalid_request'
  if (statusCode >= 500 && statusCode <= 599) return 'backend_error'
  return 'internal'
}

/** Classification from a message alone (no status, no recorded HTTP failure). */
export function classifyFailure({ statusCode, message } = {}) {
  if (statusCode !== undefined) return codeForStatus(statusCode)
  if (typeof message === 'string') {
    if (AUTH_MESSAGE_RE.test(message)) return 'auth_failed'
    if (CREDITS_MESSAGE_RE.test(message)) return 'out_of_credits'
    if (BROKEN_STREAM_RE.test(message)) return 'backend_error'
    if (NETWORK_MESSAGE_RE.test(message)) return 'network_error'
  }
  return 'internal'
}

/**
 * The final error of a failed run.
 * @param {object} failure
 * @param {number} [failure.statusCode]  what the SDK reported (may be invented: 503 for "unreachable")
 * @param {string} failure.message        what the SDK reported
 * @param {object} [failure.recorded]     the HttpFailureRecorder record explaining it, if any
 * Returns {code, message, statusCode?}.
 */
export function describeFailure({ statusCode, message, recorded }) {
  const sdkMessage = cleanMessage(stripSdkPrefix(message))
  if (recorded?.kind === 'http') {
    return {
      code: codeForStatus(recorded.status),
      message: backendMessage(recorded) ?? sdkMessage,
      statusCode: recorded.status,
    }
  }
  if (recorded?.kind === 'network') {
    return {
      code: 'network_error',
      message: `Cannot reach the Codebuff backend (${recorded.origin}): ${recorded.message}`,
    }
  }
  if (statusCode !== undefined) {
    return { code: codeForStatus(statusCode), message: sdkMessage, statusCode }
  }
  const code = classifyFailure({ message })
  if (code === 'backend_error' && BROKEN_STREAM_RE.test(message ?? '')) {
    return { code, message: `The Codebuff backend's response stream broke (${sdkMessage})` }
  }
  return { code, message: sdkMessage }
}

/** Drops the SDK's "Agent run error: " and retry wrappers around the real message. */
function stripSdkPrefix(message) {
  let text = typeof message === 'string' ? message : String(message ?? '')
  text = text.replace(/^Agent run error:\s*/, '')
  const retry = /^Failed after \d+ attempts\. Last error:\s*/.exec(text)
  if (retry) text = text.slice(retry[0].length)
  return text
}

/** Status code carried by an error object, the way the SDK reads it (statusCode | status). */
export function statusCodeOf(error) {
  if (!error || typeof error !== 'object') return undefined
  for (const key of ['statusCode', 'status']) {
    const v = error[key]
    if (typeof v === 'number' && v >= 100 && v <= 599) return v
  }
  return undefined
}

/** Keeps error messages to one readable paragraph (the SDK appends stack traces to some). */
export function cleanMessage(message, max = 2000) {
  let text = typeof message === 'string' ? message : String(message ?? '')
  const stackAt = text.search(/\n\s*\n\s*\S*Error[^\n]*\n\s+at /)
  if (stackAt > 0) text = text.slice(0, stackAt)
  text = text.trim()
  if (text.length > max) text = `${text.slice(0, max)}…`
  return text || 'Unknown error'
}
