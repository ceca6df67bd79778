// Turns the SDK's callbacks into the stream-json events of the contract (spec §2, §2.3).
//
// * handleEvent: every PrintModeEvent is printed as-is; `start` gains `sessionId`.
// * handleStreamChunk:
//     "text"                                          → {type:"text_delta", text}
//     {type:"subagent_chunk", agentId, chunk}          → {type:"text_delta", text, agentId}
//     {type:"reasoning_chunk", chunk, agentId, ancestorRunIds}
//                                                      → {type:"reasoning_delta", text, runId, ancestorRunIds}
//   (in SDK 0.10.7 the reasoning chunk's `agentId` is the run id.)
// * File-edit noise: after the model stream of a step has ended, the SDK's write_file /
//   str_replace handler writes "\n" (or "No changes to existing files.\n" when every edit of the
//   step failed) to the stream-chunk channel, once per step, between that step's tool_call
//   events and its first tool_result. These strings never become part of a `text` event, so
//   they are dropped — but only when they are exactly those strings and the previous thing
//   emitted for the same agent was a tool_call or tool_result.

export const FILE_EDIT_NOISE = new Set(['\n', 'No changes to existing files.\n'])

const ROOT = '<root>'

export class EventTranslator {
  /**
   * @param {object} opts
   * @param {(event: object) => void} opts.emit      writes one event
   * @param {string} opts.sessionId                   announced on `start`
   * @param {(event: object) => void} [opts.onToolCall] observes printed tool_call events
   * @param {(msg: string) => void} [opts.log]        diagnostics (stderr)
   */
  constructor({ emit, sessionId, onToolCall = () => {}, log = () => {} }) {
    this.emit = emit
    this.log = log
    this.sessionId = sessionId
    this.onToolCall = onToolCall
    this.lastKindByAgent = new Map() // agent key -> 'tool' | 'text' | 'other'
    this.seen = new Set() // event types printed
    this.handleEvent = (event) => this.#event(event)
    this.handleStreamChunk = (chunk) => this.#chunk(chunk)
  }

  /** True once an event of this type has been printed. */
  saw(type) {
    return this.seen.has(type)
  }

  #print(event) {
    this.seen.add(event.type)
    this.emit(event)
  }

  #event(event) {
    if (!event || typeof event !== 'object') return
    if (event.type === 'start') {
      this.#print({ ...event, sessionId: this.sessionId })
      return
    }
    if (event.type === 'tool_call' || event.type === 'tool_result') {
      // Root tool events carry agentId "main-agent"-style ids or none; subagent tool events carry
      // parentAgentId = the subagent's own id (SDK quirk), which is what its chunks carry as agentId.
      const key = this.#agentKeyOfToolEvent(event)
      this.lastKindByAgent.set(key, 'tool')
      if (event.type === 'tool_call') this.onToolCall(event)
    } else if (event.type === 'text') {
      this.lastKindByAgent.set(event.agentId ?? ROOT, 'text')
    }
    this.#print(event)
  }

  /**
   * Which agent a tool event belongs to, keyed like stream chunks (ROOT or the subagent id).
   * Root events have no parentAgentId. A subagent's tool_call has agentId = the subagent and
   * parentAgentId = its parent; its tool_result has only parentAgentId = the subagent's own id.
   */
  #agentKeyOfToolEvent(event) {
    if (event.parentAgentId === undefined) return ROOT
    if (event.type === 'tool_call') return event.agentId ?? event.parentAgentId
    return event.parentAgentId
  }

  #isNoise(agentKey, text) {
    if (!FILE_EDIT_NOISE.has(text) || this.lastKindByAgent.get(agentKey) !== 'tool') return false
    this.log(`dropped file-edit noise chunk ${JSON.stringify(text)}${agentKey === ROOT ? '' : ` (agent ${agentKey})`}`)
    return true
  }

  #chunk(chunk) {
    if (typeof chunk === 'string') {
      if (chunk === '') return
      if (this.#isNoise(ROOT, chunk)) return
      this.lastKindByAgent.set(ROOT, 'text')
      this.#print({ type: 'text_delta', text: chunk })
      return
    }
    if (!chunk || typeof chunk !== 'object') return
    if (chunk.type === 'subagent_chunk') {
      if (typeof chunk.chunk !== 'string' || chunk.chunk === '') return
      if (this.#isNoise(chunk.agentId, chunk.chunk)) return
      this.lastKindByAgent.set(chunk.agentId, 'text')
      this.#print({ type: 'text_delta', text: chunk.chunk, agentId: chunk.agentId })
      return
    }
    if (chunk.type === 'reasoning_chunk') {
      if (typeof chunk.chunk !== 'string' || chunk.chunk === '') return
      this.#print({
        type: 'reasoning_delta',
        text: chunk.chunk,
        runId: chunk.agentId,
        ancestorRunIds: Array.isArray(chunk.ancestorRunIds) ? chunk.ancestorRunIds : [],
      })
      return
    }
    // Unknown chunk shapes (future SDKs): pass through untouched rather than lose them.
    if (typeof chunk.type === 'string') this.#print(chunk)
  }
}
