// One session's page: its header (status, agent, cost and budget, the turn's controls), the
// live timeline (replay, then live, resumed after a dropped connection), the raw events, and
// the prompt box. Everything goes through /v1: the SSE stream for the log, GET for the
// session's info, POST for prompts, answers, cancel and terminate, DELETE for delete.

import { h, replace, reducedMotion } from './dom.js'
import { Api, ApiError } from './api.js'
import { Timeline, summary } from './timeline.js'
import { create, draw } from './view_entries.js'
import { ago, clock, cost, stamp, statusLabel, trim } from './format.js'

/** Events whose arrival changes what `GET /v1/sessions/{id}` says. */
const INFO_EVENTS = new Set([
  'turn.started',
  'turn.ended',
  'session.ended',
  'question.requested',
  'question.resolved',
  'permission.requested',
  'permission.resolved',
])

export function sessionView(root, { api, id, setTitle }) {
  const abort = new AbortController()
  const timeline = new Timeline()
  const rows = []
  let info = null
  let state = 'connecting'
  let frame = 0
  let infoTimer = 0

  const ctx = { api, sessionId: id, note: () => refreshInfoSoon() }

  setTitle(id)

  // Header.
  const title = h('h1', { class: 's-title' }, id)
  const meta = h('p', { class: 's-meta muted' })
  const stats = h('div', { class: 's-stats' })
  const connection = h('span', { class: 'conn', role: 'status', dataset: { state } }, 'connecting…')
  const lastSeq = h('span', { class: 'muted last-seq', title: 'the last event received' }, '#0')
  const cancelButton = h('button', { type: 'button', onclick: () => act('cancel') }, 'Cancel turn')
  const terminateButton = h('button', { type: 'button', onclick: () => act('terminate') }, 'Terminate')
  const deleteButton = h('button', { type: 'button', class: 'danger', onclick: () => act('delete') }, 'Delete')
  const actionError = h('p', { class: 'err', role: 'alert' })
  const head = h(
    'header',
    { class: 's-head' },
    h('a', { href: '#/', class: 'back' }, '← Sessions'),
    title,
    meta,
    h('div', { class: 's-bar' }, stats, h('span', { class: 'conn-box' }, connection, lastSeq)),
    h('div', { class: 's-actions' }, cancelButton, terminateButton, deleteButton),
    actionError,
  )

  // Tabs.
  const timelineEl = h('div', { class: 'timeline', id: 'timeline', role: 'tabpanel', 'aria-labelledby': 'tab-timeline' })
  const empty = h('p', { class: 'muted empty' }, 'Nothing yet: send a prompt below.')
  timelineEl.append(empty)
  const eventList = h('ol', { class: 'events' })
  const typeFilter = h('select', { 'aria-label': 'Show events of type', onchange: () => filterEvents() }, h('option', { value: '' }, 'all types'))
  const eventsEl = h(
    'div',
    { class: 'events-panel', id: 'events', role: 'tabpanel', 'aria-labelledby': 'tab-events', hidden: true },
    h(
      'div',
      { class: 'events-tools' },
      typeFilter,
      h('button', { type: 'button', onclick: () => download() }, 'Download events.jsonl'),
      h('span', { class: 'muted' }, 'Open an event to see it whole, as /v1 serves it (with raw).'),
    ),
    eventList,
  )
  const tabTimeline = h('button', { type: 'button', role: 'tab', id: 'tab-timeline', 'aria-selected': 'true', 'aria-controls': 'timeline', onclick: () => tab('timeline') }, 'Timeline')
  const eventCount = h('span', { class: 'count' }, '0')
  const tabEvents = h('button', { type: 'button', role: 'tab', id: 'tab-events', 'aria-selected': 'false', 'aria-controls': 'events', onclick: () => tab('events') }, 'Events ', eventCount)
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Session views' }, tabTimeline, tabEvents)

  // Waiting banner and composer.
  const banner = h('div', { class: 'waiting', role: 'status', hidden: true })
  const input = h('textarea', {
    rows: 2,
    placeholder: 'Send a prompt (Enter sends, Shift+Enter for a new line)',
    'aria-label': 'Prompt',
    onkeydown: (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault()
        send()
      }
    },
  })
  const sendButton = h('button', { type: 'submit', class: 'primary' }, 'Send')
  const composerNote = h('p', { class: 'muted composer-note', role: 'status' })
  const composer = h(
    'form',
    {
      class: 'composer',
      onsubmit: (e) => {
        e.preventDefault()
        send()
      },
    },
    input,
    sendButton,
    composerNote,
  )
  const newBelow = h('button', { type: 'button', class: 'new-below', hidden: true, onclick: () => toBottom() }, '↓ New events')

  replace(root, h('div', { class: 'session' }, head, tabs, h('div', { class: 's-main' }, timelineEl, eventsEl), newBelow, h('div', { class: 'dock' }, banner, composer)))

  // Data.
  async function refreshInfo() {
    try {
      info = await api.get(Api.session(id), { signal: abort.signal })
      drawInfo()
    } catch (e) {
      if (abort.signal.aborted) return
      if (e instanceof ApiError && e.status === 404) gone()
      else actionError.textContent = e.message
    }
  }

  function refreshInfoSoon() {
    clearTimeout(infoTimer)
    infoTimer = setTimeout(refreshInfo, 150)
  }

  function drawInfo() {
    if (!info) return
    const name = info.title ?? info.firstPrompt ?? id
    replace(title, name)
    title.title = name
    setTitle(name)
    replace(
      meta,
      h('code', null, info.sessionId),
      ` · ${info.agent} · mode ${info.agentMode} · permissions ${info.permissionMode}`,
      info.model ? ` · model ${info.model}` : '',
      ' · ',
      h('span', { class: 'dir', title: info.directory }, info.directory),
    )
    const budget =
      info.budget != null
        ? h('span', { class: 'stat', title: 'budget (credits)' }, `budget ${trim(info.budget)} cr, ${trim(info.remaining ?? 0)} left`)
        : null
    replace(
      stats,
      h('span', { class: `badge st-${info.status}`, dataset: { status: info.status } }, statusLabel(info.status)),
      h('span', { class: 'stat' }, `${info.turns} turn${info.turns === 1 ? '' : 's'}`),
      h('span', { class: 'stat s-cost', title: 'spent so far' }, cost(info.cost)),
      budget,
      h('span', { class: 'stat muted', title: stamp(info.updatedAt) }, `updated ${ago(info.updatedAt)}`),
    )
    const live = info.status === 'running' || info.status === 'awaiting_input'
    cancelButton.disabled = !live
    terminateButton.disabled = info.ended
    input.disabled = sendButton.disabled = info.ended
    input.placeholder = info.ended ? 'This session has ended.' : 'Send a prompt (Enter sends, Shift+Enter for a new line)'
  }

  function gone() {
    state = 'gone'
    connection.dataset.state = state
    connection.textContent = 'no such session (deleted?)'
    input.disabled = sendButton.disabled = cancelButton.disabled = terminateButton.disabled = deleteButton.disabled = true
  }

  api.follow(id, 0, {
    signal: abort.signal,
    onState: (s, detail) => {
      if (s === 'gone') return gone()
      state = s
      connection.dataset.state = s
      connection.textContent =
        s === 'live' ? 'live' : s === 'connecting' ? 'connecting…' : `reconnecting…${detail?.message ? ` (${detail.message})` : ''}`
      if (s === 'live') refreshInfoSoon()
    },
    onEvents: (batch) => {
      for (const e of batch) {
        if (!timeline.apply(e)) continue
        rows.push({ seq: e.sequence, type: e.type, time: e.time, text: summary(e) })
        if (INFO_EVENTS.has(e.type)) refreshInfoSoon()
        if (e.type === 'turn.started') composerNote.textContent = ''
      }
      schedule()
    },
  })
  refreshInfo()
  const ticker = setInterval(() => {
    if (!document.hidden) refreshInfo()
  }, 5000)

  function schedule() {
    if (!frame) frame = requestAnimationFrame(paint)
  }

  function nearBottom() {
    const doc = document.scrollingElement
    return doc.scrollHeight - doc.scrollTop - doc.clientHeight < 160
  }

  function toBottom() {
    newBelow.hidden = true
    const doc = document.scrollingElement
    doc.scrollTo({ top: doc.scrollHeight, behavior: reducedMotion() ? 'auto' : 'instant' })
  }

  function paint() {
    frame = 0
    const stick = nearBottom()
    const { added, changed } = timeline.take()
    if (added.length > 0) empty.remove()
    for (const [block, parent] of added) {
      ;(parent ? parent.kids : timelineEl).append(create(block, ctx))
      changed.delete(block)
    }
    for (const block of changed) if (block.el) draw(block, ctx)
    eventCount.textContent = String(rows.length)
    timelineEl.dataset.last = String(timeline.last)
    lastSeq.textContent = `#${timeline.last}`
    drawPending()
    if (!eventsEl.hidden) drawRows()
    if (added.length > 0 || changed.size > 0) {
      if (stick) toBottom()
      else newBelow.hidden = false
    }
  }

  function drawPending() {
    const pending = timeline.pending()
    banner.hidden = pending.length === 0
    if (pending.length === 0) return
    const q = pending.filter((b) => b.type === 'question').length
    const p = pending.length - q
    const what = [q ? `${q} question${q > 1 ? 's' : ''}` : '', p ? `${p} permission request${p > 1 ? 's' : ''}` : ''].filter(Boolean).join(' and ')
    replace(
      banner,
      h('span', null, `The agent is waiting for you: ${what}.`),
      h(
        'button',
        {
          type: 'button',
          onclick: () => {
            const el = pending[0].el
            el?.scrollIntoView({ block: 'center', behavior: reducedMotion() ? 'auto' : 'smooth' })
            el?.querySelector('input, button')?.focus({ preventScroll: true })
          },
        },
        'Go there',
      ),
    )
  }

  // The raw events tab: one row per event; opening a row reads that event from /v1.
  let drawn = 0
  const types = new Set()
  function drawRows() {
    const frag = document.createDocumentFragment()
    for (; drawn < rows.length; drawn++) {
      const r = rows[drawn]
      if (!types.has(r.type)) {
        types.add(r.type)
        typeFilter.append(h('option', { value: r.type }, r.type))
      }
      const details = h(
        'details',
        null,
        h(
          'summary',
          null,
          h('span', { class: 'ev-seq' }, `#${r.seq}`),
          h('time', { class: 'ev-time', datetime: r.time }, clock(r.time)),
          h('span', { class: 'ev-type' }, r.type),
          h('span', { class: 'ev-text' }, r.text),
        ),
      )
      details.addEventListener('toggle', () => openRow(details, r.seq), { once: true })
      const li = h('li', { dataset: { seq: r.seq, type: r.type } }, details)
      if (typeFilter.value && typeFilter.value !== r.type) li.hidden = true
      frag.append(li)
    }
    eventList.append(frag)
  }

  async function openRow(details, seq) {
    const body = h('pre', { class: 'out' }, 'loading…')
    details.append(body)
    try {
      const page = await api.get(Api.session(id, `/events?offset=${seq - 1}&limit=1&includeRaw=true`))
      body.textContent = JSON.stringify(page.events[0] ?? null, null, 2)
    } catch (e) {
      body.textContent = e.message
    }
  }

  function filterEvents() {
    for (const li of eventList.children) li.hidden = !!typeFilter.value && li.dataset.type !== typeFilter.value
  }

  async function download() {
    try {
      const text = await api.get(Api.session(id, '/events.jsonl'))
      const blob = new Blob([typeof text === 'string' ? text : JSON.stringify(text)], { type: 'application/x-ndjson' })
      const url = URL.createObjectURL(blob)
      const a = h('a', { href: url, download: `${id}.events.jsonl` })
      document.body.append(a)
      a.click()
      a.remove()
      setTimeout(() => URL.revokeObjectURL(url), 10_000)
    } catch (e) {
      actionError.textContent = e.message
    }
  }

  function tab(which) {
    const events = which === 'events'
    tabTimeline.setAttribute('aria-selected', String(!events))
    tabEvents.setAttribute('aria-selected', String(events))
    timelineEl.hidden = events
    eventsEl.hidden = !events
    if (events) drawRows()
  }

  // Actions.
  async function send() {
    const message = input.value
    if (!message.trim() || input.disabled) return
    sendButton.disabled = true
    composerNote.textContent = ''
    try {
      await api.post(Api.session(id, '/messages'), { message })
      input.value = ''
      const busy = info && (info.status === 'running' || info.status === 'awaiting_input')
      composerNote.textContent = busy ? 'Queued: it runs when the current turn ends.' : ''
      refreshInfoSoon()
    } catch (e) {
      composerNote.textContent = e.message
    } finally {
      sendButton.disabled = !!info?.ended
    }
  }

  async function act(what) {
    actionError.textContent = ''
    try {
      if (what === 'cancel') await api.post(Api.session(id, '/cancel'))
      if (what === 'terminate') {
        if (!confirm(`Terminate session ${id}? Its running turn is stopped and it takes no more prompts.`)) return
        await api.post(Api.session(id, '/terminate'))
      }
      if (what === 'delete') {
        if (!confirm(`Delete session ${id} and all its events? This cannot be undone.`)) return
        await api.delete(Api.session(id))
        location.hash = '#/'
        return
      }
      refreshInfoSoon()
    } catch (e) {
      actionError.textContent = e.message
    }
  }

  return {
    dispose() {
      abort.abort()
      clearInterval(ticker)
      clearTimeout(infoTimer)
      if (frame) cancelAnimationFrame(frame)
    },
  }
}
