// Permission requests (contract §5) for permissionMode "ask".
//
// @codebuff/sdk 0.10.7 runs client tools through `overrideTools[toolName](input)`: it calls the
// override with the tool's *client* input only — no toolCallId — and only after the call's
// `tool_call` event has been delivered to handleEvent. So, like the ask_user relay, the adapter
// announces every printed tool_call of a gated tool here and the override claims the matching
// announcement (same tool, same path/command; else the oldest unclaimed one of that tool) to learn
// its toolCallId and the model's input. Then it prints
//   {"type":"permission_request","requestId","toolCallId","toolName","kind","title","command"?,
//    "paths","input"}
// and blocks until a stdin line {"type":"permission_reply","requestId","decision":"allow"|"reject",
// "message"?} arrives. stdin EOF, or the run being aborted, rejects every open request. Nothing of
// the tool runs before the answer; on "allow" the caller runs the SDK's own implementation.
//
// The client inputs (what the override sees) of the gated tools:
//   write_file / str_replace  {type:"file"|"patch", path, content}  (computed by the SDK: the new
//                             content, or a unified diff of the change)
//   apply_patch               the model's input {operation:{type, path, diff?}}
//   run_terminal_command      {command, mode, process_type, timeout_seconds, cwd?}

import crypto from 'node:crypto'

/** The tools of SDK 0.10.7 that change files or run code on the client. */
export const GATED_TOOLS = ['write_file', 'str_replace', 'apply_patch', 'run_terminal_command']

export const REJECTION_PREFIX = 'The user rejected this tool call'

/** The denial tool result the model sees. */
export function rejectionResult(message) {
  const text = typeof message === 'string' && message.trim() ? `${REJECTION_PREFIX}: ${message.trim()}` : `${REJECTION_PREFIX}.`
  return [{ type: 'json', value: { errorMessage: text } }]
}

/** The path (or command) that identifies a call, from either the tool_call input or the client input. */
function keyOf(toolName, input) {
  if (!input || typeof input !== 'object') return null
  if (toolName === 'run_terminal_command') return typeof input.command === 'string' ? input.command : null
  if (toolName === 'apply_patch') return typeof input.operation?.path === 'string' ? input.operation.path : null
  return typeof input.path === 'string' ? input.path : null
}

/** kind, title, command, paths of a request. */
export function describeRequest(toolName, modelInput, clientInput) {
  const input = modelInput ?? clientInput ?? {}
  if (toolName === 'run_terminal_command') {
    const command = String(input.command ?? clientInput?.command ?? '')
    const oneLine = command.replace(/\s*\n\s*/g, ' ')
    const shown = oneLine.length > 80 ? `${oneLine.slice(0, 79)}…` : oneLine
    const background = (input.process_type ?? clientInput?.process_type) === 'BACKGROUND'
    return { kind: 'execute', title: `Run \`${shown}\`${background ? ' in the background' : ''}`, command, paths: [] }
  }
  if (toolName === 'apply_patch') {
    const op = input.operation ?? {}
    const filePath = String(op.path ?? '')
    if (op.type === 'delete_file') return { kind: 'delete', title: `Delete ${filePath}`, paths: [filePath] }
    return { kind: 'edit', title: `${op.type === 'create_file' ? 'Create' : 'Edit'} ${filePath}`, paths: [filePath] }
  }
  const filePath = String(input.path ?? clientInput?.path ?? '')
  const verb = toolName === 'write_file' ? 'Write' : 'Edit'
  return { kind: 'edit', title: `${verb} ${filePath}`, paths: [filePath] }
}

export class PermissionRelay {
  /**
   * @param {object} opts
   * @param {(event: object) => void} opts.emit   prints one event
   * @param {AbortSignal} [opts.signal]            the run's abort signal: open requests are rejected
   * @param {(msg: string) => void} [opts.log]
   */
  constructor({ emit, signal, log = () => {} }) {
    this.emit = emit
    this.log = log
    this.announced = [] // {toolCallId, toolName, key, input, claimed}
    this.waiters = new Map() // requestId -> resolve(reply | null)
    this.closed = null // why no more answers can come
    if (signal) {
      const onAbort = () => this.#closeAll('run aborted')
      if (signal.aborted) onAbort()
      else signal.addEventListener('abort', onAbort, { once: true })
    }
  }

  /** Records a printed tool_call (any tool; only gated ones are kept). */
  announce(event) {
    if (!GATED_TOOLS.includes(event?.toolName)) return
    this.announced.push({
      toolCallId: event.toolCallId,
      toolName: event.toolName,
      key: keyOf(event.toolName, event.input),
      input: event.input,
      claimed: false,
    })
  }

  #claim(toolName, clientInput) {
    const key = keyOf(toolName, clientInput)
    const match =
      this.announced.find((a) => !a.claimed && a.toolName === toolName && key !== null && a.key === key) ??
      this.announced.find((a) => !a.claimed && a.toolName === toolName)
    if (match) match.claimed = true
    return match
  }

  /** Feeds one parsed stdin message of type permission_reply. */
  acceptMessage(msg) {
    if (typeof msg.requestId !== 'string') {
      this.log('ignored permission_reply without a requestId')
      return
    }
    if (msg.decision !== 'allow' && msg.decision !== 'reject') {
      this.log(`ignored permission_reply for ${msg.requestId}: decision must be "allow" or "reject"`)
      return
    }
    const waiter = this.waiters.get(msg.requestId)
    if (!waiter) {
      this.log(`ignored permission_reply for unknown or answered request ${msg.requestId}`)
      return
    }
    this.waiters.delete(msg.requestId)
    waiter(msg)
  }

  /** stdin reached EOF: open and future requests are rejected. */
  endOfInput() {
    this.#closeAll('stdin closed')
  }

  #closeAll(why) {
    this.closed = why
    if (this.waiters.size > 0) this.log(`rejecting ${this.waiters.size} open permission request(s): ${why}`)
    for (const [id, resolve] of this.waiters) {
      this.waiters.delete(id)
      resolve(null)
    }
  }

  /**
   * Asks for one tool call. Resolves {allowed: true} or {allowed: false, message}.
   * @param {string} toolName
   * @param {object} clientInput the override's input
   */
  async ask(toolName, clientInput) {
    const announced = this.#claim(toolName, clientInput)
    if (!announced) this.log(`${toolName} called without a matching tool_call event; asking without a toolCallId`)
    const modelInput = announced?.input ?? clientInput
    const requestId = `perm-${crypto.randomUUID()}`
    const { kind, title, command, paths } = describeRequest(toolName, announced?.input, clientInput)
    const request = {
      type: 'permission_request',
      requestId,
      toolCallId: announced?.toolCallId ?? null,
      toolName,
      kind,
      title,
      ...(command !== undefined && { command }),
      paths,
      input: modelInput,
    }
    if (this.closed) {
      this.log(`permission request for ${toolName} rejected at once: ${this.closed}`)
      return { allowed: false, message: this.closed }
    }
    const reply = await new Promise((resolve) => {
      this.waiters.set(requestId, resolve)
      this.emit(request)
    })
    if (!reply) return { allowed: false, message: this.closed ?? 'no answer' }
    if (reply.decision === 'allow') return { allowed: true }
    return { allowed: false, message: typeof reply.message === 'string' ? reply.message : '' }
  }
}
