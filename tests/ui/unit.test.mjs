// The inspector's pure modules (ui/*.js), in Node: the SSE parser, the Markdown parser, the
// diff parsers and the timeline model. No browser: what they get and what they give is data.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'

import { SseParser } from '../../ui/sse.js'
import { parse, inline, safeHref } from '../../ui/markdown.js'
import { parseUnified, lineDiff, stats } from '../../ui/diff.js'
import { Timeline, textOf, toolOutput, fileRefs, summary } from '../../ui/timeline.js'

const REPO = path.resolve(import.meta.dirname, '../..')

test('the SSE parser gives whole events only, however the bytes are cut', () => {
  const wire = 'id: 1\ndata: {"a":1}\n\n: keep-alive\n\nid: 2\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'
  for (let cut = 0; cut <= wire.length; cut++) {
    const p = new SseParser()
    const events = [...p.push(wire.slice(0, cut)), ...p.push(wire.slice(cut))]
    assert.deepEqual(events, [
      { id: '1', data: '{"a":1}' },
      { id: '2', data: '{"b":\n2}' },
    ], `cut at ${cut}`)
  }
  // An event without its blank line is not delivered (the connection dropped inside it).
  const p = new SseParser()
  assert.deepEqual(p.push('id: 3\ndata: {"c":3}\n'), [])
})

test('Markdown keeps HTML as text and builds only known nodes', () => {
  const tree = parse('<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>')
  assert.deepEqual(tree, [
    { type: 'paragraph', children: [{ type: 'text', text: '<script>alert(1)</script>' }] },
    { type: 'paragraph', children: [{ type: 'text', text: '<img src=x onerror=alert(1)>' }] },
  ])
  const json = JSON.stringify(parse('**b** *i* `c` ~~d~~ [l](https://x.example/a) <https://y.example> https://z.example/p.'))
  for (const type of ['strong', 'em', 'code', 'del', 'link']) assert.ok(json.includes(`"type":"${type}"`), type)
  assert.ok(json.includes('"href":"https://z.example/p"'), 'a bare URL without its trailing period')
})

test('Markdown links keep only http(s) and mailto targets', () => {
  assert.equal(safeHref('javascript:alert(1)'), null)
  assert.equal(safeHref('data:text/html,<b>x</b>'), null)
  assert.equal(safeHref('/v1/sessions'), null)
  assert.equal(safeHref('https://example.com/x'), 'https://example.com/x')
  const nodes = inline('[click](javascript:alert(1))')
  assert.ok(nodes.every((n) => n.type === 'text'), JSON.stringify(nodes))
})

test('Markdown blocks: fences (closed or still streaming), headings, lists, quotes, tables', () => {
  const tree = parse('# Title\n\n```rust\nfn main() {}\n```\n\n1. one\n2. two\n   - nested\n\n> quoted\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n```\nunclosed')
  assert.deepEqual(tree.map((b) => b.type), ['heading', 'code', 'list', 'quote', 'table', 'code'])
  assert.deepEqual(tree[1], { type: 'code', lang: 'rust', text: 'fn main() {}' })
  assert.equal(tree[2].ordered, true)
  assert.equal(tree[2].items.length, 2)
  assert.equal(tree[2].items[1][1].type, 'list', 'the nested list belongs to the second item')
  assert.deepEqual(tree[4].align, [null, 'right'])
  assert.deepEqual(tree[5], { type: 'code', lang: null, text: 'unclosed' })
  // Single newlines in a paragraph are line breaks.
  assert.deepEqual(parse('a\nb')[0].children.map((n) => n.type), ['text', 'break', 'text'])
})

test('a unified diff numbers its lines; a bare content is a new file', () => {
  const rows = parseUnified('@@ -1,3 +1,3 @@\n export function greet(name) {\n-  return "Hello " + name\n+  return "Hello, " + name\n }\n')
  assert.deepEqual(rows.map((r) => [r.kind, r.old, r.new]), [
    ['hunk', null, null],
    ['ctx', 1, 1],
    ['del', 2, null],
    ['add', null, 2],
    ['ctx', 3, 3],
  ])
  assert.deepEqual(stats(rows), { added: 1, removed: 1 })
  const created = parseUnified('# TODO\n\n- write tests\n')
  assert.deepEqual(created.map((r) => [r.kind, r.new, r.text]), [
    ['add', 1, '# TODO'],
    ['add', 2, ''],
    ['add', 3, '- write tests'],
  ])
})

test('a line diff keeps common lines and shows removals before additions', () => {
  const rows = lineDiff('a\nb\nc\n', 'a\nB\nc\nd\n')
  assert.deepEqual(rows.map((r) => `${r.kind}:${r.text}`), ['ctx:a', 'del:b', 'add:B', 'ctx:c', 'add:d'])
  assert.deepEqual(lineDiff('', 'x\n').map((r) => r.kind), ['add'])
})

/** The golden universal logs in fixtures/universal/ (what the daemon really serves). */
function fixture(name) {
  return fs
    .readFileSync(path.join(REPO, 'fixtures/universal', `${name}.jsonl`), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
}

test('the timeline folds a golden tools log into one turn with calls, results and diffs', () => {
  const t = new Timeline()
  for (const e of fixture('tools')) assert.equal(t.apply(e), true)
  assert.equal(t.blocks.length, 1)
  const turn = t.blocks[0]
  assert.equal(turn.type, 'turn')
  assert.equal(turn.status, 'completed')
  assert.deepEqual(turn.metadata.cost, { credits: 7.0, usd: 0.07 })
  const types = turn.children.map((b) => b.type)
  assert.equal(types[0], 'user')
  assert.equal(textOf(turn.children[0]), 'Edit the project.')
  const tools = turn.children.filter((b) => b.type === 'tool')
  assert.equal(tools.length, 5, 'five calls; their results joined them')
  assert.ok(tools.every((b) => b.result), 'every call has its result')
  const greet = tools.find((b) => fileRefs(b).some((r) => r.path === 'src/greet.js'))
  assert.match(fileRefs(greet)[0].diff, /^@@ -1,3 \+1,3 @@/)
  const failing = tools.find((b) => b.result.item.status === 'failed')
  assert.equal(toolOutput(failing.result).value.file, 'missing.txt')
  const texts = turn.children.filter((b) => b.type === 'text').map((b) => textOf(b))
  assert.deepEqual(texts, ['I will edit the files.', 'Edited two files and ran the commands.'])
})

test('the timeline nests a subagent\'s items under it', () => {
  const t = new Timeline()
  for (const e of fixture('subagent')) t.apply(e)
  const sub = t.blocks[0].children.find((b) => b.type === 'subagent')
  assert.ok(sub, 'a subagent block')
  assert.deepEqual(sub.children.map((b) => b.type), ['text', 'tool', 'text'])
  assert.equal(textOf(sub.children[2]), 'The README says this project greets people.')
})

test('the timeline tracks a question until it is answered', () => {
  const t = new Timeline()
  const events = fixture('ask_user_multi')
  const asked = events.findIndex((e) => e.type === 'question.requested')
  events.slice(0, asked + 1).forEach((e) => t.apply(e))
  assert.deepEqual(t.pending().map((b) => b.type), ['question'])
  events.slice(asked + 1).forEach((e) => t.apply(e))
  assert.deepEqual(t.pending(), [])
  const q = [...t.questions.values()][0]
  assert.deepEqual(q.data.answers, [['bun'], ['unit', 'snapshot']])
})

test('the timeline ignores events it already has and reports what changed', () => {
  const t = new Timeline()
  const events = fixture('text')
  events.forEach((e) => t.apply(e))
  t.take()
  for (const e of events) assert.equal(t.apply(e), false, `#${e.sequence} again`)
  const { added, changed } = t.take()
  assert.equal(added.length, 0)
  assert.equal(changed.size, 0)
  assert.equal(t.last, events.at(-1).sequence)
})

test('streamed text shows while the item runs; its final content once complete', () => {
  const t = new Timeline()
  const item = { item_id: 'itm_1', native_item_id: null, parent_id: null, kind: 'message', role: 'assistant', content: [{ type: 'text', text: '' }], status: 'in_progress' }
  t.apply({ sequence: 1, type: 'item.started', data: { item } })
  t.apply({ sequence: 2, type: 'item.delta', data: { item_id: 'itm_1', delta: 'Hel' } })
  t.apply({ sequence: 3, type: 'item.delta', data: { item_id: 'itm_1', delta: 'lo' } })
  const block = t.items.get('itm_1')
  assert.equal(textOf(block), 'Hello')
  t.apply({ sequence: 4, type: 'item.completed', data: { item: { ...item, content: [{ type: 'text', text: 'Hello!' }], status: 'completed' } } })
  assert.equal(textOf(block), 'Hello!')
  assert.equal(summary({ type: 'item.delta', data: { item_id: 'itm_1', delta: 'x\ny' } }), 'itm_1 x y')
})
