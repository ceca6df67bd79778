// Diffs as the page shows them: a unified diff (what Codebuff's tools report) or two texts
// (what a permission request about to edit a file carries) become rows of numbered lines,
// added, removed or kept. `parseUnified` and `lineDiff` are pure (unit-tested in Node);
// `diffView` builds the elements.

/**
 * Rows of a unified diff: `{kind: 'hunk'|'add'|'del'|'ctx'|'note', text, old, new}`. A text
 * with no `@@` header is a new file's content (Codebuff reports a created file that way):
 * every line is added.
 */
export function parseUnified(text) {
  const lines = String(text ?? '').replace(/\r\n?/g, '\n').split('\n')
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop()
  const rows = []
  if (!lines.some((l) => l.startsWith('@@'))) {
    lines.forEach((l, i) => rows.push({ kind: 'add', text: l, old: null, new: i + 1 }))
    return rows
  }
  let oldNo = 0
  let newNo = 0
  for (const line of lines) {
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/.exec(line)
    if (hunk) {
      oldNo = Number(hunk[1])
      newNo = Number(hunk[2])
      rows.push({ kind: 'hunk', text: line, old: null, new: null })
    } else if (line.startsWith('---') || line.startsWith('+++') || line.startsWith('diff ') || line.startsWith('index ')) {
      rows.push({ kind: 'note', text: line, old: null, new: null })
    } else if (line.startsWith('\\')) {
      rows.push({ kind: 'note', text: line, old: null, new: null })
    } else if (line.startsWith('+')) {
      rows.push({ kind: 'add', text: line.slice(1), old: null, new: newNo++ })
    } else if (line.startsWith('-')) {
      rows.push({ kind: 'del', text: line.slice(1), old: oldNo++, new: null })
    } else {
      rows.push({ kind: 'ctx', text: line.startsWith(' ') ? line.slice(1) : line, old: oldNo++, new: newNo++ })
    }
  }
  return rows
}

/** Lines whose product above this is shown as removed-then-added instead of diffed. */
const MAX_CELLS = 4_000_000

/** Rows turning `before` into `after`, line by line (longest common subsequence). */
export function lineDiff(before, after) {
  const a = splitLines(before)
  const b = splitLines(after)
  const rows = []
  if (a.length * b.length > MAX_CELLS) {
    a.forEach((t, i) => rows.push({ kind: 'del', text: t, old: i + 1, new: null }))
    b.forEach((t, i) => rows.push({ kind: 'add', text: t, old: null, new: i + 1 }))
    return rows
  }
  // lcs[i][j]: common lines of a[i..] and b[j..].
  const width = b.length + 1
  const lcs = new Uint32Array((a.length + 1) * width)
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * width + j] =
        a[i] === b[j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1])
    }
  }
  let i = 0
  let j = 0
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      rows.push({ kind: 'ctx', text: a[i], old: i + 1, new: j + 1 })
      i++
      j++
    } else if (i < a.length && (j >= b.length || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1])) {
      // Removed lines before added ones, as unified diffs show them.
      rows.push({ kind: 'del', text: a[i], old: i + 1, new: null })
      i++
    } else {
      rows.push({ kind: 'add', text: b[j], old: null, new: j + 1 })
      j++
    }
  }
  return rows
}

function splitLines(text) {
  const lines = String(text ?? '').replace(/\r\n?/g, '\n').split('\n')
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop()
  return lines
}

/** Lines added and removed. */
export function stats(rows) {
  let added = 0
  let removed = 0
  for (const r of rows) {
    if (r.kind === 'add') added++
    else if (r.kind === 'del') removed++
  }
  return { added, removed }
}

/** Rows shown before the rest is folded behind a button. */
const SHOWN_ROWS = 400

/** The diff of `path` as a table (old and new line numbers, sign, line). */
export function diffView(h, path, rows, { action } = {}) {
  const { added, removed } = stats(rows)
  const table = h('table', { class: 'diff' })
  const body = h('tbody')
  const addRows = (from, to) => {
    for (const r of rows.slice(from, to)) {
      const sign = { add: '+', del: '−', ctx: ' ', hunk: '', note: '' }[r.kind]
      body.append(
        h(
          'tr',
          { class: `d-${r.kind}` },
          h('td', { class: 'ln', 'aria-hidden': 'true' }, r.old ?? ''),
          h('td', { class: 'ln', 'aria-hidden': 'true' }, r.new ?? ''),
          h('td', { class: 'sign', 'aria-label': { add: 'added', del: 'removed' }[r.kind] ?? null }, sign),
          h('td', { class: 'code' }, r.text),
        ),
      )
    }
  }
  addRows(0, SHOWN_ROWS)
  table.append(body)
  const more =
    rows.length > SHOWN_ROWS
      ? h(
          'button',
          {
            type: 'button',
            class: 'link',
            onclick: (e) => {
              addRows(SHOWN_ROWS, rows.length)
              e.currentTarget.remove()
            },
          },
          `Show ${rows.length - SHOWN_ROWS} more lines`,
        )
      : null
  return h(
    'figure',
    { class: 'diff-file' },
    h(
      'figcaption',
      null,
      h('span', { class: 'path' }, path ?? 'file'),
      action ? h('span', { class: 'tag' }, action) : null,
      h('span', { class: 'stat add' }, `+${added}`),
      h('span', { class: 'stat del' }, `−${removed}`),
    ),
    h('div', { class: 'diff-scroll' }, table),
    more,
  )
}
