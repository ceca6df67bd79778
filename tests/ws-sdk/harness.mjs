// Test harness of the @codebuff/sdk 0.3.13 suite: points the SDK at a daemon, records every
// frame its WebSocket client sends and receives, and checks the received ones against the
// schemas bundled in the SDK's own dist.
//
// * The SDK reads NEXT_PUBLIC_CODEBUFF_BACKEND_URL once, when it is first imported, and builds
//   `ws://<that>/ws` from it (`getWebsocketUrl`, plain ws:// for 127.0.0.1): so each test file
//   starts its daemon first, then imports the SDK (`loadSdk`). The SDK sends no header of its
//   own at the upgrade; the daemon's token travels as the URL's user info, which the `ws`
//   library turns into `Authorization: Basic` (the daemon takes the token as Basic's password).
// * The schemas (SERVER_ACTION_SCHEMA, PromptResponseSchema, SessionStateSchema) are not
//   exported by the package: `loadSchemas` copies its dist/index.mjs beside itself with one
//   more `export` line, at test time, and imports that copy. Nothing of the SDK is kept here.
// * Frames are recorded by wrapping `emit` and `send` of the `ws` library's WebSocket class,
//   the one the SDK's client uses; the client's own code runs unchanged.

import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import assert from 'node:assert/strict'
import { WebSocket } from 'ws'

export { fakeBackend, sessionMembers, startDaemon, tempDir, waitFor } from '../acp-http/harness.mjs'

const require = createRequire(import.meta.url)
/** The SDK's ESM bundle. */
const SDK_DIST = path.join(path.dirname(require.resolve('@codebuff/sdk/package.json')), 'dist/index.mjs')
/** The schemas the suite checks against, by the names they have in the bundle. */
const SCHEMAS = ['SERVER_ACTION_SCHEMA', 'CLIENT_ACTION_SCHEMA', 'PromptResponseSchema', 'SessionStateSchema']

/**
 * Points the SDK at `daemon` (its token as user info) and imports it. Call once per process,
 * after the daemon listens.
 */
export async function loadSdk(daemon) {
  const { host } = new URL(daemon.url)
  process.env.NEXT_PUBLIC_CODEBUFF_BACKEND_URL = `codebuff:${daemon.token}@${host}/v1`
  return import('@codebuff/sdk')
}

/** The SDK's own zod schemas, extracted from its dist at test time. */
export async function loadSchemas() {
  const source = fs.readFileSync(SDK_DIST, 'utf8')
  for (const name of SCHEMAS) {
    assert.ok(source.includes(`var ${name} =`), `the SDK's dist defines ${name}`)
  }
  const copy = path.join(path.dirname(SDK_DIST), `.schemas-${process.pid}.mjs`)
  fs.writeFileSync(copy, `${source}\nexport { ${SCHEMAS.join(', ')} };\n`)
  try {
    return await import(pathToFileURL(copy).href)
  } finally {
    fs.rmSync(copy, { force: true })
  }
}

/** Every frame of the SDK's WebSocket connections since the last `clear()`. */
export class FrameLog {
  constructor() {
    this.received = []
    this.sent = []
    const log = this
    const { emit, send } = WebSocket.prototype
    WebSocket.prototype.emit = function (event, ...args) {
      if (event === 'message') log.received.push(JSON.parse(args[0].toString()))
      return emit.call(this, event, ...args)
    }
    WebSocket.prototype.send = function (data, ...rest) {
      log.sent.push(JSON.parse(data.toString()))
      return send.call(this, data, ...rest)
    }
  }

  clear() {
    this.received = []
    this.sent = []
  }

  /** The `data` of the received actions of type `kind`. */
  actions(kind) {
    return this.received.filter((m) => m.type === 'action' && m.data.type === kind).map((m) => m.data)
  }

  /** The `data` of the sent actions of type `kind`. */
  sentActions(kind) {
    return this.sent.filter((m) => m.type === 'action' && m.data.type === kind).map((m) => m.data)
  }
}

/**
 * Checks every received frame: an `action` must pass the SDK's SERVER_ACTION_SCHEMA (a
 * `prompt-response` also its PromptResponseSchema); an `ack` must carry no nulls (its txid a
 * number, `error` a string only on a failed one). Returns how many were checked.
 */
export function assertValidServerMessages(schemas, frames) {
  assert.ok(frames.length > 0, 'frames were received')
  for (const frame of frames) {
    if (frame.type === 'action') {
      const parsed = schemas.SERVER_ACTION_SCHEMA.safeParse(frame.data)
      assert.ok(parsed.success, `${JSON.stringify(frame.data).slice(0, 300)}: ${JSON.stringify(parsed.error?.issues)}`)
      if (frame.data.type === 'prompt-response') {
        const response = schemas.PromptResponseSchema.safeParse(frame.data)
        assert.ok(response.success, JSON.stringify(response.error?.issues))
      }
    } else {
      assert.equal(frame.type, 'ack', `a server message is an ack or an action: ${JSON.stringify(frame)}`)
      assert.equal(typeof frame.txid, 'number', `an ack of the SDK's message has its txid: ${JSON.stringify(frame)}`)
      assert.equal(typeof frame.success, 'boolean')
      if (frame.success) assert.ok(!('error' in frame), `no error on a successful ack: ${JSON.stringify(frame)}`)
      else assert.equal(typeof frame.error, 'string')
    }
    for (const [key, value] of Object.entries(frame.type === 'ack' ? frame : frame.data)) {
      if (key !== 'next_quota_reset') assert.notEqual(value, null, `${key} is not null in ${JSON.stringify(frame).slice(0, 200)}`)
    }
  }
  return frames.length
}

/** GET `path` of the daemon's own /v1 API. */
export async function v1(daemon, path) {
  const resp = await fetch(`${daemon.url}${path}`, {
    headers: { authorization: `Bearer ${daemon.token}` },
  })
  assert.equal(resp.status, 200, `GET ${path}`)
  return resp.json()
}
