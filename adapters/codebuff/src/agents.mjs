// Which Codebuff agent a run uses: mode flags → agent ids and cost modes, and the --model override.
//
// Like the real Codebuff CLI (cli/src/utils/constants.ts AGENT_MODE_TO_ID / AGENT_MODE_TO_COST_MODE),
// the adapter passes the bare id ("base2", …) to client.run(); the SDK, finding no local
// definition, resolves it as "codebuff/<id>" and fetches GET /api/v1/agents/codebuff/<id>/latest
// from the backend. The cost mode travels to the backend as codebuff_metadata.cost_mode.
//
// --model MODEL: the SDK has no per-run model option; a model is a property of the agent
// definition. So the adapter fetches the mode's definition from that same endpoint, replaces
// `model` (and drops provider routing options), and runs it as an inline definition under the
// same id — what the newer CLI does for its model pickers (applySelectedOpenAiModelToRuntimeAgents).
// Only the root agent's model changes; subagents keep theirs.

/** The SDK's baked-in backend origin (WEBSITE_URL in @codebuff/sdk 0.10.7). */
export const CODEBUFF_WEBSITE_URL = 'https://www.codebuff.com'

export const MODE_AGENT_IDS = {
  default: 'base2',
  lite: 'base2-lite',
  max: 'base2-max',
  plan: 'base2-plan',
}

export const MODE_COST_MODES = {
  default: 'normal',
  lite: 'lite',
  max: 'max',
  plan: 'normal',
}

export class AgentFetchError extends Error {
  constructor(message, statusCode) {
    super(message)
    this.name = 'AgentFetchError'
    if (statusCode !== undefined) this.statusCode = statusCode
  }
}

/** Fetches a published agent definition the way the SDK does (fetchAgentFromDatabase). */
export async function fetchAgentDefinition({ agentId, apiKey, fetchImpl = globalThis.fetch }) {
  const url = new URL(`/api/v1/agents/codebuff/${encodeURIComponent(agentId)}/latest`, CODEBUFF_WEBSITE_URL)
  let response
  try {
    response = await fetchImpl(url, { method: 'GET', headers: { Authorization: `Bearer ${apiKey}` } })
  } catch (error) {
    throw new AgentFetchError(`Could not fetch agent ${agentId}: ${error?.message ?? error}`)
  }
  if (response.status === 401 || response.status === 403) {
    throw new AgentFetchError('Authentication failed', response.status)
  }
  if (!response.ok) {
    throw new AgentFetchError(`Could not fetch agent ${agentId}: HTTP ${response.status}`, response.status)
  }
  const body = await response.json().catch(() => null)
  if (!body || typeof body !== 'object' || !body.data || typeof body.data !== 'object') {
    throw new AgentFetchError(`Could not fetch agent ${agentId}: unexpected response`)
  }
  return body.data
}

/**
 * Resolves what to pass to client.run().
 * Returns {agent, costMode, agentDefinitions?, injectedAgentId?}.
 */
export async function resolveAgent({ mode, model, apiKey, fetchImpl, loadLocalAgents, fresh }) {
  const agentId = MODE_AGENT_IDS[mode] ?? MODE_AGENT_IDS.default
  const costMode = MODE_COST_MODES[mode] ?? MODE_COST_MODES.default
  if (!model) return { agent: agentId, costMode }

  const published = await fetchAgentDefinition({ agentId, apiKey, fetchImpl })
  const definition = { ...published, id: agentId, model }
  delete definition.providerOptions
  // run() adds an inline `agent` to agentDefinitions, and any agentDefinitions make the SDK skip
  // its own .agents loading for a fresh session; load those here so --model does not change
  // which local agents exist.
  let agentDefinitions
  if (fresh && typeof loadLocalAgents === 'function') {
    const local = await loadLocalAgents({ verbose: false }).catch(() => ({}))
    agentDefinitions = Object.values(local ?? {}).filter((d) => d && d.id !== agentId)
  }
  return { agent: definition, costMode, agentDefinitions, injectedAgentId: agentId }
}
