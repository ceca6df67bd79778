#!/usr/bin/env node
// codebuff-agent: the agent command of codebuffd, built on @codebuff/sdk.
// See ../README.md and the contract in docs/agent-command.md.
// Order matters: output.mjs takes ownership of stdout and the polyfills are in place
// before anything from the SDK runs.

import { emitLine, drainStdout } from '../src/output.mjs'
import '../src/polyfills.mjs'
import { main } from '../src/main.mjs'

main().catch(async (error) => {
  process.stderr.write(`codebuff-agent: fatal: ${error?.stack ?? error}\n`)
  emitLine({ type: 'error', message: String(error?.message ?? error), code: 'internal', fatal: true })
  await drainStdout()
  process.exit(1)
})
