// stdin: one JSON object per line. With --stdin-turn the first line is the turn; after it (and
// always in the argv form) lines carry answers, routed by type:
//   ask_user_answer, ask_user_skip  → the ask_user relay (ask-user.mjs)
//   permission_reply                → the permission relay (permissions.mjs)
// Malformed lines and unknown types are ignored with a note on stderr. EOF is reported once.

const MAX_LINE_BYTES = 1024 * 1024

/** Splits a readable stream into lines (bounded length) and reports EOF. */
export class LineReader {
  constructor(stream, { onLine, onEnd, log = () => {} }) {
    this.stream = stream
    this.buffer = ''
    this.discarding = false
    this.ended = false
    this.onData = (chunk) => this.#push(chunk)
    this.onEndEvent = () => this.#end()
    stream.setEncoding?.('utf8')
    stream.on('data', this.onData)
    stream.on('end', this.onEndEvent)
    stream.on('error', this.onEndEvent)
    stream.on('close', this.onEndEvent)
    this.onLine = onLine
    this.onEnd = onEnd
    this.log = log
  }

  #push(chunk) {
    this.buffer += chunk
    let nl
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl).replace(/\r$/, '')
      this.buffer = this.buffer.slice(nl + 1)
      if (this.discarding) {
        this.discarding = false
        continue
      }
      if (line.trim() !== '') this.onLine(line)
    }
    if (this.buffer.length > MAX_LINE_BYTES) {
      this.log(`stdin line longer than ${MAX_LINE_BYTES} bytes ignored`)
      this.buffer = ''
      this.discarding = true
    }
  }

  #end() {
    if (this.ended) return
    this.ended = true
    if (this.buffer.trim() !== '' && !this.discarding) this.onLine(this.buffer.replace(/\r$/, ''))
    this.buffer = ''
    this.onEnd()
  }

  /** Stops reading and releases stdin so it cannot keep the process alive. */
  close() {
    this.stream.off('data', this.onData)
    this.stream.pause?.()
    this.stream.unref?.()
    this.stream.destroy?.()
  }
}

/**
 * Routes stdin lines. `expectTurn`: the first line is handed to onTurn(line) instead.
 * Relays are attached later (attach()); answer lines that arrive before are kept until then.
 */
export class StdinRouter {
  constructor({ stream = process.stdin, expectTurn = false, onTurn, onEndBeforeTurn, log = () => {} }) {
    this.log = log
    this.expectTurn = expectTurn
    this.onTurn = onTurn
    this.onEndBeforeTurn = onEndBeforeTurn
    this.askUser = null
    this.permissions = null
    this.queued = []
    this.eof = false
    this.reader = new LineReader(stream, {
      onLine: (line) => this.#line(line),
      onEnd: () => this.#end(),
      log,
    })
  }

  /** Connects the relays; queued answer lines and a past EOF are delivered now. */
  attach({ askUser, permissions }) {
    this.askUser = askUser ?? null
    this.permissions = permissions ?? null
    const queued = this.queued
    this.queued = []
    for (const msg of queued) this.#route(msg)
    if (this.eof) this.#endRelays()
  }

  close() {
    this.reader.close()
  }

  #line(line) {
    if (this.expectTurn) {
      this.expectTurn = false
      this.onTurn?.(line)
      return
    }
    let msg
    try {
      msg = JSON.parse(line)
    } catch {
      this.log(`ignored stdin line that is not JSON: ${line.slice(0, 200)}`)
      return
    }
    if (!msg || typeof msg !== 'object' || Array.isArray(msg)) {
      this.log('ignored stdin line that is not a JSON object')
      return
    }
    if (!this.askUser && !this.permissions) {
      this.queued.push(msg)
      return
    }
    this.#route(msg)
  }

  #route(msg) {
    if (msg.type === 'ask_user_answer' || msg.type === 'ask_user_skip') {
      if (this.askUser) this.askUser.acceptMessage(msg)
      else this.log(`ignored ${msg.type}: no ask_user relay`)
    } else if (msg.type === 'permission_reply') {
      if (this.permissions) this.permissions.acceptMessage(msg)
      else this.log('ignored permission_reply: permissionMode is not "ask"')
    } else {
      this.log(`ignored stdin line of type ${JSON.stringify(msg.type)}`)
    }
  }

  #end() {
    this.eof = true
    if (this.expectTurn) {
      this.expectTurn = false
      this.onEndBeforeTurn?.()
      return
    }
    if (this.askUser || this.permissions) this.#endRelays()
  }

  #endRelays() {
    this.askUser?.endOfInput()
    this.permissions?.endOfInput()
  }
}
