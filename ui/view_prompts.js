// What the agent waits for: questions (`ask_user`: options, several choices, or an answer of
// one's own) and permission requests (allow once, always, or reject, seeing the full command or
// the edit's diff). The answers go to the daemon through /v1's question and permission routes;
// the card shows the outcome when the log records it.

import { h } from './dom.js'
import { Api } from './api.js'
import { diffView } from './diff.js'
import { proposedRows, pre } from './view_entries.js'

/** A question card: a form while it waits, the answers once resolved. */
export function drawQuestion(block, ctx) {
  const d = block.data
  const specs = d.questions?.length
    ? d.questions
    : [{ question: d.prompt, header: null, options: (d.options ?? []).map((label) => ({ label })), multi_select: false }]
  const waiting = d.status === 'requested'
  const title = h('h3', { class: 'prompt-title', id: `q-${block.seq}` }, waiting ? 'The agent asks' : 'The agent asked')
  const status = h('span', { class: `badge q-${d.status}` }, d.status)
  if (!waiting) {
    const answers = d.answers ?? (d.response != null ? [[d.response]] : [])
    return h(
      'section',
      { class: 'prompt question', 'aria-labelledby': `q-${block.seq}` },
      h('header', null, title, status),
      specs.map((q, i) =>
        h(
          'div',
          { class: 'q-done' },
          h('p', { class: 'q-text' }, q.header ? h('span', { class: 'tag' }, q.header) : null, q.question),
          d.status === 'answered'
            ? h('p', { class: 'answers' }, (answers[i] ?? []).length ? (answers[i] ?? []).map((a) => h('span', { class: 'chip' }, a)) : h('span', { class: 'muted' }, 'no answer'))
            : null,
        ),
      ),
    )
  }
  const error = h('p', { class: 'err', role: 'alert' })
  const fields = specs.map((q, i) => {
    const name = `q-${block.seq}-${i}`
    const options = (q.options ?? []).map((o, j) =>
      h(
        'label',
        { class: 'option' },
        h('input', { type: q.multi_select ? 'checkbox' : 'radio', name, value: o.label, id: `${name}-${j}` }),
        h('span', { class: 'option-label' }, o.label),
        o.description ? h('span', { class: 'muted option-desc' }, o.description) : null,
      ),
    )
    const other = h('input', { type: 'text', class: 'other', name: `${name}-other`, placeholder: 'Or type an answer', 'aria-label': `Your own answer to: ${q.question}` })
    return {
      q,
      el: h(
        'fieldset',
        null,
        h('legend', null, q.header ? h('span', { class: 'tag' }, q.header) : null, q.question, q.multi_select ? h('span', { class: 'muted' }, ' (choose any)') : null),
        options,
        other,
      ),
      answers: () => {
        const picked = [...document.querySelectorAll(`input[name="${name}"]:checked`)].map((x) => x.value)
        const own = other.value.trim()
        return own ? [...picked, own] : picked
      },
    }
  })
  const buttons = []
  const send = async (what) => {
    error.textContent = ''
    buttons.forEach((b) => (b.disabled = true))
    try {
      if (what === 'reject') {
        await ctx.api.post(Api.session(ctx.sessionId, `/questions/${encodeURIComponent(d.question_id)}/reject`))
      } else {
        const answers = fields.map((f) => f.answers())
        if (answers.every((a) => a.length === 0)) {
          error.textContent = 'Choose or type an answer first (or skip the question).'
          buttons.forEach((b) => (b.disabled = false))
          return
        }
        await ctx.api.post(Api.session(ctx.sessionId, `/questions/${encodeURIComponent(d.question_id)}/reply`), { answers })
      }
      ctx.note?.()
    } catch (e) {
      error.textContent = e.message
      buttons.forEach((b) => (b.disabled = false))
    }
  }
  buttons.push(
    h('button', { type: 'submit', class: 'primary' }, 'Answer'),
    h('button', { type: 'button', onclick: () => send('reject') }, 'Skip question'),
  )
  const form = h(
    'form',
    {
      class: 'prompt question is-waiting',
      'aria-labelledby': `q-${block.seq}`,
      dataset: { questionId: d.question_id },
      onsubmit: (e) => {
        e.preventDefault()
        send('reply')
      },
    },
    h('header', null, title, status),
    fields.map((f) => f.el),
    h('div', { class: 'actions' }, buttons),
    error,
  )
  return form
}

const REPLY_TEXT = { once: 'Allow once', always: 'Always allow', reject: 'Reject' }
const DECIDED = { user: 'you', policy: 'the permission mode', timeout: 'timeout', daemon: 'the daemon' }

/** A permission card: what the tool would do, and the three answers while it waits. */
export function drawPermission(block, ctx) {
  const d = block.data
  const m = d.metadata ?? {}
  const waiting = d.status === 'requested'
  const body = []
  if (m.command) body.push(pre(`$ ${m.command}`, 'out cmd'))
  const rows = proposedRows(m.toolName ?? d.action, m.input)
  if (rows) body.push(diffView(h, m.paths?.[0] ?? m.input?.path, rows, { action: m.kind }))
  if (!m.command && !rows) body.push(pre(JSON.stringify(m.input ?? {}, null, 2)))
  if (m.paths?.length && !rows) body.push(h('p', { class: 'muted' }, `files: ${m.paths.join(', ')}`))
  const title = h('h3', { class: 'prompt-title', id: `p-${block.seq}` }, m.title ?? d.action)
  const badge = h('span', { class: `badge p-${d.status}` }, d.status.replace(/_/g, ' '))
  const head = h('header', null, h('span', { class: 'tag' }, m.kind ?? 'tool'), title, badge)
  if (!waiting) {
    const who = DECIDED[m.decidedBy] ?? m.decidedBy ?? ''
    const outcome = d.status === 'reject' ? 'Rejected' : m.reply === 'always' || d.status === 'accept_for_session' ? 'Always allowed' : 'Allowed'
    return h(
      'section',
      { class: `prompt permission is-${d.status}`, 'aria-labelledby': `p-${block.seq}` },
      head,
      body,
      h('p', { class: 'outcome' }, `${outcome}${who ? ` by ${who}` : ''}${m.reason ? ` (${m.reason})` : ''}`),
    )
  }
  const error = h('p', { class: 'err', role: 'alert' })
  const options = m.options?.length ? m.options : ['once', 'always', 'reject']
  const buttons = options.map((reply) =>
    h(
      'button',
      {
        type: 'button',
        class: reply === 'reject' ? 'danger' : reply === 'once' ? 'primary' : null,
        dataset: { reply },
        title: reply === 'always' ? alwaysMeans(m) : null,
        onclick: async () => {
          error.textContent = ''
          buttons.forEach((b) => (b.disabled = true))
          try {
            await ctx.api.post(Api.session(ctx.sessionId, `/permissions/${encodeURIComponent(d.permission_id)}/reply`), { reply })
            ctx.note?.()
          } catch (e) {
            error.textContent = e.message
            buttons.forEach((b) => (b.disabled = false))
          }
        },
      },
      REPLY_TEXT[reply] ?? reply,
    ),
  )
  return h(
    'section',
    { class: 'prompt permission is-waiting', 'aria-labelledby': `p-${block.seq}`, dataset: { permissionId: d.permission_id } },
    head,
    body,
    h('p', { class: 'muted' }, `“Always allow” allows ${alwaysMeans(m)} in this session.`),
    h('div', { class: 'actions' }, buttons),
    error,
  )
}

/** What an `always` answer covers, as docs/http-api.md (permission requests) words it. */
function alwaysMeans(m) {
  if (m.command) return 'later commands with the same program and subcommand'
  return `every later call of ${m.toolName ?? 'this tool'}`
}
