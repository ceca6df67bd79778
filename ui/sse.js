// A Server-Sent Events parser for a body read with `fetch` (EventSource cannot send the
// token as a header). Only whole events come out: an event cut by a dropped connection is
// never half-delivered, so the reader can resume after the last event it got.

export class SseParser {
  constructor() {
    this.buffer = ''
    this.data = []
    this.id = null
  }

  /** Feeds decoded text; returns the events completed by it, as `{id, data}`. */
  push(text) {
    this.buffer += text
    const events = []
    let start = 0
    for (;;) {
      const nl = this.buffer.indexOf('\n', start)
      if (nl < 0) break
      let line = this.buffer.slice(start, nl)
      start = nl + 1
      if (line.endsWith('\r')) line = line.slice(0, -1)
      if (line === '') {
        if (this.data.length > 0) events.push({ id: this.id, data: this.data.join('\n') })
        this.data = []
        continue
      }
      if (line.startsWith(':')) continue
      const colon = line.indexOf(':')
      const field = colon < 0 ? line : line.slice(0, colon)
      let value = colon < 0 ? '' : line.slice(colon + 1)
      if (value.startsWith(' ')) value = value.slice(1)
      if (field === 'data') this.data.push(value)
      else if (field === 'id' && !value.includes('\0')) this.id = value
    }
    this.buffer = this.buffer.slice(start)
    return events
  }
}
