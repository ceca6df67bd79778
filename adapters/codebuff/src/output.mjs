// The adapter's stdout: one JSON object per line, nothing else, drained before exit.
//
// Importing this module takes ownership of stdout: process.stdout.write is replaced by a
// redirect to stderr, so stray console.log calls (the SDK's, its dependencies') can never
// corrupt the event stream. Only emitLine() writes to the real stdout.

const realWrite = process.stdout.write.bind(process.stdout)

process.stdout.write = function redirectedToStderr(chunk, encoding, callback) {
  return process.stderr.write(chunk, encoding, callback)
}

let closed = false
let stdoutBroken = false

process.stdout.on('error', (error) => {
  // EPIPE: the reader went away. Nothing more can be delivered; keep running so the
  // run can still be aborted and its state saved.
  stdoutBroken = true
  process.stderr.write(`codebuff-agent: stdout error: ${error.message}\n`)
})

/** Writes one event as a single JSON line. After close() nothing more is written. */
export function emitLine(event) {
  if (closed || stdoutBroken) return
  realWrite(`${JSON.stringify(event)}\n`)
}

/** Stops all further output (used once the final event of the run has been written). */
export function closeOutput() {
  closed = true
}

/** Resolves once everything written to stdout has been handed to the OS (or after maxMs). */
export function drainStdout(maxMs = 5000) {
  return new Promise((resolve) => {
    if (stdoutBroken || process.stdout.writableLength === 0) return resolve()
    const timer = setTimeout(done, maxMs)
    function done() {
      clearTimeout(timer)
      process.stdout.off('drain', check)
      resolve()
    }
    function check() {
      if (process.stdout.writableLength === 0) done()
    }
    process.stdout.on('drain', check)
    // A final empty write's callback fires after all queued writes have been flushed.
    realWrite('', () => check())
  })
}
