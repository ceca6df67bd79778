// A session's log as the page shows it: universal events (docs/universal-events.md) folded
// into blocks — turns holding the user's prompt, the agent's text and reasoning, tool calls with
// their results, subagents with what they did, questions, permission requests, errors. Pure
// (no DOM): `apply` takes events in sequence order and records which blocks were added and
// which changed, for the view to draw.

export class Timeline {
  constructor() {
    /** The last sequence applied. */
    this.last = 0
    /** Top-level blocks, in order. */
    this.blocks = []
    this.items = new Map()
    this.calls = new Map()
    this.questions = new Map()
    this.permissions = new Map()
    /** The turn still running, if any. */
    this.turn = null
    this.turns = 0
    /** `session.ended`'s data once the session ended. */
    this.ended = null
    this.started = null
    /** `[block, parent or null]` added since `take()`. */
    this.added = []
    /** Blocks changed since `take()`. */
    this.changed = new Set()
  }

  /** Applies one event; false (and nothing changes) for one at or before `last`. */
  apply(e) {
    if (e.sequence <= this.last) return false
    this.last = e.sequence
    const d = e.data ?? {}
    switch (e.type) {
      case 'session.started':
        this.started = d.metadata ?? {}
        break
      case 'session.ended':
        this.ended = d
        this.add({ type: 'ended', seq: e.sequence, time: e.time, data: d }, null)
        break
      case 'turn.started': {
        this.turns++
        const turn = {
          type: 'turn',
          seq: e.sequence,
          id: d.turn_id ?? null,
          number: this.turns,
          startedAt: e.time,
          endedAt: null,
          status: 'running',
          metadata: null,
          children: [],
        }
        this.turn = turn
        this.add(turn, null)
        break
      }
      case 'turn.ended': {
        const turn = this.turn ?? this.blocks.findLast((b) => b.type === 'turn')
        if (turn) {
          turn.endedAt = e.time
          turn.metadata = d.metadata ?? null
          turn.status = d.metadata?.status ?? 'completed'
          this.changed.add(turn)
        }
        this.turn = null
        break
      }
      case 'item.started':
      case 'item.completed':
        this.item(d.item, e)
        break
      case 'item.delta': {
        const block = this.items.get(d.item_id)
        if (block) {
          block.stream += d.delta ?? ''
          block.deltas++
          this.changed.add(block)
        }
        break
      }
      case 'question.requested':
      case 'question.resolved': {
        const known = this.questions.get(d.question_id)
        if (known) {
          known.data = d
          this.changed.add(known)
        } else {
          const block = { type: 'question', seq: e.sequence, id: d.question_id, data: d }
          this.questions.set(d.question_id, block)
          this.add(block, this.turn)
        }
        break
      }
      case 'permission.requested':
      case 'permission.resolved': {
        const known = this.permissions.get(d.permission_id)
        if (known) {
          known.data = d
          this.changed.add(known)
        } else {
          const block = { type: 'permission', seq: e.sequence, id: d.permission_id, data: d }
          this.permissions.set(d.permission_id, block)
          this.add(block, this.parentOfCall(d.metadata?.toolCallId))
        }
        break
      }
      case 'error':
        this.add({ type: 'error', seq: e.sequence, data: d }, this.turn)
        break
      case 'agent.unparsed':
        this.add({ type: 'unparsed', seq: e.sequence, data: d }, this.turn)
        break
      default:
        this.add({ type: 'unknown', seq: e.sequence, event: e.type, data: d }, this.turn)
    }
    return true
  }

  /** An item started or completed: a new block, an update, or a tool call's result. */
  item(item, e) {
    if (!item) return
    const known = this.items.get(item.item_id)
    if (known) {
      known.item = item
      if (e.type === 'item.completed') known.done = true
      this.changed.add(known)
      if (known.type === 'result' && known.call) this.changed.add(known.call)
      return
    }
    const result = item.content?.find((p) => p.type === 'tool_result')
    const call = item.kind === 'tool_result' && result ? this.calls.get(result.call_id) : null
    const block = {
      type: blockType(item),
      seq: e.sequence,
      item,
      stream: '',
      deltas: 0,
      done: e.type === 'item.completed',
      children: [],
      result: null,
      call: null,
    }
    this.items.set(item.item_id, block)
    if (call) {
      // A result joins its call's block (the call is drawn with its output).
      block.type = 'result'
      block.call = call
      call.result = block
      this.changed.add(call)
      return
    }
    if (block.type === 'tool') {
      const c = item.content?.find((p) => p.type === 'tool_call')
      if (c?.call_id) this.calls.set(c.call_id, block)
    }
    const parent = item.parent_id ? this.items.get(item.parent_id) : null
    this.add(block, parent ?? this.turn)
  }

  /** The block a permission request belongs under: its tool call's parent, or the turn. */
  parentOfCall(callId) {
    const call = callId ? this.calls.get(callId) : null
    if (call?.item.parent_id) return this.items.get(call.item.parent_id) ?? this.turn
    return this.turn
  }

  add(block, parent) {
    if (parent) parent.children.push(block)
    else this.blocks.push(block)
    this.added.push([block, parent ?? null])
  }

  /** What was added and changed since the last call, and forgets it. */
  take() {
    const out = { added: this.added, changed: this.changed }
    this.added = []
    this.changed = new Set()
    return out
  }

  /** Questions and permission requests still waiting for an answer. */
  pending() {
    return [
      ...[...this.questions.values()].filter((b) => b.data.status === 'requested'),
      ...[...this.permissions.values()].filter((b) => b.data.status === 'requested'),
    ]
  }
}

/** Which block draws an item. */
export function blockType(item) {
  const first = item.content?.[0]
  switch (item.kind) {
    case 'message':
      if (item.role === 'user') return 'user'
      if (item.content?.some((p) => p.type === 'reasoning') && !item.content.some((p) => p.type === 'text')) {
        return 'reasoning'
      }
      return 'text'
    case 'tool_call':
      return 'tool'
    case 'tool_result':
      return 'tool'
    case 'status':
      return first?.type === 'status' && first.label === 'subagent' ? 'subagent' : 'status'
    default:
      return 'other'
  }
}

/** The text a message block shows: its final content once complete, else what streamed. */
export function textOf(block, partType = 'text') {
  const parts = (block.item.content ?? []).filter((p) => p.type === partType)
  const final = parts.map((p) => p.text ?? '').join('')
  if (block.done || block.stream === '') return final || block.stream
  return block.stream
}

/** A tool call's name, arguments (parsed when JSON) and call id. */
export function toolCall(block) {
  const part = block.item.content?.find((p) => p.type === 'tool_call')
  if (!part) return null
  let args = part.arguments
  try {
    args = JSON.parse(part.arguments)
  } catch {}
  return { name: part.name, args, raw: part.arguments, callId: part.call_id }
}

/** The output of a tool result (the Codebuff `[{type:'json', value}]` unwrapped). */
export function toolOutput(resultBlock) {
  const part = resultBlock?.item.content?.find((p) => p.type === 'tool_result')
  if (!part) return null
  let value = part.output
  try {
    value = JSON.parse(part.output)
  } catch {
    return { text: String(part.output ?? '') }
  }
  if (Array.isArray(value) && value.length === 1 && value[0]?.type === 'json') value = value[0].value
  return { value }
}

/** Files a call or its result names, with the diffs they report (the result's win). */
export function fileRefs(block) {
  const refs = new Map()
  for (const source of [block.item, block.result?.item]) {
    for (const p of source?.content ?? []) {
      if (p.type !== 'file_ref') continue
      const known = refs.get(p.path)
      refs.set(p.path, { path: p.path, action: p.action, diff: p.diff ?? known?.diff ?? null })
    }
  }
  return [...refs.values()]
}

/** A one-line summary of an event, for the raw event list. */
export function summary(e) {
  const d = e.data ?? {}
  const clip = (s, n = 120) => {
    const t = String(s ?? '').replace(/\s+/g, ' ')
    return t.length > n ? `${t.slice(0, n)}…` : t
  }
  switch (e.type) {
    case 'item.delta':
      return `${d.item_id} ${clip(d.delta)}`
    case 'item.started':
    case 'item.completed': {
      const it = d.item ?? {}
      const p = it.content?.[0] ?? {}
      const what = p.text ?? p.name ?? p.label ?? p.path ?? p.call_id ?? ''
      return `${it.item_id} ${it.kind}${it.role ? `/${it.role}` : ''} ${it.status ?? ''} ${clip(what, 80)}`
    }
    case 'turn.started':
      return d.turn_id ?? ''
    case 'turn.ended':
      return `${d.turn_id ?? ''} ${d.metadata?.status ?? ''}`
    case 'question.requested':
    case 'question.resolved':
      return `${d.question_id} ${d.status} ${clip(d.prompt, 80)}`
    case 'permission.requested':
    case 'permission.resolved':
      return `${d.permission_id} ${d.status} ${clip(d.metadata?.title ?? d.action, 80)}`
    case 'error':
      return `${d.code ?? ''} ${clip(d.message)}`
    case 'session.ended':
      return `${d.reason ?? ''}`
    case 'agent.unparsed':
      return clip(d.error)
    default:
      return ''
  }
}
