// Scenario data for the fake Codebuff backend, the capture script and the adapter tests.
//
// A scenario is plain data:
//   description      what it demonstrates
//   prompt           the user prompt the capture/test run passes to the adapter
//   args             extra adapter flags (placed before the prompt)
//   env              extra environment for the adapter run
//   files            files that exist in the work directory before the run ({path: content})
//   answers          stdin lines to write when an `ask_user` tool_call appears on stdout, in order;
//                    each is an object without toolCallId (filled in from the tool_call)
//   replies          ordered model replies for the root agent; each chat completion request of
//                    the root agent consumes the next one
//   subagentReplies  {<agent short id>: [replies]} for subagents (keyed by the agent the
//                    request's codebuff_metadata.run_id was started for)
//   failures         {me: {status, body?}}: /api/v1/me fails;
//                    {chat: {status, body?, afterRequests?}}: chat completions fail
//   expectedExit     the adapter's exit status
//   continueWith     (continue only) {prompt}: a second run with --continue <first sessionId>
// A reply: {text?: string[], reasoning?: string[], toolCalls?: [{id, name, input}], cost?: USD,
//           finishReason?, stall?: true (send the chunks, then hold the stream open),
//           status?/body? (answer this request with an HTTP error instead)}.
// Once a queue is exhausted the backend answers SCRIPT_EXHAUSTED_REPLY so runs always end.

/** The reply served when a scenario's script has run out. */
export const SCRIPT_EXHAUSTED_REPLY = { text: ['done'], cost: 0.0001 }

const ROOT_TOOLS = [
  'write_file',
  'str_replace',
  'run_terminal_command',
  'read_files',
  'spawn_agents',
  'ask_user',
  'end_turn',
]

function rootAgent(id, displayName) {
  return {
    version: '0.0.1',
    displayName,
    // A non-Claude model id: the SDK would send Claude models straight to Anthropic when
    // Claude OAuth credentials exist; this one always goes to the (fake) Codebuff backend.
    model: `fake/${id}-model`,
    toolNames: ROOT_TOOLS,
    spawnableAgents: ['codebuff/helper@0.0.1'],
    systemPrompt: `You are ${displayName}, a scripted test agent.`,
    instructionsPrompt: 'Follow the user request.',
    stepPrompt: '',
  }
}

/** Agent definitions served at GET /api/v1/agents/codebuff/<id>/<version>. */
export const AGENT_DEFINITIONS = {
  base2: rootAgent('base2', 'Buffy (fake base2)'),
  'base2-lite': rootAgent('base2-lite', 'Buffy Lite (fake)'),
  'base2-max': rootAgent('base2-max', 'Buffy Max (fake)'),
  'base2-plan': rootAgent('base2-plan', 'Buffy Plan (fake)'),
  helper: {
    version: '0.0.1',
    displayName: 'Helper (fake)',
    model: 'fake/helper-model',
    toolNames: ['read_files', 'write_file', 'end_turn'],
    spawnableAgents: [],
    spawnerPrompt: 'Reads files and reports back.',
    inputSchema: { prompt: { type: 'string', description: 'What to do' } },
    systemPrompt: 'You are a scripted helper subagent.',
    instructionsPrompt: 'Do what you are asked.',
    stepPrompt: '',
  },
}

/** A reply's `ask_user` tool call asking `questions`. */
function askUser(id, questions) {
  return { id, name: 'ask_user', input: { questions } }
}

const greetJs = "export function greet(name) {\n  return 'Hello ' + name\n}\n"

export const scenarios = {
  text: {
    description: 'A plain text answer in several content chunks.',
    prompt: 'Say hello.',
    replies: [{ text: ['Hello', ' from', ' the fake', ' model.'], cost: 0.05 }],
    expectedExit: 0,
  },

  reasoning: {
    description: 'Reasoning chunks, then text.',
    prompt: 'Think, then answer.',
    replies: [
      {
        reasoning: ['Let me think', ' about this', ' carefully.'],
        text: ['The answer', ' is 4.'],
        cost: 0.03,
      },
    ],
    expectedExit: 0,
  },

  tools: {
    description:
      'One reply with parallel tool calls: write_file (new file), str_replace (existing file), ' +
      'run_terminal_command (succeeds), str_replace on a missing file (errorMessage), and a ' +
      'command exiting non-zero; then a final text.',
    prompt: 'Edit the project.',
    files: { 'src/greet.js': greetJs },
    replies: [
      {
        text: ['I will edit', ' the files.'],
        toolCalls: [
          {
            id: 'call_write',
            name: 'write_file',
            input: {
              path: 'notes/todo.md',
              instructions: 'Create a todo list',
              content: '# TODO\n\n- write tests\n',
            },
          },
          {
            id: 'call_replace',
            name: 'str_replace',
            input: {
              path: 'src/greet.js',
              replacements: [{ old: "'Hello '", new: "'Hello, '" }],
            },
          },
          {
            id: 'call_cmd',
            name: 'run_terminal_command',
            input: { command: 'cat src/greet.js notes/todo.md', process_type: 'SYNC' },
          },
          {
            id: 'call_replace_missing',
            name: 'str_replace',
            input: { path: 'missing.txt', replacements: [{ old: 'foo', new: 'bar' }] },
          },
          {
            id: 'call_cmd_fail',
            name: 'run_terminal_command',
            input: { command: 'echo failing >&2; exit 3', process_type: 'SYNC' },
          },
        ],
        cost: 0.05,
      },
      { text: ['Edited', ' two files', ' and ran the commands.'], cost: 0.02 },
    ],
    expectedExit: 0,
  },

  subagent: {
    description:
      'spawn_agents of the helper subagent, which reads a file and answers; then the main ' +
      "agent's final text.",
    prompt: 'Ask the helper to read README.md.',
    files: { 'README.md': '# Demo\n\nThis project greets people.\n' },
    replies: [
      {
        text: ['Spawning', ' the helper.'],
        toolCalls: [
          {
            id: 'call_spawn',
            name: 'spawn_agents',
            input: { agents: [{ agent_type: 'helper', prompt: 'Read README.md and summarise it.' }] },
          },
        ],
        cost: 0.04,
      },
      { text: ['The helper', ' says the project', ' greets people.'], cost: 0.02 },
    ],
    subagentReplies: {
      helper: [
        {
          text: ['Reading', ' the README.'],
          toolCalls: [{ id: 'call_read', name: 'read_files', input: { paths: ['README.md'] } }],
          cost: 0.01,
        },
        { text: ['The README', ' says this project greets people.'], cost: 0.01 },
      ],
    },
    expectedExit: 0,
  },

  ask_user_single: {
    description: 'ask_user with one single-select question, answered on stdin.',
    prompt: 'Set up tests.',
    replies: [
      {
        text: ['I need', ' to ask.'],
        toolCalls: [
          askUser('call_ask', [
            {
              question: 'Which test framework should I use?',
              header: 'Tests',
              options: [
                { label: 'vitest', description: 'Fast, Vite-native' },
                { label: 'jest' },
              ],
            },
          ]),
        ],
        cost: 0.02,
      },
      { text: ['Using', ' vitest.'], cost: 0.01 },
    ],
    answers: [{ type: 'ask_user_answer', answers: [{ questionIndex: 0, selectedOption: 'vitest' }] }],
    expectedExit: 0,
  },

  ask_user_multi: {
    description:
      'ask_user with two questions, the second multiSelect; answered with otherText and selectedOptions.',
    prompt: 'Configure the project.',
    replies: [
      {
        toolCalls: [
          askUser('call_ask_multi', [
            {
              question: 'Which package manager?',
              header: 'Packages',
              options: [{ label: 'npm' }, { label: 'pnpm' }, { label: 'yarn' }],
            },
            {
              question: 'Which checks should run?',
              header: 'Checks',
              options: [{ label: 'unit' }, { label: 'snapshot' }, { label: 'e2e' }],
              multiSelect: true,
            },
          ]),
        ],
        cost: 0.02,
      },
      { text: ['Using bun', ' with unit and snapshot checks.'], cost: 0.01 },
    ],
    answers: [
      {
        type: 'ask_user_answer',
        answers: [
          { questionIndex: 0, otherText: 'bun' },
          { questionIndex: 1, selectedOptions: ['unit', 'snapshot'] },
        ],
      },
    ],
    expectedExit: 0,
  },

  ask_user_timeout: {
    description: 'ask_user that nobody answers: after the question timeout the tool returns skipped.',
    prompt: 'Set up tests.',
    env: { CODEBUFF_QUESTION_TIMEOUT_SECONDS: '1' },
    replies: [
      {
        toolCalls: [
          askUser('call_ask_timeout', [
            {
              question: 'Which test framework should I use?',
              options: [{ label: 'vitest' }, { label: 'jest' }],
            },
          ]),
        ],
        cost: 0.02,
      },
      { text: ['No answer;', ' I will pick vitest.'], cost: 0.01 },
    ],
    expectedExit: 0,
  },

  continue: {
    description:
      'A first run (captured as continue_first) and a --continue run that carries its history.',
    prompt: 'Remember the number 42.',
    replies: [
      { text: ['OK,', ' I will remember 42.'], cost: 0.01 },
      { text: ['You asked me', ' to remember 42.'], cost: 0.01 },
    ],
    continueWith: { prompt: 'Which number did I mention?' },
    expectedExit: 0,
  },

  payment_required: {
    description: 'Chat completions answer 402: no error/finish from the SDK; the adapter reports out_of_credits.',
    prompt: 'Say hello.',
    failures: {
      chat: {
        status: 402,
        body: { error: 'insufficient_credits', message: 'Insufficient credits. Please add credits.' },
      },
    },
    expectedExit: 1,
  },

  auth_failed: {
    description: '/api/v1/me answers 401: run() throws before any event; the adapter reports auth_failed.',
    prompt: 'Say hello.',
    failures: { me: { status: 401, body: { message: 'Invalid API key' } } },
    expectedExit: 1,
  },

  // Not captured: used by tests only.
  edit_fail: {
    description:
      'Every file edit of the step fails: the SDK writes "No changes to existing files.\\n" to the ' +
      'stream-chunk channel, which the adapter drops like the lone "\\n".',
    prompt: 'Edit a missing file.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_missing',
            name: 'str_replace',
            input: { path: 'missing.txt', replacements: [{ old: 'a', new: 'b' }] },
          },
        ],
        cost: 0.01,
      },
      { text: ['That file', ' does not exist.'], cost: 0.01 },
    ],
    capture: false,
  },

  command_env: {
    description: 'A terminal command prints CODEBUFF_API_KEY: the credential is not passed to commands.',
    prompt: 'Show the environment.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_env',
            name: 'run_terminal_command',
            input: { command: 'echo "key=[${CODEBUFF_API_KEY:-}] home=[$HOME]"', process_type: 'SYNC' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Done.'], cost: 0.01 },
    ],
    capture: false,
  },

  // Failing backends (test only): each ends the run with one fatal error of a known code.
  account_suspended: {
    description: 'Chat completions answer 403: the account is suspended.',
    prompt: 'Say hello.',
    failures: {
      chat: { status: 403, body: { error: 'account_suspended', message: 'Your account has been suspended for abuse.' } },
    },
    capture: false,
  },

  rate_limited: {
    description: 'Chat completions answer 429 (with retry-after-ms, so the SDK retries quickly) every time.',
    prompt: 'Say hello.',
    failures: {
      chat: {
        status: 429,
        body: { error: 'rate_limited', message: 'Too many requests: try again in 20 seconds.' },
        headers: { 'retry-after-ms': '5' },
      },
    },
    capture: false,
  },

  server_error: {
    description: 'Chat completions answer 500 (with retry-after-ms) every time.',
    prompt: 'Say hello.',
    failures: {
      chat: {
        status: 500,
        body: { error: 'internal_error', message: 'The upstream model provider crashed.' },
        headers: { 'retry-after-ms': '5' },
      },
    },
    capture: false,
  },

  model_unavailable: {
    description: 'Chat completions answer 400: the model is not available.',
    prompt: 'Say hello.',
    failures: {
      chat: { status: 400, body: { error: 'invalid_request', message: 'model fake/base2-model is not available' } },
    },
    capture: false,
  },

  stream_break: {
    description: 'Every reply streams a few chunks and then the connection drops.',
    prompt: 'Say hello.',
    replies: [
      { text: ['Hello', ' there'], break: true },
      { text: ['Hello', ' again'], break: true },
      { text: ['Hello', ' once more'], break: true },
      { text: ['Hello', ' and more'], break: true },
      { text: ['Hello', ' still'], break: true },
      { text: ['Hello', ' yet'], break: true },
    ],
    capture: false,
  },

  secret_env: {
    description:
      "A terminal command prints the adapter's initial environment (/proc/$PPID/environ) and its own: " +
      'the credential of a --stdin-turn run appears in neither.',
    prompt: 'Show the environment.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_environ',
            name: 'run_terminal_command',
            input: {
              command: "cat /proc/$PPID/environ | tr '\\0' '\\n'; echo ---; env; echo \"pwd=[$PWD]\"",
              process_type: 'SYNC',
            },
          },
        ],
        cost: 0.01,
      },
      { text: ['Done.'], cost: 0.01 },
    ],
    capture: false,
  },

  sensitive_files: {
    description:
      'The model reads private keys, .env, a template and an ordinary file, and code_searches them all ' +
      '(hidden and ignored files included); the system prompt carries the file tree, the git diff and ' +
      'knowledge files. Only the ordinary file and the template reach the backend. (The test makes the ' +
      'work dir a git repository with changes to every file.)',
    prompt: 'Read everything.',
    files: {
      id_rsa: '-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET-RSA-91fa\n-----END OPENSSH PRIVATE KEY-----\n',
      '.env': 'API_TOKEN=SECRET-ENV-77c2\n',
      'config/deploy.pem': 'SECRET-PEM-3b1c\n',
      '.env.example': 'API_TOKEN=<your token here>\n',
      'notes.txt': 'ordinary-content-5d3e\n',
    },
    agentDefinitions: {
      base2: {
        ...rootAgent('base2', 'Buffy (fake base2, with context)'),
        toolNames: [...ROOT_TOOLS, 'code_search'],
        systemPrompt:
          'You are a scripted test agent.\n{CODEBUFF_FILE_TREE_PROMPT}\n{CODEBUFF_GIT_CHANGES_PROMPT}\n' +
          '{CODEBUFF_KNOWLEDGE_FILES_CONTENTS}',
      },
    },
    replies: [
      {
        toolCalls: [
          {
            id: 'call_read',
            name: 'read_files',
            input: { paths: ['id_rsa', '.env', 'config/deploy.pem', '.env.example', 'notes.txt'] },
          },
          {
            id: 'call_search',
            name: 'code_search',
            input: { pattern: 'SECRET|ordinary|API_TOKEN', flags: '--hidden --no-ignore' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Read them.'], cost: 0.01 },
    ],
    capture: false,
  },

  sensitive_symlinks: {
    description:
      'Ordinary names that are symbolic links to secrets (notes-link.txt -> .env, deploy-notes.txt -> a ' +
      'private key outside the project, keys -> a .ssh directory): read_files and code_search (following ' +
      'links) must send none of their contents; plain.txt arrives. (The test makes the links.)',
    prompt: 'Read the notes.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_read',
            name: 'read_files',
            input: { paths: ['notes-link.txt', 'deploy-notes.txt', 'keys/authorized.txt', 'plain.txt'] },
          },
          {
            id: 'call_search',
            name: 'code_search',
            input: { pattern: 'SECRET|plain-content', flags: '--hidden --no-ignore --follow' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Read them.'], cost: 0.01 },
    ],
    capture: false,
  },

  permissions: {
    description:
      'write_file and run_terminal_command in one reply; with permissionMode "ask" each asks first ' +
      '(the tests allow, reject, or close stdin).',
    prompt: 'Write a todo list and run a command.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_write',
            name: 'write_file',
            input: { path: 'notes/todo.md', instructions: 'Create a todo list', content: '# TODO\n\n- ask first\n' },
          },
          {
            id: 'call_cmd',
            name: 'run_terminal_command',
            input: { command: 'echo ran > ran.txt; echo command-output', process_type: 'SYNC' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Finished.'], cost: 0.01 },
    ],
    capture: false,
  },

  permissions_patch: {
    description:
      'str_replace, apply_patch update_file and apply_patch delete_file; with permissionMode "ask" ' +
      'each asks first.',
    prompt: 'Patch the project.',
    files: { 'src/greet.js': greetJs, 'lib/fib.txt': 'one\ntwo\nthree\n', 'old.txt': 'obsolete\n' },
    agentDefinitions: {
      base2: { ...rootAgent('base2', 'Buffy (fake base2, apply_patch)'), toolNames: [...ROOT_TOOLS, 'apply_patch'] },
    },
    replies: [
      {
        toolCalls: [
          {
            id: 'call_replace',
            name: 'str_replace',
            input: { path: 'src/greet.js', replacements: [{ old: "'Hello '", new: "'Hi '" }] },
          },
          {
            id: 'call_patch',
            name: 'apply_patch',
            input: { operation: { type: 'update_file', path: 'lib/fib.txt', diff: '@@\n one\n-two\n+TWO\n three\n' } },
          },
          {
            id: 'call_delete',
            name: 'apply_patch',
            input: { operation: { type: 'delete_file', path: 'old.txt' } },
          },
        ],
        cost: 0.01,
      },
      { text: ['Patched.'], cost: 0.01 },
    ],
    capture: false,
  },

  background: {
    description:
      'run_terminal_command with process_type BACKGROUND (not implemented in SDK 0.10.7; the adapter ' +
      'runs it): a long-running one and one that fails at once.',
    prompt: 'Start the server.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_bg',
            name: 'run_terminal_command',
            input: { command: 'echo started-bg; echo to-stderr >&2; exec sleep 60', process_type: 'BACKGROUND' },
          },
          {
            id: 'call_bg_fail',
            name: 'run_terminal_command',
            input: { command: 'echo quick; exit 3', process_type: 'BACKGROUND' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Started.'], cost: 0.01 },
    ],
    capture: false,
  },

  permissions_repeat: {
    description:
      'Two steps, each a write_file and the same command `echo one >> log.txt`; then "Done.". For the ' +
      "daemon's permission tests: in \"ask\" mode the adapter asks for every call, the identical " +
      'command included (whether "once" or "always" answers it is the daemon\'s business).',
    prompt: 'Write two files and log twice.',
    replies: [
      {
        toolCalls: [
          {
            id: 'call_write_first',
            name: 'write_file',
            input: { path: 'first.txt', instructions: 'Create the first file', content: 'first\n' },
          },
          {
            id: 'call_log_first',
            name: 'run_terminal_command',
            input: { command: 'echo one >> log.txt', process_type: 'SYNC' },
          },
        ],
        cost: 0.01,
      },
      {
        toolCalls: [
          {
            id: 'call_write_second',
            name: 'write_file',
            input: { path: 'second.txt', instructions: 'Create the second file', content: 'second\n' },
          },
          {
            id: 'call_log_second',
            name: 'run_terminal_command',
            input: { command: 'echo one >> log.txt', process_type: 'SYNC' },
          },
        ],
        cost: 0.01,
      },
      { text: ['Done.'], cost: 0.01 },
    ],
    capture: false,
  },

  budget_steps: {
    description:
      'Five model steps of 0.02 USD (2 credits) each, step N running `echo step N`, then a text of ' +
      '0.01 USD (1 credit): `cost` events 2, 4, 6, 8, 10, 11 and finish.totalCost 11. For mid-turn ' +
      'budget stops.',
    prompt: 'Take five steps.',
    replies: [
      ...[1, 2, 3, 4, 5].map((n) => ({
        text: [`Step ${n}.`],
        toolCalls: [
          {
            id: `call_step_${n}`,
            name: 'run_terminal_command',
            input: { command: `echo step ${n}`, process_type: 'SYNC' },
          },
        ],
        cost: 0.02,
      })),
      { text: ['All five', ' steps done.'], cost: 0.01 },
    ],
    capture: false,
  },

  stall: {
    description: 'The first reply streams one chunk and then never finishes.',
    prompt: 'Take your time.',
    replies: [{ text: ['Working'], stall: true }],
    capture: false,
  },

  ask_user_reply_then_reject: {
    description:
      'Two ask_user calls in one run, one after the other: the daemon tests answer the first ' +
      '(reply) and skip the second (reject); then a final text.',
    prompt: 'Set up the project.',
    replies: [
      {
        toolCalls: [
          askUser('call_ask_framework', [
            {
              question: 'Which test framework should I use?',
              options: [{ label: 'vitest' }, { label: 'jest' }],
            },
          ]),
        ],
        cost: 0.02,
      },
      {
        toolCalls: [
          askUser('call_ask_ci', [
            {
              question: 'Which CI service should I configure?',
              options: [{ label: 'GitHub Actions' }, { label: 'GitLab CI' }],
            },
          ]),
        ],
        cost: 0.01,
      },
      { text: ['Using vitest,', ' no CI.'], cost: 0.01 },
    ],
    capture: false,
  },
}
