// Run-state persistence: one JSON file per session id, so `--continue ID` works across processes.
//
// The SDK has no server-side session: resuming means passing the previous run's whole RunState
// back as `previousRun`. Files live under the state directory:
//   $CODEBUFF_STATE_DIR, else $XDG_STATE_HOME/codebuffd/codebuff, else ~/.local/state/codebuffd/codebuff
// and are written atomically (temporary file + rename). File format (ours, versioned):
//   {"version":1,"sessionId":"…","savedAt":"…","runState":{sessionState?,output}}

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import crypto from 'node:crypto'

const FORMAT_VERSION = 1

/** Session ids become file names: allow only a safe alphabet (uuids pass). */
const SESSION_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

export function isValidSessionId(id) {
  return typeof id === 'string' && SESSION_ID_RE.test(id) && !id.includes('..')
}

/** The state directory for this environment (absolute). */
export function resolveStateDir(env = process.env) {
  if (env.CODEBUFF_STATE_DIR) return path.resolve(env.CODEBUFF_STATE_DIR)
  const base = env.XDG_STATE_HOME ? path.resolve(env.XDG_STATE_HOME) : path.join(os.homedir(), '.local', 'state')
  return path.join(base, 'codebuffd', 'codebuff')
}

export function newSessionId() {
  return crypto.randomUUID()
}

export class StateStore {
  constructor(dir) {
    this.dir = dir
  }

  fileFor(sessionId) {
    if (!isValidSessionId(sessionId)) throw new Error(`invalid session id ${JSON.stringify(sessionId)}`)
    return path.join(this.dir, `${sessionId}.json`)
  }

  exists(sessionId) {
    return isValidSessionId(sessionId) && fs.existsSync(this.fileFor(sessionId))
  }

  /** Returns the saved RunState, or null when the session is unknown. Throws on a corrupt file. */
  load(sessionId) {
    if (!isValidSessionId(sessionId)) return null
    let text
    try {
      text = fs.readFileSync(this.fileFor(sessionId), 'utf8')
    } catch (error) {
      if (error.code === 'ENOENT') return null
      throw error
    }
    const record = JSON.parse(text)
    if (!record || typeof record !== 'object' || record.version !== FORMAT_VERSION || !record.runState) {
      throw new Error(`unrecognised state file format in ${this.fileFor(sessionId)}`)
    }
    return record.runState
  }

  /** Atomically writes the run state of a session. */
  save(sessionId, runState) {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 })
    const file = this.fileFor(sessionId)
    const tmp = `${file}.tmp-${process.pid}-${crypto.randomBytes(4).toString('hex')}`
    const record = {
      version: FORMAT_VERSION,
      sessionId,
      savedAt: new Date().toISOString(),
      runState,
    }
    const fd = fs.openSync(tmp, 'w', 0o600)
    try {
      fs.writeSync(fd, JSON.stringify(record))
      fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
    try {
      fs.renameSync(tmp, file)
    } catch (error) {
      fs.rmSync(tmp, { force: true })
      throw error
    }
  }
}
