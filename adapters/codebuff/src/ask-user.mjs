// The ask_user relay: answers the SDK's ask_user tool from lines the daemon writes on stdin (spec §4).
//
// The SDK calls overrideTools.ask_user(input) with only the tool input, after it has emitted the
// call's `tool_call` event. So the adapter announces every printed ask_user tool_call here
// (toolCallId + questions) and the override claims the matching announcement, then blocks until
// one stdin line for that toolCallId arrives:
//   {"type":"ask_user_answer","toolCallId":"…","answers":[{"questionIndex":0,"selectedOption":"vitest"}]}
//   {"type":"ask_user_skip","toolCallId":"…"}
// Lines for other toolCallIds are kept for later calls. No line within the question timeout,
// stdin EOF, or the run being aborted → {skipped:true}.

const MAX_BUFFERED_ANSWERS = 64

/** Identifies a call by its question texts (the override sees the parsed input, not the raw one). */
function questionsKey(input) {
  const questions = Array.isArray(input?.questions) ? input.questions : []
  return JSON.stringify(questions.map((q) => (q && typeof q === 'object' ? q.question ?? null : null)))
}

const skipped = () => [{ type: 'json', value: { skipped: true } }]

export class AskUserRelay {
  /**
   * @param {object} opts
   * @param {number} opts.timeoutMs  question timeout
   * @param {AbortSignal} [opts.signal] the run's abort signal: pending questions are skipped
   * @param {(msg: string) => void} [opts.log]
   */
  constructor({ timeoutMs, signal, log = () => {} }) {
    this.timeoutMs = timeoutMs
    this.log = log
    this.announced = [] // {toolCallId, key, claimed}
    this.buffered = new Map() // toolCallId -> answer line (object)
    this.waiters = new Map() // toolCallId -> resolve(line | null)
    this.eof = false
    this.handler = (input) => this.#answer(input)
    if (signal) {
      const onAbort = () => this.#releaseAll('run aborted')
      if (signal.aborted) onAbort()
      else signal.addEventListener('abort', onAbort, { once: true })
    }
  }

  /** Records an ask_user tool_call the adapter has just printed. */
  announce(toolCallId, input) {
    this.announced.push({ toolCallId, key: questionsKey(input), claimed: false })
  }

  /** Feeds one stdin line (a JSON object). */
  acceptLine(line) {
    let msg
    try {
      msg = JSON.parse(line)
    } catch {
      this.log(`ignored stdin line that is not JSON: ${line.slice(0, 200)}`)
      return
    }
    this.acceptMessage(msg)
  }

  /** Feeds one parsed stdin message of type ask_user_answer / ask_user_skip. */
  acceptMessage(msg) {
    if (!msg || typeof msg !== 'object' || typeof msg.toolCallId !== 'string') {
      this.log('ignored stdin line without a toolCallId')
      return
    }
    if (msg.type === 'ask_user_answer') {
      if (!Array.isArray(msg.answers)) {
        this.log(`ignored ask_user_answer for ${msg.toolCallId}: "answers" is not an array`)
        return
      }
    } else if (msg.type !== 'ask_user_skip') {
      this.log(`ignored stdin line of type ${JSON.stringify(msg.type)}`)
      return
    }
    const waiter = this.waiters.get(msg.toolCallId)
    if (waiter) {
      this.waiters.delete(msg.toolCallId)
      waiter(msg)
      return
    }
    if (this.buffered.size >= MAX_BUFFERED_ANSWERS) {
      const oldest = this.buffered.keys().next().value
      this.buffered.delete(oldest)
      this.log(`dropped unclaimed answer for ${oldest}`)
    }
    this.log(`kept answer for ${msg.toolCallId} (no question waiting for it yet)`)
    this.buffered.set(msg.toolCallId, msg)
  }

  /** stdin reached EOF: pending and future questions are skipped. */
  endOfInput() {
    this.eof = true
    this.#releaseAll('stdin closed')
  }

  #releaseAll(why) {
    if (this.waiters.size > 0) this.log(`skipping ${this.waiters.size} pending question(s): ${why}`)
    for (const [id, resolve] of this.waiters) {
      this.waiters.delete(id)
      resolve(null)
    }
    this.released = why
  }

  #claim(input) {
    const key = questionsKey(input)
    const match =
      this.announced.find((a) => !a.claimed && a.key === key) ?? this.announced.find((a) => !a.claimed)
    if (match) match.claimed = true
    return match?.toolCallId
  }

  async #answer(input) {
    const toolCallId = this.#claim(input)
    if (!toolCallId) {
      this.log('ask_user called without a matching tool_call; skipping')
      return skipped()
    }
    let line = this.buffered.get(toolCallId)
    if (line) {
      this.buffered.delete(toolCallId)
    } else if (this.eof || this.released) {
      line = null
    } else {
      line = await new Promise((resolve) => {
        const timer = setTimeout(() => {
          if (this.waiters.get(toolCallId) === done) this.waiters.delete(toolCallId)
          this.log(`question ${toolCallId} timed out after ${this.timeoutMs / 1000}s; skipping`)
          resolve(null)
        }, this.timeoutMs)
        const done = (value) => {
          clearTimeout(timer)
          resolve(value)
        }
        this.waiters.set(toolCallId, done)
      })
    }
    if (!line || line.type === 'ask_user_skip') return skipped()
    return [{ type: 'json', value: { answers: line.answers } }]
  }
}

/** Question timeout from CODEBUFF_QUESTION_TIMEOUT_SECONDS (default 600 s). */
export function questionTimeoutMs(env = process.env) {
  const raw = env.CODEBUFF_QUESTION_TIMEOUT_SECONDS
  const seconds = raw === undefined || raw === '' ? 600 : Number(raw)
  if (!Number.isFinite(seconds) || seconds <= 0) return 600_000
  return Math.round(seconds * 1000)
}
