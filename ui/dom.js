// Building DOM nodes from data. Text always goes in as text nodes, never as markup: nothing
// here (or anywhere in the page) assigns to innerHTML, and the page's CSP (Trusted Types)
// would refuse it.

/**
 * An element: `h('a', {href, class: 'x', onclick}, 'text', child, [more])`. Attributes whose
 * value is null, undefined or false are left out; `true` sets an empty attribute.
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag)
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value == null || value === false) continue
      if (key === 'class') el.className = value
      else if (key === 'dataset') Object.assign(el.dataset, value)
      else if (key.startsWith('on') && typeof value === 'function') {
        el.addEventListener(key.slice(2), value)
      } else if (key === 'value' || key === 'checked' || key === 'disabled') el[key] = value
      else el.setAttribute(key, value === true ? '' : String(value))
    }
  }
  append(el, children)
  return el
}

/** Appends children (nodes, strings, numbers, nested arrays; null/false skipped). */
export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child == null || child === false) continue
    el.append(child instanceof Node ? child : String(child))
  }
  return el
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren()
  return append(el, children)
}

/** True when the user prefers less motion (smooth scrolling off). */
export function reducedMotion() {
  return window.matchMedia('(prefers-reduced-motion: reduce)').matches
}
