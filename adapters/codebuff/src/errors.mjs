// Failure classification: turns SDK failures into the contract's error codes and exit statuses.
//
// Codes (spec §1): auth_failed, out_of_credits (fatal for the session), backend_error, timeout,
// aborted; plus invalid_session / invalid_arguments for bad invocations of this command.

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  timeout: 124,
  sigint: 130,
  sigterm: 143,
}

const AUTH_MESSAGE_RE = /authentication failed|invalid api key|unauthori[sz]ed|api key not found|forbidden/i

/** Maps an HTTP status and/or a message to auth_failed | out_of_credits | backend_error. */
export function classifyFailure({ statusCode, message } = {}) {
  if (statusCode === 401 || statusCode === 403) return 'auth_failed'
  if (statusCode === 402) return 'out_of_credits'
  if (typeof message === 'string') {
    if (AUTH_MESSAGE_RE.test(message)) return 'auth_failed'
    if (/payment required|insufficient credits|out of credits/i.test(message)) return 'out_of_credits'
  }
  return 'backend_error'
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
