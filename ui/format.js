// How numbers, times and costs read on the page.

/** `12 s ago`, `5 min ago`, `3 h ago`, then the date. */
export function ago(ms, now = Date.now()) {
  if (!ms) return '—'
  const s = Math.max(0, Math.round((now - ms) / 1000))
  if (s < 5) return 'just now'
  if (s < 60) return `${s} s ago`
  if (s < 3600) return `${Math.floor(s / 60)} min ago`
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`
  return new Date(ms).toLocaleDateString()
}

/** A full local date and time, for tooltips. */
export function stamp(msOrIso) {
  if (msOrIso == null) return ''
  const d = new Date(msOrIso)
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleString()
}

/** `HH:MM:SS` of an event time. */
export function clock(iso) {
  const d = new Date(iso)
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour12: false })
}

/** `850 ms`, `4.2 s`, `3 min 5 s`. */
export function duration(ms) {
  if (ms == null || !Number.isFinite(ms)) return ''
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`
  const m = Math.floor(ms / 60_000)
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`
}

/** Credits as Codebuff counts them, with their dollar value: `7.5 cr ($0.08)`. */
export function cost(c) {
  if (!c) return '—'
  const credits = Number(c.credits ?? 0)
  const usd = Number(c.usd ?? credits / 100)
  return `${trim(credits)} cr ($${usd.toFixed(usd < 1 && usd > 0 ? 3 : 2)})`
}

/** A number without trailing zeros (at most 2 decimals). */
export function trim(n) {
  return Number(n).toFixed(2).replace(/\.?0+$/, '')
}

/** `1.2 KB`, `3.4 MB`. */
export function bytes(n) {
  if (n < 1024) return `${n} B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`
  return `${(n / 1024 / 1024).toFixed(1)} MB`
}

/** A session's status as people read it. */
export function statusLabel(status) {
  return (
    {
      idle: 'idle',
      running: 'running',
      awaiting_input: 'awaiting input',
      ended: 'ended',
      failed: 'failed',
    }[status] ?? String(status)
  )
}
