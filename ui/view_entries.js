// Drawing the timeline's blocks (timeline.js): each block gets an element once (`create`) and is
// drawn again when it changes (`draw`); nested blocks go into its `kids` container, which
// redrawing leaves alone. Questions and permission requests are drawn by view_prompts.js.

import { h, replace } from './dom.js'
import { parse, render } from './markdown.js'
import { diffView, lineDiff, parseUnified } from './diff.js'
import { clock, cost, duration } from './format.js'
import { fileRefs, textOf, toolCall, toolOutput } from './timeline.js'
import { drawPermission, drawQuestion } from './view_prompts.js'

/** Characters of text drawn as Markdown; longer text is shown plain, cut, with a button. */
const MARKDOWN_LIMIT = 200_000
/** Characters of a tool's input or output shown before "show all". */
const OUTPUT_LIMIT = 20_000

/** The element of a new block (drawn). */
export function create(block, ctx) {
  block.body = h('div', { class: 'blk-body' })
  block.kids = h('div', { class: 'blk-kids' })
  // A turn's ending (how it failed) goes after what happened in it.
  block.foot = block.type === 'turn' ? h('div', { class: 'blk-foot' }) : null
  block.el = h(
    block.type === 'turn' ? 'section' : 'div',
    { class: `blk blk-${block.type}`, dataset: { seq: block.seq } },
    block.body,
    block.kids,
    block.foot,
  )
  draw(block, ctx)
  return block.el
}

/** Draws a block's own content again. */
export function draw(block, ctx) {
  if (block.type === 'turn') {
    replace(block.body, drawTurn(block))
    replace(block.foot, turnEnding(block))
  } else {
    replace(block.body, DRAW[block.type]?.(block, ctx) ?? drawOther(block))
  }
  block.el.classList.toggle('is-running', isRunning(block))
}

function isRunning(block) {
  if (block.type === 'turn') return block.status === 'running'
  if (block.item) return !block.done
  return false
}

const DRAW = {
  user: drawUser,
  text: drawText,
  reasoning: drawReasoning,
  tool: drawTool,
  subagent: drawSubagent,
  status: drawStatus,
  question: drawQuestion,
  permission: drawPermission,
  error: drawError,
  unparsed: drawUnparsed,
  ended: drawEnded,
}

function drawTurn(turn) {
  const m = turn.metadata ?? {}
  const took = turn.endedAt ? Date.parse(turn.endedAt) - Date.parse(turn.startedAt) : null
  return h(
    'header',
    { class: 'turn-head' },
    h('h2', { class: 'turn-title' }, `Turn ${turn.number}`),
    h('span', { class: `badge st-${turn.status}`, dataset: { status: turn.status } }, turn.status.replace('_', ' ')),
    h('time', { class: 'muted', datetime: turn.startedAt, title: turn.startedAt }, clock(turn.startedAt)),
    took != null ? h('span', { class: 'muted turn-duration' }, duration(took)) : null,
    m.cost ? h('span', { class: 'muted turn-cost', title: m.cost_reported === false ? 'the agent reported no cost' : null }, cost(m.cost)) : null,
  )
}

/** Why a turn did not complete: its message, code, exit, and the agent's last stderr lines. */
function turnEnding(turn) {
  const m = turn.metadata ?? {}
  if (['running', 'completed'].includes(turn.status)) return null
  const details = []
  if (m.message) details.push(h('p', { class: 'turn-message plain' }, m.message))
  if (m.code) details.push(h('p', { class: 'muted' }, `code: ${m.code}`))
  if (m.exit_code != null) details.push(h('p', { class: 'muted' }, `exit code ${m.exit_code}`))
  if (m.signal) details.push(h('p', { class: 'muted' }, `signal ${m.signal}`))
  if (m.stderr_tail) {
    details.push(h('details', null, h('summary', null, 'Agent stderr (last lines)'), h('pre', { class: 'out err' }, m.stderr_tail)))
  }
  return details.length > 0 ? h('div', { class: 'turn-failure', role: 'note' }, details) : null
}

function drawUser(block) {
  return h('div', { class: 'msg msg-user' }, h('div', { class: 'who' }, 'Prompt'), h('div', { class: 'plain' }, textOf(block)))
}

function drawText(block) {
  const text = textOf(block)
  const nested = !!block.item.parent_id
  return h(
    'div',
    { class: `msg msg-agent${nested ? ' nested' : ''}` },
    h('div', { class: 'who' }, block.item.role === 'system' ? 'System' : 'Agent', block.done ? null : h('span', { class: 'dots', 'aria-label': 'streaming' })),
    markdown(text),
    images(block.item),
  )
}

function images(item) {
  const parts = (item.content ?? []).filter((p) => p.type === 'image')
  return parts.map((p) => h('p', { class: 'muted' }, `[image ${p.path} ${p.mime ?? ''}]`))
}

/** Markdown, or plain text past the limit. */
export function markdown(text) {
  if (text.length > MARKDOWN_LIMIT) {
    const box = h('div', { class: 'md plain-long' })
    const shown = h('div', { class: 'plain' }, text.slice(0, MARKDOWN_LIMIT))
    box.append(
      shown,
      h(
        'button',
        {
          type: 'button',
          class: 'link',
          onclick: (e) => {
            shown.textContent = text
            e.currentTarget.remove()
          },
        },
        `Show all ${text.length.toLocaleString()} characters`,
      ),
    )
    return box
  }
  return h('div', { class: 'md' }, render(parse(text), h))
}

function drawReasoning(block) {
  const text = textOf(block, 'reasoning')
  const open = block.ui?.open ?? false
  const details = h(
    'details',
    { class: 'reasoning', open },
    h('summary', null, block.done ? 'Reasoning' : 'Reasoning…', h('span', { class: 'muted' }, ` ${text.length.toLocaleString()} characters`)),
    h('div', { class: 'plain muted' }, text),
  )
  details.addEventListener('toggle', () => {
    block.ui = { ...block.ui, open: details.open }
  })
  return details
}

/** What a tool call is about, in a few words: its path, command, or first argument. */
function subject(name, args) {
  if (!args || typeof args !== 'object') return typeof args === 'string' ? args.slice(0, 120) : ''
  if (args.command) return args.command
  if (args.path) return args.path
  if (Array.isArray(args.paths)) return args.paths.map((p) => (typeof p === 'string' ? p : p?.path)).join(', ')
  if (args.operation?.path) return args.operation.path
  if (Array.isArray(args.agents)) return args.agents.map((a) => a.agent_type ?? a.agentType).join(', ')
  if (Array.isArray(args.questions)) return args.questions.map((q) => q.question).join(' / ')
  const first = Object.values(args).find((v) => typeof v === 'string')
  return first ? first.slice(0, 120) : ''
}

function drawTool(block) {
  const call = toolCall(block)
  if (!call) return drawOther(block)
  const result = block.result
  const failed = block.item.status === 'failed' || result?.item.status === 'failed'
  const state = failed ? 'failed' : result ? (result.done ? 'done' : 'running') : block.done ? 'waiting' : 'running'
  const parts = [
    h(
      'div',
      { class: 'tool-head' },
      h('span', { class: 'tool-name' }, call.name),
      h('code', { class: 'tool-subject' }, subject(call.name, call.args)),
      h('span', { class: `badge tool-${state}` }, state),
    ),
  ]
  parts.push(...diffs(block, call))
  parts.push(remembered(block, 'input', 'Input', () => pre(pretty(call.args))))
  if (result) parts.push(remembered(block, 'output', 'Output', () => outputView(toolOutput(result)), failed))
  return h('div', { class: `tool${failed ? ' is-failed' : ''}` }, parts)
}

/** A `<details>` whose open state survives redrawing; its body is built when opened. */
function remembered(block, key, label, build, openByDefault = false) {
  block.ui ??= {}
  const open = block.ui[key] ?? openByDefault
  const details = h('details', { class: 'tool-part', open }, h('summary', null, label))
  if (open) details.append(build())
  details.addEventListener('toggle', () => {
    block.ui[key] = details.open
    if (details.open && details.children.length === 1) details.append(build())
  })
  return details
}

/** The diffs of a file-changing call: reported by its result, else derived from its input. */
function diffs(block, call) {
  const out = []
  const refs = fileRefs(block)
  for (const ref of refs) {
    if (ref.action === 'read') continue
    if (ref.diff) out.push(diffView(h, ref.path, parseUnified(ref.diff), { action: ref.action }))
  }
  if (out.length > 0) return out
  const rows = proposedRows(call.name, call.args)
  if (rows) out.push(diffView(h, call.args?.path ?? call.args?.operation?.path, rows, { action: 'proposed' }))
  const reads = refs.filter((r) => r.action === 'read').map((r) => r.path)
  if (reads.length > 0 && call.name !== 'read_files') out.push(h('p', { class: 'muted' }, `reads ${reads.join(', ')}`))
  return out
}

/** Diff rows an edit's input implies (before its result says what really changed). */
export function proposedRows(name, args) {
  if (!args || typeof args !== 'object') return null
  if (name === 'write_file' && typeof args.content === 'string') return lineDiff('', args.content)
  if (name === 'str_replace' && Array.isArray(args.replacements)) {
    const rows = []
    for (const r of args.replacements) {
      if (rows.length > 0) rows.push({ kind: 'hunk', text: '⋯', old: null, new: null })
      rows.push(...lineDiff(r.old ?? '', r.new ?? ''))
    }
    return rows
  }
  const patch = args.operation?.diff ?? args.diff ?? args.patch
  if (name === 'apply_patch' && typeof patch === 'string') return parseUnified(patch)
  return null
}

function pretty(value) {
  if (typeof value === 'string') return value
  try {
    return JSON.stringify(value, null, 2)
  } catch {
    return String(value)
  }
}

/** A `<pre>` of text, cut at the limit with a button for the rest. */
export function pre(text, cls = 'out') {
  text = String(text ?? '')
  const el = h('pre', { class: cls }, text.length > OUTPUT_LIMIT ? text.slice(0, OUTPUT_LIMIT) : text)
  if (text.length <= OUTPUT_LIMIT) return el
  return h(
    'div',
    null,
    el,
    h(
      'button',
      {
        type: 'button',
        class: 'link',
        onclick: (e) => {
          el.textContent = text
          e.currentTarget.remove()
        },
      },
      `Show all ${text.length.toLocaleString()} characters`,
    ),
  )
}

function outputView(out) {
  if (!out) return h('p', { class: 'muted' }, 'no output')
  if (out.text !== undefined) return pre(out.text)
  const v = out.value
  if (v && typeof v === 'object' && !Array.isArray(v) && ('stdout' in v || 'stderr' in v)) {
    return h(
      'div',
      { class: 'term' },
      v.command ? pre(`$ ${v.command}`, 'out cmd') : null,
      v.stdout ? pre(v.stdout) : null,
      v.stderr ? pre(v.stderr, 'out err') : null,
      v.exitCode != null ? h('p', { class: v.exitCode === 0 ? 'muted' : 'err' }, `exit code ${v.exitCode}`) : null,
    )
  }
  if (v && typeof v === 'object' && v.errorMessage) return h('p', { class: 'err' }, v.errorMessage)
  return pre(pretty(v))
}

function drawSubagent(block) {
  const status = block.item.content?.find((p) => p.type === 'status')
  const info = block.item.content?.find((p) => p.type === 'json')?.json ?? {}
  return h(
    'div',
    { class: 'subagent-head' },
    h('span', { class: 'tag' }, 'subagent'),
    h('strong', null, status?.detail ?? info.displayName ?? 'subagent'),
    info.agentType ? h('span', { class: 'muted' }, info.agentType) : null,
    h('span', { class: `badge ${block.done ? 'tool-done' : 'tool-running'}` }, block.done ? 'done' : 'running'),
    info.prompt ? h('p', { class: 'plain muted sub-prompt' }, info.prompt) : null,
  )
}

function drawStatus(block) {
  const parts = (block.item.content ?? []).map((p) =>
    p.type === 'status' ? `${p.label}${p.detail ? ` ${p.detail}` : ''}` : p.type === 'text' ? p.text : p.type,
  )
  return h('p', { class: 'status-line muted' }, parts.join(' · '))
}

function drawError(block) {
  const d = block.data
  return h(
    'div',
    { class: 'callout err', role: 'note' },
    h('strong', null, 'Error'),
    d.code ? h('code', null, d.code) : null,
    h('span', { class: 'plain' }, d.message ?? ''),
    d.details ? remembered(block, 'details', 'Details', () => pre(pretty(d.details))) : null,
  )
}

function drawUnparsed(block) {
  const d = block.data
  return h('div', { class: 'callout warn' }, h('strong', null, 'Unreadable agent line'), h('span', null, `${d.error ?? ''} (${d.location ?? ''})`))
}

function drawEnded(block) {
  const d = block.data
  return h(
    'div',
    { class: 'callout ended' },
    h('strong', null, 'Session ended'),
    h('span', null, `${d.reason ?? ''}${d.terminated_by ? ` by ${d.terminated_by}` : ''}`),
    d.message ? h('span', { class: 'plain' }, d.message) : null,
    d.cost ? h('span', { class: 'muted' }, cost(d.cost)) : null,
  )
}

function drawOther(block) {
  const what = block.item ? `${block.item.kind} item` : block.event ?? block.type
  return remembered(block, 'raw', what, () => pre(pretty(block.item ?? block.data)))
}
