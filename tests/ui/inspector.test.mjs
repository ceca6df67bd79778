// The inspector (/ui/) in Debian's headless Chromium, against the real daemon and its mock agent:
// the page lists sessions created over /v1, streams a turn completely across dropped
// connections, answers questions and permission requests by clicks, asks for a daemon's token,
// and shows agent text as text. Screenshots go to target/ui-screenshots/ (CI's artifacts).

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'

import {
  cuttingProxy,
  launchBrowser,
  openPage,
  screenshot,
  startDaemon,
  waitFor,
  waitStatus,
} from './harness.mjs'

/** The session ids of the list's rows, top to bottom. */
const rowIds = (page) => page.locator('table.sessions tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.id))

/** The last sequence the session page has applied. */
const lastSeq = async (page) => Number(await page.locator('#timeline').getAttribute('data-last'))

/** The agent's texts in the timeline, in order. */
const agentTexts = (page) => page.locator('#timeline .msg-agent .md').allTextContents()

/** True when the page is no wider than its viewport (nothing scrolls sideways). */
const fitsWidth = (page) => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)

test('the list shows sessions created over /v1, live, filtered, and creates one', async (t) => {
  const daemon = await startDaemon(t)
  const browser = await launchBrowser(t)
  await daemon.v1('POST', 'sessions/titled', { agent: 'mock', title: 'Refactor the parser' })
  await daemon.v1('POST', 'sessions/prompted', { agent: 'mock' })
  await daemon.v1('POST', 'sessions/prompted/messages', { message: 'echo hello from the list' })
  await daemon.v1('POST', 'sessions/finished', { agent: 'mock' })
  await daemon.v1('POST', 'sessions/finished/terminate')
  await waitStatus(daemon, 'prompted', ['idle'])

  const page = await openPage(browser, `${daemon.url}/ui/`)
  await waitFor('three rows', async () => (await rowIds(page)).length === 3)
  assert.deepEqual(await rowIds(page), ['finished', 'prompted', 'titled'], 'newest first')
  const row = (id) => page.locator(`tr[data-id="${id}"]`)
  assert.equal(await row('titled').locator('a.name').textContent(), 'Refactor the parser')
  assert.equal(await row('prompted').locator('a.name').textContent(), 'echo hello from the list', 'the first prompt stands for a missing title')
  assert.equal(await row('finished').locator('a.name').textContent(), 'finished', 'the id when there is neither')
  assert.equal(await row('finished').locator('.badge').getAttribute('data-status'), 'ended')
  assert.equal(await row('prompted').locator('.badge').getAttribute('data-status'), 'idle')
  assert.match(await row('prompted').locator('td').nth(5).textContent(), /^1\.25 cr/, 'the echo turn cost 1.25 credits')
  assert.equal(await row('prompted').locator('td').nth(4).textContent(), '1', 'one turn')

  // Live: a session created now shows up without a reload.
  await daemon.v1('POST', 'sessions/later', { agent: 'mock', title: 'Created while watching' })
  await waitFor('the new session in the list', async () => (await rowIds(page))[0] === 'later', 10_000)

  // Filters by status.
  await page.getByRole('button', { name: 'ended', exact: true }).click()
  await waitFor('only ended sessions', async () => (await rowIds(page)).join() === 'finished')
  await page.getByRole('button', { name: 'ended', exact: true }).click()
  await waitFor('every session again', async () => (await rowIds(page)).length === 4)
  await screenshot(page, 'list.png')

  await page.setViewportSize({ width: 390, height: 844 })
  assert.ok(await fitsWidth(page), 'the list fits a phone-wide screen')
  await screenshot(page, 'list-phone.png')
  await page.setViewportSize({ width: 1280, height: 800 })

  // Keyboard: Tab reaches a session's link, Enter opens it.
  await page.locator('body').focus()
  let focused = null
  for (let i = 0; i < 30 && !focused; i++) {
    await page.keyboard.press('Tab')
    focused = await page.evaluate(() => (document.activeElement?.matches('a.name') ? document.activeElement.textContent : null))
  }
  assert.equal(focused, 'Created while watching', 'the first row is reachable with Tab')
  await page.keyboard.press('Enter')
  await page.waitForURL(/#\/sessions\/later$/)
  await page.locator('.s-title', { hasText: 'Created while watching' }).waitFor()
  await page.getByRole('link', { name: '← Sessions' }).click()

  // Creating a session from the page, with its first prompt.
  await page.getByRole('button', { name: 'New session' }).click()
  const dialog = page.locator('#create-dialog')
  await dialog.locator('select[name="agent"] option[value="mock"]').waitFor({ state: 'attached' })
  await dialog.locator('input[name="id"]').fill('made-in-the-page')
  await dialog.locator('select[name="agent"]').selectOption('mock')
  await dialog.locator('select[name="permissionMode"]').selectOption('acceptEdits')
  await dialog.locator('input[name="maxCredits"]').fill('40')
  await dialog.locator('input[name="title"]').fill('Made in the page')
  await dialog.locator('textarea[name="prompt"]').fill('echo created from the dialog')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await page.waitForURL(/#\/sessions\/made-in-the-page$/)
  await waitFor('the first prompt answered', async () => (await agentTexts(page)).includes('created from the dialog'))
  const info = await daemon.v1('GET', 'sessions/made-in-the-page')
  assert.equal(info.permissionMode, 'acceptEdits')
  assert.equal(info.budget, 40)
  assert.equal(info.title, 'Made in the page')
  await page.locator('.s-stats', { hasText: 'budget 40 cr, 38.75 left' }).waitFor()

  page.clean()
  await daemon.stop()
})

test('the list pages through many sessions, 50 at a time', async (t) => {
  const daemon = await startDaemon(t)
  const browser = await launchBrowser(t)
  const ids = Array.from({ length: 120 }, (_, i) => `many-${String(i).padStart(3, '0')}`)
  for (const id of ids) await daemon.v1('POST', `sessions/${id}`, { agent: 'mock' })
  const page = await openPage(browser, `${daemon.url}/ui/`)
  const newestFirst = [...ids].reverse()
  await waitFor('the first page', async () => (await rowIds(page)).length === 50)
  assert.deepEqual(await rowIds(page), newestFirst.slice(0, 50))
  const more = page.getByRole('button', { name: 'Load more' })
  await more.click()
  await waitFor('the second page', async () => (await rowIds(page)).length === 100)
  await more.click()
  await waitFor('the last page', async () => (await rowIds(page)).length === 120)
  assert.deepEqual(await rowIds(page), newestFirst)
  assert.equal(await more.isHidden(), true, 'nothing more to load')
  // The live refresh keeps every loaded row.
  await daemon.v1('POST', 'sessions/many-new', { agent: 'mock' })
  await waitFor('the new session on top', async () => (await rowIds(page))[0] === 'many-new', 10_000)
  assert.equal((await rowIds(page)).length, 121)
  page.clean()
  await daemon.stop()
})

test('a session page streams a flood 2000 turn completely across dropped connections', async (t) => {
  const daemon = await startDaemon(t)
  const proxy = await cuttingProxy(t, daemon.url)
  const browser = await launchBrowser(t)
  await daemon.v1('POST', 'sessions/flood', { agent: 'mock' })
  const streams = []
  browser.on('request', (r) => {
    if (r.url().includes('/events/sse')) streams.push(Number(new URL(r.url()).searchParams.get('offset')))
  })
  const page = await openPage(browser, `${proxy.url}/ui/#/sessions/flood`)
  await page.locator('.conn[data-state="live"]').waitFor()

  // 2000 deltas over four seconds; the page's connections are cut twice meanwhile.
  await daemon.v1('POST', 'sessions/flood/messages', { message: 'flood 2000 500' })
  const cuts = []
  for (const after of [200, 1000]) {
    await waitFor(`the page past event ${after}`, async () => (await lastSeq(page)) > after)
    cuts.push({ at: await lastSeq(page), connections: proxy.cut() })
  }
  const info = await waitStatus(daemon, 'flood', ['idle'])
  await waitFor('the page at the end of the log', async () => (await lastSeq(page)) === info.eventCount, 20_000)
  for (const cut of cuts) {
    assert.ok(cut.connections >= 1, `a cut dropped the page's stream: ${JSON.stringify(cuts)}`)
    assert.ok(cut.at < info.eventCount - 100, `the cut came mid-turn: ${JSON.stringify(cuts)}`)
  }
  // Each new stream started after the last event the page had (`?offset=`), not from the start.
  assert.ok(streams.length >= 3, `the page reconnected after each cut: offsets ${streams}`)
  assert.equal(streams[0], 0)
  for (let i = 1; i < streams.length; i++) assert.ok(streams[i] >= streams[i - 1], `offsets ${streams}`)
  for (const cut of cuts) assert.ok(streams.some((o) => o >= cut.at), `a stream resumed after #${cut.at}: ${streams}`)
  await page.locator('.blk-turn .turn-head .badge[data-status="completed"]').waitFor()
  assert.deepEqual(await agentTexts(page), ['Flooded 2000 deltas.'])
  assert.match(await page.locator('.turn-cost').textContent(), /^5 cr/)

  // Every event once, in order: the raw list holds the whole log, no gap, no duplicate.
  await page.getByRole('tab', { name: /Events/ }).click()
  const seqs = await page.locator('ol.events li').evaluateAll((lis) => lis.map((li) => Number(li.dataset.seq)))
  assert.equal(seqs.length, info.eventCount)
  assert.deepEqual(seqs, Array.from({ length: info.eventCount }, (_, i) => i + 1))
  await page.locator('.events-tools select').selectOption('item.delta')
  const deltas = await page.locator('ol.events li:not([hidden]) .ev-text').allTextContents()
  assert.equal(deltas.length, 2000)
  deltas.forEach((text, i) => assert.match(text, new RegExp(`^itm_\\d+ ${i}:\\d+;$`), `delta ${i}`))
  assert.equal(await page.locator('.tabs .count').textContent(), String(info.eventCount))

  // Opening a row reads that event whole from /v1.
  await page.locator('ol.events li[data-seq="42"] summary').click()
  const raw = JSON.parse(await page.locator('ol.events li[data-seq="42"] pre').filter({ hasNotText: 'loading' }).textContent())
  assert.equal(raw.sequence, 42)
  assert.equal(raw.type, 'item.delta')

  page.clean()
  await daemon.stop()
})

test('a question is answered and permissions are replied to by clicking, and the agent goes on', async (t) => {
  const daemon = await startDaemon(t)
  const browser = await launchBrowser(t)
  await daemon.v1('POST', 'sessions/steer', { agent: 'mock', permissionMode: 'default', maxCredits: 100 })
  const page = await openPage(browser, `${daemon.url}/ui/#/sessions/steer`)
  await page.locator('.conn[data-state="live"]').waitFor()
  const prompt = async (text) => {
    await page.getByRole('textbox', { name: 'Prompt' }).fill(text)
    await page.getByRole('textbox', { name: 'Prompt' }).press('Enter')
  }

  // A question with options: one choice, then several.
  await prompt('ask')
  let form = page.locator('form.question.is-waiting')
  await form.waitFor()
  await page.locator('.waiting', { hasText: '1 question' }).waitFor()
  await form.locator('label.option', { hasText: 'vitest' }).click()
  await form.locator('label.option', { hasText: 'unit' }).click()
  await form.locator('label.option', { hasText: 'e2e' }).click()
  await form.getByRole('button', { name: 'Answer' }).click()
  await waitFor('the agent going on', async () => (await agentTexts(page)).includes('You chose: vitest; unit, e2e'))
  await page.locator('section.question .chip', { hasText: 'e2e' }).waitFor()
  assert.equal(await page.locator('.waiting').isHidden(), true)

  // An answer of one's own.
  await prompt('ask')
  form = page.locator('form.question.is-waiting')
  await form.waitFor()
  await form.locator('fieldset').first().getByRole('textbox').fill('bun')
  await form.locator('label.option', { hasText: 'snapshot' }).click()
  await form.getByRole('button', { name: 'Answer' }).click()
  await waitFor('the free answer taken', async () => (await agentTexts(page)).includes('You chose: bun; snapshot'))

  // Permissions: the edit shows its diff and is allowed once; the command shows in full and
  // is rejected.
  await prompt('gated')
  let card = page.locator('section.permission.is-waiting')
  await card.waitFor()
  assert.equal(await card.locator('.prompt-title').textContent(), 'Write gated.txt')
  assert.equal(await card.locator('.diff .d-add .code').textContent(), 'gated')
  await card.locator('button[data-reply="once"]').click()
  card = page.locator('section.permission.is-waiting', { hasText: 'gated-ok' })
  await card.waitFor()
  assert.equal(await card.locator('pre.cmd').textContent(), '$ echo gated-ok > gated-cmd.txt')
  await screenshot(page, 'session.png')
  await screenshot(page, 'session-full.png', { fullPage: true })
  await card.locator('button[data-reply="reject"]').click()
  await waitFor('the agent done', async () => (await agentTexts(page)).includes('Wrote gated.txt: yes; ran the command: no.'))
  assert.ok(fs.existsSync(path.join(daemon.work, 'gated.txt')), 'the allowed edit happened')
  assert.ok(!fs.existsSync(path.join(daemon.work, 'gated-cmd.txt')), 'the rejected command did not run')
  await page.locator('section.permission.is-accept .outcome', { hasText: 'Allowed by you' }).waitFor()
  await page.locator('section.permission.is-reject .outcome', { hasText: 'Rejected by you' }).waitFor()
  // The tool call now shows the diff its result reports.
  await page.locator('.tool .diff-file', { hasText: 'gated.txt' }).first().waitFor()
  await waitFor('three completed turns', async () => (await page.locator('.turn-head .badge[data-status="completed"]').count()) === 3)
  await page.locator('.s-stats .badge[data-status="idle"]').waitFor()
  await page.locator('.s-stats', { hasText: 'budget 100 cr, 88 left' }).waitFor()

  await page.emulateMedia({ colorScheme: 'dark' })
  await screenshot(page, 'session-dark.png')
  await page.setViewportSize({ width: 390, height: 844 })
  assert.ok(await fitsWidth(page), 'the session page fits a phone-wide screen')
  await screenshot(page, 'session-phone.png')

  page.clean()
  await daemon.stop()
})

test('a turn is cancelled, the session terminated and deleted from the page', async (t) => {
  const daemon = await startDaemon(t)
  const browser = await launchBrowser(t)
  await daemon.v1('POST', 'sessions/stop-me', { agent: 'mock' })
  await daemon.v1('POST', 'sessions/stop-me/messages', { message: 'fail' })
  await daemon.v1('POST', 'sessions/stop-me/messages', { message: 'hang' })
  const page = await openPage(browser, `${daemon.url}/ui/#/sessions/stop-me`)
  page.on('dialog', (d) => d.accept())

  // The failed turn says why, after what happened in it.
  const failed = page.locator('.blk-turn', { has: page.locator('.badge[data-status="failed"]') })
  await failed.locator('.blk-foot .turn-failure', { hasText: 'the agent exited with status 3' }).waitFor()
  await failed.locator('.callout.err', { hasText: 'Codebuff backend unreachable (mock failure)' }).waitFor()
  await failed.locator('.turn-failure summary', { hasText: 'Agent stderr' }).click()
  await failed.locator('.turn-failure pre', { hasText: 'mock-agent: giving up' }).waitFor()

  await page.locator('.s-stats .badge[data-status="running"]').waitFor()
  await page.getByRole('button', { name: 'Cancel turn' }).click()
  await page.locator('.turn-head .badge[data-status="cancelled"]').waitFor()
  await page.locator('.s-stats .badge[data-status="idle"]').waitFor()

  await page.getByRole('button', { name: 'Terminate' }).click()
  await page.locator('.callout.ended', { hasText: 'terminated by daemon' }).waitFor()
  await page.locator('.s-stats .badge[data-status="ended"]').waitFor()
  assert.equal(await page.getByRole('textbox', { name: 'Prompt' }).isDisabled(), true)
  assert.equal((await daemon.v1('GET', 'sessions/stop-me')).status, 'ended')

  await page.getByRole('button', { name: 'Delete' }).click()
  await page.waitForURL(/#\/$/)
  const resp = await fetch(`${daemon.url}/v1/sessions/stop-me`)
  assert.equal(resp.status, 404)
  page.clean()
  await daemon.stop()
})

test('a token-protected daemon asks for the token once per tab and gets it as a header only', async (t) => {
  const token = 'ui-test-token-5d1f'
  const daemon = await startDaemon(t, { token })
  const browser = await launchBrowser(t)
  await daemon.v1('POST', 'sessions/guarded', { agent: 'mock', title: 'Behind a token' })
  const requests = []
  browser.on('request', (r) => requests.push({ url: r.url(), auth: r.headers().authorization ?? null }))

  const page = await openPage(browser, `${daemon.url}/ui/`)
  const dialog = page.locator('#token-dialog')
  await dialog.locator('#token-input').waitFor()
  assert.equal(await dialog.getAttribute('open'), '')
  await dialog.locator('#token-input').fill('not-the-token')
  await dialog.getByRole('button', { name: 'Connect' }).click()
  await dialog.locator('#token-why', { hasText: 'not accepted' }).waitFor()
  await dialog.locator('#token-input').fill(token)
  await dialog.getByRole('button', { name: 'Connect' }).click()
  await page.locator('tr[data-id="guarded"]').waitFor()
  assert.equal(await dialog.isHidden(), true)

  // Open the session (SSE included), then reload: the tab keeps the token.
  await page.locator('tr[data-id="guarded"] a.name').click()
  await page.locator('.conn[data-state="live"]').waitFor()
  await page.reload()
  await page.locator('.conn[data-state="live"]').waitFor()
  assert.equal(await dialog.isHidden(), true, 'not asked again in this tab')
  assert.equal(await page.evaluate(() => document.cookie), '')
  assert.equal(await page.evaluate(() => sessionStorage.getItem('codebuffd.token')), token)

  for (const r of requests) assert.ok(!r.url.includes(token), `the token in a URL: ${r.url}`)
  const api = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/') && !r.url.endsWith('/v1/health'))
  const sse = api.filter((r) => r.url.includes('/events/sse'))
  assert.ok(sse.length >= 2, 'the stream was opened before and after the reload')
  assert.ok(sse.every((r) => r.auth === `Bearer ${token}`), JSON.stringify(sse))

  // Another tab has no token until it is typed there.
  const other = await openPage(browser, `${daemon.url}/ui/`)
  await other.locator('#token-dialog #token-input').waitFor()

  page.clean()
  await daemon.stop()
})

test('agent text and prompts containing HTML are shown as text', async (t) => {
  const daemon = await startDaemon(t)
  const browser = await launchBrowser(t)
  const evil =
    'echo <script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2"> **bold** [x](javascript:window.__pwned=3)'
  await daemon.v1('POST', 'sessions/xss', { agent: 'mock', title: '<b onmouseover=alert(1)>title</b>' })
  await daemon.v1('POST', 'sessions/xss/messages', { message: evil })
  await waitStatus(daemon, 'xss', ['idle'])

  const page = await openPage(browser, `${daemon.url}/ui/`)
  await page.locator('tr[data-id="xss"] a.name', { hasText: '<b onmouseover=alert(1)>title</b>' }).waitFor()
  assert.equal(await page.locator('tr[data-id="xss"] b').count(), 0)

  await page.locator('tr[data-id="xss"] a.name').click()
  await waitFor('the agent text', async () => (await agentTexts(page)).length === 1)
  const [text] = await agentTexts(page)
  assert.ok(text.includes('<script>window.__pwned = 1</script>'), text)
  assert.ok(text.includes('<img src=x onerror="window.__pwned = 2">'), text)
  assert.equal(await page.locator('#timeline .msg-agent strong').textContent(), 'bold', 'Markdown still applies')
  assert.equal(await page.locator('#timeline script, #timeline img, #timeline [onerror]').count(), 0)
  assert.equal(await page.locator('#timeline a[href^="javascript"]').count(), 0)
  assert.equal(await page.locator('#timeline .msg-user .plain').textContent(), evil, 'the prompt as typed')
  assert.equal(await page.evaluate(() => window.__pwned), undefined)
  page.clean()

  // The page's CSP requires Trusted Types: no code in it can hand a string to an HTML sink.
  const sink = await page.evaluate(() => {
    try {
      document.body.insertAdjacentHTML('beforeend', '<b>injected</b>')
      return 'accepted'
    } catch (e) {
      return e.name
    }
  })
  assert.equal(sink, 'TypeError')
  assert.match(page.problems.join(), /requires 'TrustedHTML' assignment/)
  await daemon.stop()
})
