// Creating a session from the page (`POST /v1/sessions/{id}`, then its first prompt with
// `POST …/messages`): agent, working directory, agent mode, permission mode, model, budget,
// title. The daemon validates everything; its problem's detail is shown as is.

import { h, replace } from './dom.js'
import { Api } from './api.js'

const PERMISSION_MODES = [
  ['', 'the daemon’s default'],
  ['default', 'default — ask before edits and commands'],
  ['acceptEdits', 'acceptEdits — edit freely, ask before commands'],
  ['bypass', 'bypass — never ask'],
  ['plan', 'plan — read only'],
]

/** A fresh session id: `ui-<date>-<time>-<4 hex>`. */
export function newId(now = new Date()) {
  const pad = (n) => String(n).padStart(2, '0')
  const date = `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}`
  const time = `${pad(now.getHours())}${pad(now.getMinutes())}${pad(now.getSeconds())}`
  const rand = [...crypto.getRandomValues(new Uint8Array(2))].map((b) => b.toString(16).padStart(2, '0')).join('')
  return `ui-${date}-${time}-${rand}`
}

export async function openCreate(api) {
  const dialog = document.getElementById('create-dialog')
  const error = h('p', { class: 'err', role: 'alert' })
  const field = (label, control, hint) =>
    h('label', { class: 'field' }, h('span', null, label), control, hint ? h('small', { class: 'muted' }, hint) : null)
  const id = h('input', { name: 'id', required: true, value: newId(), autocomplete: 'off', spellcheck: 'false' })
  const agent = h('select', { name: 'agent' })
  const mode = h('select', { name: 'agentMode' }, h('option', { value: '' }, 'default'))
  const permission = h('select', { name: 'permissionMode' }, PERMISSION_MODES.map(([v, t]) => h('option', { value: v }, t)))
  const directory = h('input', { name: 'directory', placeholder: 'the daemon’s working directory', autocomplete: 'off', spellcheck: 'false' })
  const model = h('input', { name: 'model', placeholder: 'the agent’s default', autocomplete: 'off' })
  const budget = h('input', { name: 'maxCredits', type: 'number', min: '0', step: 'any', placeholder: 'none' })
  const title = h('input', { name: 'title', placeholder: 'shown in the list', autocomplete: 'off' })
  const prompt = h('textarea', { name: 'prompt', rows: 3, placeholder: 'optional: sent as soon as the session exists' })
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Create')
  const form = h(
    'form',
    {
      class: 'create',
      onsubmit: async (e) => {
        e.preventDefault()
        error.textContent = ''
        submit.disabled = true
        try {
          const body = { agent: agent.value }
          if (mode.value) body.agentMode = mode.value
          if (permission.value) body.permissionMode = permission.value
          if (directory.value.trim()) body.directory = directory.value.trim()
          if (model.value.trim()) body.model = model.value.trim()
          if (title.value.trim()) body.title = title.value.trim()
          if (budget.value !== '') body.maxCredits = Number(budget.value)
          const sid = id.value.trim()
          await api.post(Api.session(sid), body)
          if (prompt.value.trim()) await api.post(Api.session(sid, '/messages'), { message: prompt.value })
          dialog.close()
          location.hash = `#/sessions/${encodeURIComponent(sid)}`
        } catch (err) {
          error.textContent = err.message
        } finally {
          submit.disabled = false
        }
      },
    },
    h('h2', null, 'New session'),
    field('Session id', id),
    field('Agent', agent),
    field('Agent mode', mode),
    field('Permission mode', permission, 'When the agent must ask before it edits files or runs commands.'),
    field('Directory', directory, 'The agent works there; it must exist on the daemon’s machine.'),
    field('Model', model),
    field('Budget (credits)', budget),
    field('Title', title),
    field('First prompt', prompt),
    error,
    h('div', { class: 'actions' }, submit, h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel')),
  )
  replace(dialog, form)
  dialog.showModal()
  id.select()

  const loadModes = async () => {
    replace(mode, h('option', { value: '' }, 'default'))
    try {
      const { modes } = await api.get(`agents/${encodeURIComponent(agent.value)}/modes`)
      for (const m of modes) mode.append(h('option', { value: m.id, title: m.description ?? '' }, m.name ? `${m.id} — ${m.name}` : m.id))
    } catch {}
  }
  agent.addEventListener('change', loadModes)
  try {
    const { agents } = await api.get('agents')
    for (const a of agents) {
      const notes = [a.installed ? null : 'not installed', a.credentialsAvailable ? null : 'no credentials'].filter(Boolean)
      agent.append(h('option', { value: a.id }, notes.length ? `${a.id} (${notes.join(', ')})` : a.id))
    }
    const usable = agents.find((a) => a.installed && a.credentialsAvailable)
    if (usable) agent.value = usable.id
    await loadModes()
  } catch (e) {
    error.textContent = `Cannot list agents: ${e.message}`
  }
}
