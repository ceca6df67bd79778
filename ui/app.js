// The inspector's entry point: the token prompt, the theme, the daemon's health, and the two
// pages (`#/` the sessions, `#/sessions/<id>` one session), chosen by the URL's fragment so
// that every page has a URL to share and the files stay the same for all of them.

import { Api } from './api.js'
import { listView } from './view_list.js'
import { sessionView } from './view_session.js'

const THEME_KEY = 'codebuffd.theme'
const view = document.getElementById('view')
const forget = document.getElementById('forget-token')

const api = new Api(new URL('../v1/', location.href), askToken)

/** Shows the token dialog; resolves with what the user typed. */
function askToken(why) {
  const dialog = document.getElementById('token-dialog')
  const form = document.getElementById('token-form')
  const input = document.getElementById('token-input')
  document.getElementById('token-why').textContent = why && !/missing token/i.test(why) ? why : ''
  input.value = ''
  return new Promise((resolve) => {
    const submit = (e) => {
      e.preventDefault()
      const token = input.value.trim()
      if (!token) return
      form.removeEventListener('submit', submit)
      dialog.removeEventListener('cancel', keep)
      dialog.close()
      forget.hidden = false
      resolve(token)
    }
    // The page cannot do anything without the token: Escape does not close the dialog.
    const keep = (e) => e.preventDefault()
    form.addEventListener('submit', submit)
    dialog.addEventListener('cancel', keep)
    if (!dialog.open) dialog.showModal()
    input.focus()
  })
}

forget.hidden = !api.token
forget.addEventListener('click', () => {
  api.forgetToken()
  forget.hidden = true
  route()
})

// Theme: auto (the system's), light or dark; remembered in this browser.
const themeButton = document.getElementById('theme')
function applyTheme(theme) {
  if (theme === 'auto') delete document.documentElement.dataset.theme
  else document.documentElement.dataset.theme = theme
  themeButton.textContent = `Theme: ${theme}`
}
let theme = localStorage.getItem(THEME_KEY) ?? 'auto'
applyTheme(theme)
themeButton.addEventListener('click', () => {
  theme = { auto: 'light', light: 'dark', dark: 'auto' }[theme] ?? 'auto'
  localStorage.setItem(THEME_KEY, theme)
  applyTheme(theme)
})

// Health: open to everyone (no token needed), polled while the tab is visible.
const health = document.getElementById('health')
async function checkHealth() {
  try {
    const resp = await fetch(new URL('../v1/health', location.href), { cache: 'no-store' })
    const body = await resp.json()
    health.textContent = body.status === 'ok' ? '' : `daemon ${body.status}: ${body.cause ?? ''}`
    health.dataset.state = body.status
  } catch {
    health.textContent = 'daemon unreachable'
    health.dataset.state = 'down'
  }
}
checkHealth()
setInterval(() => {
  if (!document.hidden) checkHealth()
}, 10_000)

// Pages.
let current = null
function setTitle(text) {
  document.title = `${text} · codebuffd inspector`
}

function route() {
  current?.dispose()
  const match = /^#\/sessions\/(.+)$/.exec(location.hash)
  let id = null
  try {
    id = match ? decodeURIComponent(match[1]) : null
  } catch {}
  if (id) {
    current = sessionView(view, { api, id, setTitle })
  } else {
    current = listView(view, { api, setTitle })
  }
  window.scrollTo(0, 0)
}

window.addEventListener('hashchange', route)
route()
