// Command-line parsing for the agent command contract (docs/agent-command.md §1):
//   codebuff-agent --stream-json --stdin-turn
//   codebuff-agent --stream-json [--free|--lite|--max|--plan] [--continue SESSION_ID]
//                  [--timeout SECONDS] [--cwd DIR] [--model MODEL] [--] "PROMPT"
// In the argv form the prompt is always the last argv element, even if it starts with "-"; a "--"
// just before it is accepted and skipped. `--stdin-turn` (the daemon's form) takes no other flag
// but --stream-json: everything else is a field of the turn line (turn.mjs).

export class UsageError extends Error {
  constructor(message) {
    super(message)
    this.name = 'UsageError'
  }
}

export const USAGE = `usage: codebuff-agent --stream-json --stdin-turn
       codebuff-agent --stream-json [--free|--lite|--max|--plan] [--continue SESSION_ID]
                      [--timeout SECONDS] [--cwd DIRECTORY] [--model MODEL] [--] "PROMPT"
With --stdin-turn the turn is the first stdin line ({"type":"turn",…}); otherwise the prompt is the
last argument. stdout carries one JSON event per line; logs go to stderr.`

const MODE_FLAGS = {
  '--free': 'lite',
  '--lite': 'lite',
  '--max': 'max',
  '--plan': 'plan',
}

const VALUE_FLAGS = new Set(['--continue', '--timeout', '--cwd', '--model'])

/**
 * Parses argv (without node and script). Returns {help}, {stdinTurn: true, streamJson}, or
 * {prompt, mode, continueId, timeoutSeconds, cwd, model, streamJson}.
 * Throws UsageError on bad input.
 */
export function parseArgs(argv) {
  if (argv.length === 1 && (argv[0] === '--help' || argv[0] === '-h')) return { help: true }
  if (argv.length === 0) throw new UsageError('missing PROMPT (the last argument)')
  // The stdin form: --stdin-turn anywhere, no "--" (after which it would be a prompt).
  if (argv.includes('--stdin-turn') && !argv.includes('--')) {
    const others = argv.filter((a) => a !== '--stdin-turn' && a !== '--stream-json')
    if (others.length > 0) {
      throw new UsageError(`--stdin-turn takes no other arguments (the turn line carries them), got ${JSON.stringify(others[0])}`)
    }
    return { stdinTurn: true, streamJson: argv.includes('--stream-json') }
  }

  const prompt = argv[argv.length - 1]
  const flags = argv.slice(0, -1)
  if (flags[flags.length - 1] === '--') flags.pop()
  const out = {
    prompt,
    mode: 'default',
    continueId: undefined,
    timeoutSeconds: undefined,
    cwd: undefined,
    model: undefined,
    streamJson: false,
  }
  let modeFlag
  for (let i = 0; i < flags.length; i++) {
    let flag = flags[i]
    let value
    const eq = flag.indexOf('=')
    if (flag.startsWith('--') && eq > 0) {
      value = flag.slice(eq + 1)
      flag = flag.slice(0, eq)
    }
    if (flag === '--stream-json') {
      if (value !== undefined) throw new UsageError('--stream-json takes no value')
      out.streamJson = true
      continue
    }
    if (flag in MODE_FLAGS) {
      if (value !== undefined) throw new UsageError(`${flag} takes no value`)
      if (modeFlag && MODE_FLAGS[modeFlag] !== MODE_FLAGS[flag]) {
        throw new UsageError(`conflicting mode flags ${modeFlag} and ${flag}`)
      }
      modeFlag = flag
      out.mode = MODE_FLAGS[flag]
      continue
    }
    if (VALUE_FLAGS.has(flag)) {
      if (value === undefined) {
        if (i + 1 >= flags.length) throw new UsageError(`${flag} needs a value`)
        value = flags[++i]
      }
      if (flag === '--continue') {
        if (value === '') throw new UsageError('--continue needs a SESSION_ID')
        out.continueId = value
      } else if (flag === '--timeout') {
        const seconds = Number(value)
        if (!Number.isFinite(seconds) || seconds <= 0) {
          throw new UsageError(`--timeout needs a positive number of seconds, got ${JSON.stringify(value)}`)
        }
        out.timeoutSeconds = seconds
      } else if (flag === '--cwd') {
        if (value === '') throw new UsageError('--cwd needs a directory')
        out.cwd = value
      } else if (flag === '--model') {
        if (value === '') throw new UsageError('--model needs a model id')
        out.model = value
      }
      continue
    }
    throw new UsageError(`unknown argument ${JSON.stringify(flag)}`)
  }
  return out
}
