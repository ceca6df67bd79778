// A small Markdown renderer for agent text that builds DOM nodes: `parse` turns text into a
// tree of plain objects (no DOM, unit-tested in Node), `render` turns the tree into elements
// whose text is always set as text. Raw HTML in the source stays visible text; links keep
// only http(s) and mailto targets.
//
// Covered: paragraphs (single newlines are line breaks), ATX headings, fenced code (an
// unclosed fence runs to the end, as text streams in), indented lists (ordered, unordered,
// nested, task boxes shown as text), block quotes, rules, pipe tables; inline code, bold,
// italic, strike-through, links, autolinks and bare URLs.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/
const RULE = /^ {0,3}(?:(?:\*\s*){3,}|(?:-\s*){3,}|(?:_\s*){3,})$/
const QUOTE = /^ {0,3}> ?(.*)$/
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(?:\s+(.*)|$)/
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/

/** Block tree of `text`. */
export function parse(text) {
  return blocks(String(text ?? '').replace(/\r\n?/g, '\n').split('\n'))
}

function blocks(lines) {
  const out = []
  let i = 0
  const startsBlock = (line, next) =>
    FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    ITEM.test(line) || (line.includes('|') && next !== undefined && TABLE_RULE.test(next) && next.includes('-'))
  while (i < lines.length) {
    const line = lines[i]
    if (line.trim() === '') {
      i++
      continue
    }
    let m
    if ((m = FENCE.exec(line))) {
      const fence = m[1]
      const body = []
      i++
      while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length)) && lines[i].trim().replace(/[`~]/g, '') === '')) {
        body.push(lines[i])
        i++
      }
      i++
      out.push({ type: 'code', lang: m[2] || null, text: body.join('\n') })
      continue
    }
    if ((m = HEADING.exec(line))) {
      out.push({ type: 'heading', level: m[1].length, children: inline(m[2] ?? '') })
      i++
      continue
    }
    if (RULE.test(line)) {
      out.push({ type: 'rule' })
      i++
      continue
    }
    if (QUOTE.test(line)) {
      const body = []
      while (i < lines.length && QUOTE.test(lines[i])) {
        body.push(QUOTE.exec(lines[i])[1])
        i++
      }
      out.push({ type: 'quote', children: blocks(body) })
      continue
    }
    if ((m = ITEM.exec(line))) {
      const [list, next] = listAt(lines, i)
      out.push(list)
      i = next
      continue
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      const head = cells(line)
      const align = cells(lines[i + 1]).map((c) =>
        c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : null,
      )
      i += 2
      const rows = []
      while (i < lines.length && lines[i].includes('|') && lines[i].trim() !== '') {
        rows.push(cells(lines[i]).map(inline))
        i++
      }
      out.push({ type: 'table', head: head.map(inline), align, rows })
      continue
    }
    const para = []
    while (i < lines.length && lines[i].trim() !== '' && (para.length === 0 || !startsBlock(lines[i], lines[i + 1]))) {
      para.push(lines[i].trim())
      i++
    }
    out.push({ type: 'paragraph', children: inline(para.join('\n')) })
  }
  return out
}

/** The list starting at line `i`; returns it and the index after it. */
function listAt(lines, i) {
  const first = ITEM.exec(lines[i])
  const indent = first[1].length
  const ordered = /\d/.test(first[2])
  const list = { type: 'list', ordered, start: ordered ? parseInt(first[2], 10) : null, items: [] }
  let current = null
  while (i < lines.length) {
    const line = lines[i]
    const m = ITEM.exec(line)
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      current = [m[3] ?? '']
      list.items.push(current)
      i++
      continue
    }
    if (line.trim() === '') {
      // A blank line ends the list unless the next line continues it (indented or an item).
      const next = lines[i + 1]
      if (next !== undefined && (leading(next) > indent || (ITEM.test(next) && leading(next) === indent))) {
        current.push('')
        i++
        continue
      }
      break
    }
    if (leading(line) > indent) {
      current.push(line.slice(Math.min(leading(line), indent + 2)))
      i++
      continue
    }
    if (m) break
    // A lazy continuation line of the item's paragraph.
    if (!FENCE.test(line) && !HEADING.test(line) && !RULE.test(line) && !QUOTE.test(line)) {
      current.push(line.trim())
      i++
      continue
    }
    break
  }
  list.items = list.items.map((item) => blocks(item))
  return [list, i]
}

const leading = (line) => line.length - line.trimStart().length

function cells(line) {
  let s = line.trim()
  if (s.startsWith('|')) s = s.slice(1)
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1)
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'))
}

// Inline syntax, in order of precedence within one scan.
const INLINE = new RegExp(
  [
    /(`+)([\s\S]*?[^`])\1(?!`)/.source, // 1,2 code
    /\*\*(?=\S)([\s\S]*?\S)\*\*/.source, // 3 strong
    /__(?=\S)([\s\S]*?\S)__(?!\w)/.source, // 4 strong
    /\*(?=[^\s*])([\s\S]*?[^\s*])\*/.source, // 5 em
    /(?<!\w)_(?=[^\s_])([\s\S]*?[^\s_])_(?!\w)/.source, // 6 em
    /~~(?=\S)([\s\S]*?\S)~~/.source, // 7 del
    /\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/.source, // 8,9 link
    /<((?:https?:\/\/|mailto:)[^>\s]+)>/.source, // 10 autolink
    /((?:https?:\/\/)[^\s<]*[^\s<.,:;"'!?)\]])/.source, // 11 bare URL
    /\\([\\`*_{}[\]()#+\-.!|~<>])/.source, // 12 escape
    /(\n)/.source, // 13 line break
  ].join('|'),
  'g',
)

/** Inline nodes of `text`. */
export function inline(text) {
  const out = []
  let last = 0
  const push = (node) => {
    if (node.type === 'text' && out.length > 0 && out[out.length - 1].type === 'text') {
      out[out.length - 1].text += node.text
    } else out.push(node)
  }
  INLINE.lastIndex = 0
  for (const m of String(text).matchAll(INLINE)) {
    if (m.index > last) push({ type: 'text', text: text.slice(last, m.index) })
    last = m.index + m[0].length
    if (m[2] !== undefined) push({ type: 'code', text: m[2].replace(/^ (.*) $/s, '$1') })
    else if (m[3] !== undefined || m[4] !== undefined) push({ type: 'strong', children: inline(m[3] ?? m[4]) })
    else if (m[5] !== undefined || m[6] !== undefined) push({ type: 'em', children: inline(m[5] ?? m[6]) })
    else if (m[7] !== undefined) push({ type: 'del', children: inline(m[7]) })
    else if (m[8] !== undefined) {
      const href = safeHref(m[9])
      push(href ? { type: 'link', href, children: inline(m[8]) } : { type: 'text', text: m[0] })
    } else if (m[10] !== undefined || m[11] !== undefined) {
      const url = m[10] ?? m[11]
      const href = safeHref(url)
      push(href ? { type: 'link', href, children: [{ type: 'text', text: url }] } : { type: 'text', text: m[0] })
    } else if (m[12] !== undefined) push({ type: 'text', text: m[12] })
    else if (m[13] !== undefined) push({ type: 'break' })
  }
  if (last < text.length) push({ type: 'text', text: text.slice(last) })
  return out
}

/** `url` when it is an absolute http(s) or mailto URL, else null. */
export function safeHref(url) {
  try {
    const u = new URL(url)
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null
  } catch {
    return null
  }
}

/** Elements for a block tree (from `parse`), built with `h` (see dom.js). */
export function render(tree, h) {
  return tree.map((b) => block(b, h))
}

function block(b, h) {
  switch (b.type) {
    case 'heading':
      return h(`h${Math.min(6, b.level + 2)}`, { class: 'md-h' }, spans(b.children, h))
    case 'paragraph':
      return h('p', null, spans(b.children, h))
    case 'code':
      return h('pre', { class: 'md-code', dataset: b.lang ? { lang: b.lang } : null }, h('code', null, b.text))
    case 'rule':
      return h('hr')
    case 'quote':
      return h('blockquote', null, render(b.children, h))
    case 'list':
      return h(
        b.ordered ? 'ol' : 'ul',
        { start: b.ordered && b.start !== 1 ? b.start : null },
        b.items.map((item) => h('li', null, render(item, h))),
      )
    case 'table':
      return h(
        'div',
        { class: 'md-table' },
        h(
          'table',
          null,
          h('thead', null, h('tr', null, b.head.map((c, i) => h('th', { class: b.align[i] ? `a-${b.align[i]}` : null }, spans(c, h))))),
          h('tbody', null, b.rows.map((row) => h('tr', null, row.map((c, i) => h('td', { class: b.align[i] ? `a-${b.align[i]}` : null }, spans(c, h)))))),
        ),
      )
    default:
      return h('p', null, '')
  }
}

function spans(nodes, h) {
  return nodes.map((n) => {
    switch (n.type) {
      case 'text':
        return n.text
      case 'code':
        return h('code', null, n.text)
      case 'strong':
        return h('strong', null, spans(n.children, h))
      case 'em':
        return h('em', null, spans(n.children, h))
      case 'del':
        return h('del', null, spans(n.children, h))
      case 'link':
        return h('a', { href: n.href, target: '_blank', rel: 'noopener noreferrer nofollow' }, spans(n.children, h))
      case 'break':
        return h('br')
      default:
        return ''
    }
  })
}
