// The SDK's own implementations of the gated tools, for running an allowed call exactly as ungated
// Codebuff would.
//
// @codebuff/sdk 0.10.7 exports `ToolHelpers.changeFile` (write_file / str_replace) and
// `ToolHelpers.runTerminalCommand`, but not its apply_patch implementation (`applyPatchTool`,
// source src/tools/apply-patch.ts), and it is one bundled file (dist/index.mjs), so there is no
// internal module to import either. That source section is self-contained (it needs only `path`),
// so the adapter takes it from the installed bundle itself — from the "// src/tools/apply-patch.ts"
// marker to the next section's marker — and evaluates it once, on first use. If the bundle does not
// have that shape (another SDK version), loading fails with an error the tool call reports.

import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'

const START_MARKER = '// src/tools/apply-patch.ts\n'
const IMPORT_LINE = 'import path13 from "path";\n'
const END_FUNCTION = 'async function applyPatchTool(params2) {'

let cachedApplyPatch

/** Path of the SDK's ESM bundle. */
export function sdkBundlePath() {
  const require = createRequire(import.meta.url)
  const cjsEntry = require.resolve('@codebuff/sdk') // dist/index.cjs
  return path.join(path.dirname(cjsEntry), 'index.mjs')
}

/** The SDK's applyPatchTool({parameters, cwd, fs}), taken from its bundle. */
export function loadSdkApplyPatch(bundleFile = sdkBundlePath()) {
  if (cachedApplyPatch) return cachedApplyPatch
  const source = fs.readFileSync(bundleFile, 'utf8')
  const start = source.indexOf(START_MARKER)
  if (start < 0) throw new Error(`apply_patch: no "${START_MARKER.trim()}" section in ${bundleFile}`)
  const fnAt = source.indexOf(END_FUNCTION, start)
  if (fnAt < 0) throw new Error('apply_patch: applyPatchTool not found in the SDK bundle')
  // The section ends where the next "// src/…" section begins.
  const end = source.indexOf('\n// src/', fnAt)
  if (end < 0) throw new Error('apply_patch: end of the apply-patch section not found in the SDK bundle')
  let section = source.slice(start + START_MARKER.length, end)
  if (!section.startsWith(IMPORT_LINE)) throw new Error('apply_patch: unexpected imports in the SDK apply-patch section')
  section = section.slice(IMPORT_LINE.length)
  if (/^\s*(import|export)\s/m.test(section)) throw new Error('apply_patch: unexpected imports in the SDK apply-patch section')
  // eslint-disable-next-line no-new-func
  const factory = new Function('path13', `"use strict";\n${section}\nreturn applyPatchTool;`)
  cachedApplyPatch = factory(path)
  return cachedApplyPatch
}
