// The adapter's overrideTools for @codebuff/sdk 0.10.7.
//
// Every mode:
//   ask_user              the stdin question relay (ask-user.mjs)
//   read_files            the SDK's getFiles with sensitive files blocked (sensitive-files.mjs)
//   code_search           the SDK's codeSearch without results from sensitive files
//   run_terminal_command  the SDK's runTerminalCommand; BACKGROUND implemented here (terminal.mjs)
// permissionMode "ask" additionally gates write_file, str_replace, apply_patch and
// run_terminal_command: permission_request first (permissions.mjs), then on "allow" the SDK's own
// implementation with the arguments its built-in handler would use; on "reject" the denial error.
//
// How the SDK's built-in handler (handleToolCall) runs the gated tools, mirrored here:
//   write_file, str_replace  changeFile({parameters: input, cwd, fs})       (ToolHelpers.changeFile)
//   apply_patch              applyPatchTool({parameters: input, cwd, fs})   (sdk-internals.mjs)
//   run_terminal_command     runTerminalCommand({...input, cwd: resolve(cwd, input.cwd ?? "."), env})
// where fs is the run's fsSource (default: node's fs.promises) and env the client's `env` option.
// A throwing implementation becomes {errorMessage} in the SDK, exactly as for its built-ins.

import fsPromises from 'node:fs/promises'

import { createFilteredReadFiles, createFilteredCodeSearch } from './sensitive-files.mjs'
import { createTerminalCommand } from './terminal.mjs'
import { rejectionResult } from './permissions.mjs'
import { loadSdkApplyPatch } from './sdk-internals.mjs'

/**
 * @param {object} o
 * @param {object} o.sdk            the SDK module (ToolHelpers, getFiles)
 * @param {string} o.cwd            project root
 * @param {object} o.env            the client's `env` option
 * @param {'bypass'|'ask'} o.permissionMode
 * @param {import('./permissions.mjs').PermissionRelay} [o.permissions] required for "ask"
 * @param {Function} o.askUser      the ask_user handler
 * @param {() => string} o.backgroundLogDir
 * @param {(msg: string) => void} [o.log]
 */
export function buildOverrideTools({ sdk, cwd, env, permissionMode, permissions, askUser, backgroundLogDir, log = () => {} }) {
  const { ToolHelpers, getFiles } = sdk
  const terminal = createTerminalCommand({
    runSync: ToolHelpers.runTerminalCommand,
    cwd,
    env,
    logDir: backgroundLogDir,
    log,
  })
  const implementations = {
    write_file: (input) => ToolHelpers.changeFile({ parameters: input, cwd, fs: fsPromises }),
    str_replace: (input) => ToolHelpers.changeFile({ parameters: input, cwd, fs: fsPromises }),
    apply_patch: (input) => loadSdkApplyPatch()({ parameters: input, cwd, fs: fsPromises }),
    run_terminal_command: terminal,
  }
  const overrides = {
    ask_user: askUser,
    read_files: createFilteredReadFiles({ getFiles, cwd, fs: fsPromises }),
    code_search: createFilteredCodeSearch({ codeSearch: ToolHelpers.codeSearch, cwd, log }),
    run_terminal_command: terminal,
  }
  if (permissionMode === 'ask') {
    if (!permissions) throw new Error('permissionMode "ask" needs a PermissionRelay')
    for (const [toolName, implementation] of Object.entries(implementations)) {
      overrides[toolName] = async (input) => {
        const answer = await permissions.ask(toolName, input)
        if (!answer.allowed) {
          log(`${toolName} rejected${answer.message ? `: ${answer.message}` : ''}`)
          return rejectionResult(answer.message)
        }
        return implementation(input)
      }
    }
  }
  return overrides
}
