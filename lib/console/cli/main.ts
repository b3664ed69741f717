#!/usr/bin/env node
import { runCli } from './cli.js'

/* The package's `bin` (dist/console/cli/main.js): argv, stdout and stderr to runCli, its code to the exit. */

const abort = new AbortController()
// Ctrl-C ends `watch` after its current read; a second one ends the process.
process.once('SIGINT', () => {
  abort.abort()
  process.once('SIGINT', () => { process.exit(130) })
})

const code = await runCli(process.argv.slice(2), {
  out: (text) => { process.stdout.write(text.endsWith('\n') ? text : text + '\n') },
  err: (text) => { process.stderr.write(text + '\n') },
  env: process.env,
  tty: process.stdout.isTTY === true,
  signal: abort.signal
})
process.exitCode = code
