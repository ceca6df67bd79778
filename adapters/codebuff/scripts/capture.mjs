#!/usr/bin/env node
// Captures the fixtures of record: runs the real adapter (real @codebuff/sdk) against the fake
// backend for each scenario and writes its stdout verbatim to fixtures/codebuff/<name>.jsonl,
// plus fixtures/codebuff/captures.json (exit codes, arguments, stdin lines, notes).
//
//   node adapters/codebuff/scripts/capture.mjs [NAME…]          capture (all by default)
//   node adapters/codebuff/scripts/capture.mjs --check [NAME…]  capture to a temp dir and compare
//                                                               with the committed fixtures after
//                                                               normalising volatile values
// Work directories are at fixed paths (/tmp/codebuffd-capture/<name>/work, wiped first) so paths
// inside the output are stable.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { scenarios } from '../test/scenarios.mjs'
import { startBackend, prepareWorkspace, adapterEnv, runAdapter } from '../test/harness.mjs'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const REPO_ROOT = path.resolve(HERE, '..', '..', '..')
const FIXTURES_DIR = path.join(REPO_ROOT, 'fixtures', 'codebuff')
const CAPTURE_ROOT = '/tmp/codebuffd-capture'
const MANIFEST = 'captures.json'

/** Scenarios captured by default (in this order). */
export const CAPTURED = Object.keys(scenarios).filter((name) => scenarios[name].capture !== false)

function log(message) {
  process.stderr.write(`capture: ${message}\n`)
}

/** Runs one adapter invocation of a scenario and returns its manifest entry + stdout. */
async function captureRun({ name, scenario, backend, workspace, prompt, extraArgs = [] }) {
  const argv = ['--cwd', workspace.workDir, ...(scenario.args ?? []), ...extraArgs]
  const result = await runAdapter({
    argv,
    prompt,
    env: adapterEnv({ backendUrl: backend.url, workspace, extra: scenario.env }),
    answers: scenario.answers ?? [],
    timeoutMs: 60_000,
  })
  if (result.stderr.trim()) {
    fs.writeFileSync(path.join(workspace.root, `${name}.stderr.txt`), result.stderr)
  }
  const entry = {
    exitCode: result.exitCode,
    args: ['--stream-json', ...argv, prompt],
    env: scenario.env ?? {},
    stdin: result.stdinLines,
    notes: scenario.description,
  }
  return { entry, stdout: result.stdout, events: result.events }
}

/** Captures one scenario; returns {files: {name: stdout}, manifest: {name: entry}, problems}. */
async function captureScenario(name) {
  const scenario = scenarios[name]
  if (!scenario) throw new Error(`unknown scenario ${name}`)
  const workspace = prepareWorkspace(path.join(CAPTURE_ROOT, name), scenario.files ?? {})
  const backend = await startBackend(name)
  const files = {}
  const manifest = {}
  const problems = []
  try {
    if (scenario.continueWith) {
      const first = await captureRun({ name: `${name}_first`, scenario, backend, workspace, prompt: scenario.prompt })
      files[`${name}_first`] = first.stdout
      manifest[`${name}_first`] = { ...first.entry, notes: `${scenario.description} (first run)` }
      const sessionId = first.events.find((e) => e.type === 'start')?.sessionId
      if (!sessionId) throw new Error(`${name}: first run printed no start.sessionId`)
      const second = await captureRun({
        name,
        scenario,
        backend,
        workspace,
        prompt: scenario.continueWith.prompt,
        extraArgs: ['--continue', sessionId],
      })
      files[name] = second.stdout
      manifest[name] = { ...second.entry, notes: `${scenario.description} (--continue run)` }
      problems.push(...(await checkContinue(backend, second.events, scenario)))
    } else {
      const run = await captureRun({ name, scenario, backend, workspace, prompt: scenario.prompt })
      files[name] = run.stdout
      manifest[name] = run.entry
    }
    for (const [key, entry] of Object.entries(manifest)) {
      if (scenario.expectedExit !== undefined && entry.exitCode !== scenario.expectedExit) {
        problems.push(`${key}: exit ${entry.exitCode}, expected ${scenario.expectedExit}`)
      }
    }
  } finally {
    await backend.stop()
  }
  return { files, manifest, problems }
}

/** The --continue run must start with history and send the first turn's prompt to the model. */
async function checkContinue(backend, events, scenario) {
  const problems = []
  const start = events.find((e) => e.type === 'start')
  if (!(start?.messageHistoryLength > 0)) problems.push('continue: start.messageHistoryLength is not > 0')
  const chats = (await backend.requests()).filter((r) => r.path === '/api/v1/chat/completions')
  const last = chats[chats.length - 1]
  if (!last || !JSON.stringify(last.body?.messages ?? []).includes(scenario.prompt)) {
    problems.push("continue: the second run's chat request does not carry the first prompt")
  }
  return problems
}

// ---- normalisation for --check ---------------------------------------------------------------

const UUID_RE = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi
const ISO_TS_RE = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g
/** Fields whose values are generated per run by the SDK (not controlled by the fake backend). */
const VOLATILE_ID_FIELDS = new Set(['toolCallId', 'agentId', 'parentAgentId', 'sessionId'])
const STABLE_AGENT_IDS = new Set(['main-agent', 'base2', 'base2-lite', 'base2-max', 'base2-plan'])

function collectVolatile(value, out) {
  if (Array.isArray(value)) {
    for (const v of value) collectVolatile(v, out)
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (VOLATILE_ID_FIELDS.has(k) && typeof v === 'string' && !STABLE_AGENT_IDS.has(v)) out.add(v)
      else collectVolatile(v, out)
    }
  }
}

/** Replaces per-run ids (by first appearance), uuids, timestamps and epoch-ms fields. */
export function normalize(text) {
  const volatile = new Set()
  for (const line of text.split('\n')) {
    if (!line.trim()) continue
    try {
      collectVolatile(JSON.parse(line), volatile)
    } catch {
      // not JSON: compared verbatim
    }
  }
  let out = text
  let n = 0
  for (const id of volatile) {
    n += 1
    out = out.split(id).join(`<id-${n}>`)
  }
  const uuids = new Map()
  out = out.replace(UUID_RE, (m) => {
    if (!uuids.has(m)) uuids.set(m, `<uuid-${uuids.size + 1}>`)
    return uuids.get(m)
  })
  out = out.replace(ISO_TS_RE, '<timestamp>')
  out = out.replace(/"(sentAt|timestamp|startTime|createdAt)":\d{10,}/g, '"$1":<epoch-ms>')
  return out
}

function diffLines(expected, actual) {
  const a = expected.split('\n')
  const b = actual.split('\n')
  const lines = []
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (a[i] !== b[i]) {
      lines.push(`  line ${i + 1}:`)
      lines.push(`    committed: ${a[i] ?? '<none>'}`)
      lines.push(`    captured:  ${b[i] ?? '<none>'}`)
    }
  }
  return lines.join('\n')
}

async function main() {
  const argv = process.argv.slice(2)
  const check = argv.includes('--check')
  const names = argv.filter((a) => !a.startsWith('--'))
  const selected = names.length > 0 ? names : CAPTURED
  for (const name of selected) {
    if (!scenarios[name]) {
      log(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(', ')}`)
      process.exit(2)
    }
  }

  const outDir = check ? fs.mkdtempSync(path.join(os.tmpdir(), 'codebuffd-check-')) : FIXTURES_DIR
  fs.mkdirSync(outDir, { recursive: true })
  const manifestPath = path.join(FIXTURES_DIR, MANIFEST)
  const committedManifest = fs.existsSync(manifestPath) ? JSON.parse(fs.readFileSync(manifestPath, 'utf8')) : {}
  const newManifest = { ...committedManifest }
  let failed = false

  for (const name of selected) {
    const started = Date.now()
    const { files, manifest, problems } = await captureScenario(name)
    for (const [fixture, stdout] of Object.entries(files)) {
      const file = path.join(outDir, `${fixture}.jsonl`)
      // Re-capturing must not churn the fixtures of record: when only volatile ids differ,
      // the committed file (and its manifest entry) are kept as they are.
      const same =
        !check &&
        fs.existsSync(file) &&
        normalize(fs.readFileSync(file, 'utf8')) === normalize(stdout) &&
        committedManifest[fixture]?.exitCode === manifest[fixture].exitCode
      if (same) {
        log(`${fixture}.jsonl unchanged (only volatile ids differ); kept`)
        manifest[fixture] = committedManifest[fixture]
      } else {
        fs.writeFileSync(file, stdout)
      }
    }
    Object.assign(newManifest, manifest)
    for (const p of problems) {
      failed = true
      log(`PROBLEM ${p}`)
    }
    log(`${name}: ${Object.keys(files).join(', ')} in ${Date.now() - started} ms`)

    if (check) {
      for (const [fixture, stdout] of Object.entries(files)) {
        const committedFile = path.join(FIXTURES_DIR, `${fixture}.jsonl`)
        if (!fs.existsSync(committedFile)) {
          failed = true
          log(`MISMATCH ${fixture}: no committed fixture ${committedFile}`)
          continue
        }
        const expected = normalize(fs.readFileSync(committedFile, 'utf8'))
        const actual = normalize(stdout)
        if (expected !== actual) {
          failed = true
          // Fixtures captured before the adapter printed `cost` events: say so when that is all.
          const withoutCost = (text) => text.split('\n').filter((line) => !line.startsWith('{"type":"cost",')).join('\n')
          if (withoutCost(expected) === withoutCost(actual)) {
            const added = actual.split('\n').filter((line) => line.startsWith('{"type":"cost",'))
            log(`MISMATCH ${fixture}.jsonl: only the cost events differ (captured: ${added.join(' ') || 'none'})`)
          } else {
            log(`MISMATCH ${fixture}.jsonl (after normalisation):\n${diffLines(expected, actual)}`)
          }
        }
        const want = committedManifest[fixture]?.exitCode
        if (want !== manifest[fixture].exitCode) {
          failed = true
          log(`MISMATCH ${fixture}: exit code ${manifest[fixture].exitCode}, committed ${want}`)
        }
      }
    }
  }

  if (check) {
    fs.rmSync(outDir, { recursive: true, force: true })
    log(failed ? 'check FAILED' : 'check passed: captures match the committed fixtures')
  } else {
    const sorted = Object.fromEntries(Object.keys(newManifest).sort().map((k) => [k, newManifest[k]]))
    fs.writeFileSync(manifestPath, `${JSON.stringify(sorted, null, 2)}\n`)
    log(`wrote ${selected.length} scenario(s) to ${path.relative(process.cwd(), FIXTURES_DIR) || FIXTURES_DIR}`)
  }
  process.exit(failed ? 1 : 0)
}

main().catch((error) => {
  log(`fatal: ${error?.stack ?? error}`)
  process.exit(1)
})
