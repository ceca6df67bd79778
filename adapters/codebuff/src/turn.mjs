// The turn line of `--stdin-turn` (contract §1.1):
//   {"type":"turn","prompt","mode","model","continue","timeoutSeconds","cwd","env","apiKey",
//    "permissionMode","images":[{"path","mime"}]}
// parsed into the same shape parseArgs() gives for the argv form (plus env, apiKey,
// permissionMode, images). Unknown fields are ignored; anything malformed is a UsageError
// (→ invalid_arguments, exit 2).

import { UsageError } from './args.mjs'

const MODES = {
  build: 'default',
  default: 'default',
  free: 'lite',
  lite: 'lite',
  max: 'max',
  plan: 'plan',
}

const isNullish = (v) => v === null || v === undefined

export function parseTurnLine(line) {
  let turn
  try {
    turn = JSON.parse(line)
  } catch {
    throw new UsageError('the turn line is not JSON')
  }
  if (!turn || typeof turn !== 'object' || Array.isArray(turn)) throw new UsageError('the turn line is not a JSON object')
  if (turn.type !== 'turn') throw new UsageError(`the first stdin line must be {"type":"turn",…}, got type ${JSON.stringify(turn.type)}`)

  if (typeof turn.prompt !== 'string') throw new UsageError('turn.prompt must be a string')

  let mode = 'default'
  if (!isNullish(turn.mode)) {
    if (typeof turn.mode !== 'string' || !(turn.mode in MODES)) {
      throw new UsageError(`turn.mode must be one of build, free, lite, max, plan; got ${JSON.stringify(turn.mode)}`)
    }
    mode = MODES[turn.mode]
  }

  const optionalString = (name, value) => {
    if (isNullish(value)) return undefined
    if (typeof value !== 'string' || value === '') throw new UsageError(`turn.${name} must be a non-empty string or null`)
    return value
  }
  const model = optionalString('model', turn.model)
  const continueId = optionalString('continue', turn.continue)
  const cwd = optionalString('cwd', turn.cwd)
  const apiKey = isNullish(turn.apiKey) ? undefined : turn.apiKey
  if (apiKey !== undefined && typeof apiKey !== 'string') throw new UsageError('turn.apiKey must be a string or null')

  let timeoutSeconds
  if (!isNullish(turn.timeoutSeconds)) {
    if (typeof turn.timeoutSeconds !== 'number' || !Number.isFinite(turn.timeoutSeconds) || turn.timeoutSeconds <= 0) {
      throw new UsageError('turn.timeoutSeconds must be a positive number or null')
    }
    timeoutSeconds = turn.timeoutSeconds
  }

  const env = {}
  if (!isNullish(turn.env)) {
    if (typeof turn.env !== 'object' || Array.isArray(turn.env)) throw new UsageError('turn.env must be an object of strings')
    for (const [name, value] of Object.entries(turn.env)) {
      if (typeof value !== 'string') throw new UsageError(`turn.env.${name} must be a string`)
      if (name === '' || name.includes('=') || name.includes('\0') || value.includes('\0')) {
        throw new UsageError(`turn.env has an invalid variable ${JSON.stringify(name)}`)
      }
      env[name] = value
    }
  }

  let permissionMode = 'bypass'
  if (!isNullish(turn.permissionMode)) {
    if (turn.permissionMode !== 'bypass' && turn.permissionMode !== 'ask') {
      throw new UsageError(`turn.permissionMode must be "bypass" or "ask", got ${JSON.stringify(turn.permissionMode)}`)
    }
    permissionMode = turn.permissionMode
  }

  const images = []
  if (!isNullish(turn.images)) {
    if (!Array.isArray(turn.images)) throw new UsageError('turn.images must be an array')
    for (const image of turn.images) {
      if (!image || typeof image !== 'object' || typeof image.path !== 'string' || image.path === '') {
        throw new UsageError('each of turn.images needs a "path"')
      }
      if (!isNullish(image.mime) && typeof image.mime !== 'string') throw new UsageError('turn.images[].mime must be a string')
      images.push({ path: image.path, ...(image.mime ? { mime: image.mime } : {}) })
    }
  }

  return {
    prompt: turn.prompt,
    mode,
    model,
    continueId,
    timeoutSeconds,
    cwd,
    env,
    apiKey,
    permissionMode,
    images,
    streamJson: true,
  }
}
