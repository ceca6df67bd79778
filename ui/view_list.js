// The sessions page: every session of the daemon, newest first, a page at a time
// (`GET /v1/sessions?limit&cursor&status`), refreshed every two seconds while visible, with
// filters by status and a button to create one.

import { h, replace } from './dom.js'
import { Api } from './api.js'
import { ago, cost, stamp, statusLabel } from './format.js'
import { openCreate } from './view_create.js'

/** Sessions per page. */
const PAGE = 50
/** The most a refresh asks for at once (the API's largest page). */
const MAX_REFRESH = 1000
const STATUSES = ['running', 'awaiting_input', 'idle', 'ended', 'failed']

export function listView(root, { api, setTitle }) {
  setTitle('Sessions')
  let sessions = []
  let next = null
  let shown = PAGE
  const filter = new Set()
  let timer = 0
  let disposed = false
  /** Bumped by every read of the list: an answer to an older one is dropped. */
  let generation = 0

  const error = h('p', { class: 'err', role: 'alert' })
  const chips = STATUSES.map((s) =>
    h(
      'button',
      {
        type: 'button',
        class: 'chip-toggle',
        'aria-pressed': 'false',
        dataset: { status: s },
        onclick: (e) => {
          if (filter.has(s)) filter.delete(s)
          else filter.add(s)
          e.currentTarget.setAttribute('aria-pressed', String(filter.has(s)))
          shown = PAGE
          reload()
        },
      },
      statusLabel(s),
    ),
  )
  const body = h('tbody')
  const table = h(
    'table',
    { class: 'sessions' },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        ['Status', 'Session', 'Agent', 'Directory', 'Turns', 'Cost', 'Updated'].map((t) => h('th', { scope: 'col' }, t)),
      ),
    ),
    body,
  )
  const emptyNote = h('p', { class: 'muted empty', hidden: true })
  const more = h('button', { type: 'button', hidden: true, onclick: () => loadMore() }, 'Load more')
  const count = h('span', { class: 'muted', role: 'status' })
  replace(
    root,
    h(
      'div',
      { class: 'list' },
      h(
        'header',
        { class: 'list-head' },
        h('h1', null, 'Sessions'),
        count,
        h('button', { type: 'button', class: 'primary', onclick: () => openCreate(api) }, 'New session'),
      ),
      h('div', { class: 'filters', role: 'group', 'aria-label': 'Show only sessions that are' }, chips),
      error,
      h('div', { class: 'table-wrap' }, table),
      emptyNote,
      more,
    ),
  )

  function query(limit, cursor) {
    const q = new URLSearchParams({ limit: String(limit) })
    if (cursor) q.set('cursor', cursor)
    if (filter.size > 0) q.set('status', [...filter].join(','))
    return `sessions?${q}`
  }

  /** Reads the first `shown` sessions again (a page at most MAX_REFRESH long). */
  async function reload() {
    clearTimeout(timer)
    const gen = ++generation
    try {
      const page = await api.get(query(Math.min(shown, MAX_REFRESH)))
      if (disposed || gen !== generation) return
      const fresh = new Set(page.sessions.map((s) => s.sessionId))
      let again = false
      if (shown > MAX_REFRESH) {
        // Past the first MAX_REFRESH rows, keep what "load more" fetched.
        sessions = [...page.sessions, ...sessions.slice(MAX_REFRESH).filter((s) => !fresh.has(s.sessionId))]
      } else {
        // Sessions created since the last read push as many loaded rows past `shown`: keep
        // those (older than the page's last row) and read again with room for them all.
        const top = sessions[0]?.createdAt ?? Infinity
        const added = page.sessions.filter((s) => s.createdAt > top).length
        const last = page.sessions.at(-1)?.createdAt ?? 0
        const pushed = added > 0 && page.nextCursor ? sessions.filter((s) => !fresh.has(s.sessionId) && s.createdAt <= last) : []
        again = pushed.length > 0
        shown += again ? added : 0
        sessions = [...page.sessions, ...pushed]
        next = page.nextCursor ?? null
      }
      error.textContent = ''
      drawRows()
      if (again) {
        timer = setTimeout(reload, 0)
        return
      }
    } catch (e) {
      if (disposed || gen !== generation) return
      error.textContent = `Cannot list sessions: ${e.message}`
    }
    timer = setTimeout(tick, 2000)
  }

  function tick() {
    if (document.hidden) timer = setTimeout(tick, 2000)
    else reload()
  }

  /** The next page after the last row. A refresh under way (with fewer rows) is dropped. */
  async function loadMore() {
    if (!next) return
    more.disabled = true
    clearTimeout(timer)
    const gen = ++generation
    try {
      const page = await api.get(query(PAGE, next))
      if (disposed || gen !== generation) return
      const known = new Set(sessions.map((s) => s.sessionId))
      sessions = [...sessions, ...page.sessions.filter((s) => !known.has(s.sessionId))]
      next = page.nextCursor ?? null
      shown = sessions.length
      drawRows()
    } catch (e) {
      error.textContent = e.message
    } finally {
      more.disabled = false
    }
    if (!disposed && gen === generation) timer = setTimeout(tick, 2000)
  }

  const rowsById = new Map()
  function drawRows() {
    const now = Date.now()
    const seen = new Set()
    sessions.forEach((s, i) => {
      seen.add(s.sessionId)
      let row = rowsById.get(s.sessionId)
      if (!row) {
        row = makeRow(s.sessionId)
        rowsById.set(s.sessionId, row)
      }
      fillRow(row, s, now)
      if (body.children[i] !== row.tr) body.insertBefore(row.tr, body.children[i] ?? null)
    })
    for (const [sid, row] of rowsById) {
      if (!seen.has(sid)) {
        row.tr.remove()
        rowsById.delete(sid)
      }
    }
    more.hidden = !next
    emptyNote.hidden = sessions.length > 0
    emptyNote.textContent =
      filter.size > 0
        ? 'No session is in that state.'
        : 'No sessions yet. Create one with “New session”, or with POST /v1/sessions/{id}.'
    table.hidden = sessions.length === 0
    count.textContent = `${sessions.length}${next ? '+' : ''} shown`
  }

  function makeRow(sid) {
    const href = `#/sessions/${encodeURIComponent(sid)}`
    const cells = {
      status: h('td', { class: 'c-status' }),
      name: h('a', { href, class: 'name' }),
      id: h('code', { class: 'sid' }, sid),
      agent: h('td', { class: 'c-agent' }),
      dir: h('td', { class: 'c-dir' }),
      turns: h('td', { class: 'c-num c-turns' }),
      cost: h('td', { class: 'c-num c-cost' }),
      updated: h('td', { class: 'c-updated' }),
    }
    const tr = h(
      'tr',
      {
        dataset: { id: sid },
        onclick: (e) => {
          if (e.target.closest('a, button')) return
          location.hash = href
        },
      },
      cells.status,
      h('td', { class: 'c-name' }, cells.name, cells.id),
      cells.agent,
      cells.dir,
      cells.turns,
      cells.cost,
      cells.updated,
    )
    return { tr, cells }
  }

  function fillRow(row, s, now) {
    const c = row.cells
    const label = s.title ?? s.firstPrompt ?? ''
    setText(c.name, label || s.sessionId)
    c.name.classList.toggle('untitled', !label)
    c.name.title = label
    c.id.hidden = !label
    replace(c.status, h('span', { class: `badge st-${s.status}`, dataset: { status: s.status } }, statusLabel(s.status)))
    setText(c.agent, `${s.agent} · ${s.agentMode}`)
    // The cell ends with the path's end (its start is cut when it is too long).
    if (c.dir.firstChild?.textContent !== s.directory) replace(c.dir, h('span', { dir: 'ltr' }, s.directory))
    c.dir.title = s.directory
    setText(c.turns, String(s.turns))
    setText(c.cost, s.budget != null ? `${cost(s.cost)} / ${s.budget} cr` : cost(s.cost))
    setText(c.updated, ago(s.updatedAt, now))
    c.updated.title = stamp(s.updatedAt)
  }

  function setText(el, text) {
    if (el.textContent !== text) el.textContent = text
  }

  reload()
  return {
    dispose() {
      disposed = true
      clearTimeout(timer)
    },
  }
}
