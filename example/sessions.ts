/*
 * `npm run docs:sessions`: every console session in README.md and docs/*.md is
 * the output of a real run, so none can drift from the demo again.
 *
 * A session is a ```console block between `<!-- session -->` and
 * `<!-- /session -->`. Its `$ ` lines are the commands; everything else is
 * output, rewritten here. Each block gets a fresh demo (example/server.ts,
 * memory store, the plugin's `clock` option frozen at one instant) and runs
 * its commands in one bash, in order (so `TOKEN=$(…)` carries over), against
 * the demo's port shown as 127.0.0.1:3000. `date`, `connection`,
 * `keep-alive` and `content-length` headers are dropped.
 *
 *   npm run docs:sessions             rewrite the docs
 *   npm run docs:sessions -- --check  write nothing; exit 1 when a doc differs
 *
 * test/docs/sessions.test.ts regenerates every block and fails on a difference.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export type Spawn = (command: string, args: string[], options: SpawnOptions) => ChildProcess

const ROOT = fileURLToPath(new URL('..', import.meta.url))
/** The instant the demo's limiter sees for every request (2026-12-01T13:30:12.303Z). */
export const FROZEN_CLOCK_MS = 1_796_103_012_303
const SHOWN_HOST = '127.0.0.1:3000'
const SESSION = /(<!-- session -->\n```console\n)([\s\S]*?)(```\n<!-- \/session -->)/g
const DROPPED_HEADER = /^(date|connection|keep-alive|content-length):/i

/** README.md and every docs/*.md: the files whose sessions this script owns. */
export function sessionFiles (): string[] {
  const docs = readdirSync(join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => join(ROOT, 'docs', name))
  return [join(ROOT, 'README.md'), ...docs]
}

async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  server.close()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return address.port
}

/** Starts the demo as `npm run demo` does, with the memory store and the frozen clock. */
async function startDemo (run: Spawn): Promise<{ port: number, stop: () => Promise<void> }> {
  const port = await freePort()
  const env = { ...process.env, REDIS_URL: '', PORT: String(port), DEMO_FROZEN_CLOCK_MS: String(FROZEN_CLOCK_MS) }
  const child = run(process.execPath, ['--import=tsx', 'example/server.ts'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const exited = (): boolean => child.exitCode !== null || child.signalCode !== null
  // Polled, not awaited as an event: a spawner that unrefs its children (the tests') would let the process exit meanwhile.
  const stop = async (): Promise<void> => {
    if (!exited()) child.kill('SIGTERM')
    for (let waited = 0; !exited() && waited < 10_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
  }
  const deadline = Date.now() + 30_000
  while (!output.includes('Server listening')) {
    if (Date.now() > deadline || exited()) {
      await stop()
      throw new Error(`the demo did not start:\n${output}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { port, stop }
}

/** Runs the commands in one bash against `port`; one output per command. */
async function runCommands (commands: string[], port: number): Promise<string[]> {
  const marker = (i: number): string => `@@rrl-session-${i}@@`
  // In a terminal curl draws no progress meter; into a pipe it would, on stderr: -sS as in a terminal.
  const prelude = 'curl () { command curl -sS "$@"; }\n'
  const script = prelude + commands.map((command, i) => `printf '\\n%s\\n' '${marker(i)}'\n${command.replaceAll(SHOWN_HOST, `127.0.0.1:${port}`)}`).join('\n')
  const child = spawn('bash', ['-c', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout?.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  await once(child, 'close')
  if (stderr !== '') throw new Error(`a session command wrote to stderr:\n${stderr}`)
  return commands.map((_, i) => {
    const start = stdout.indexOf(`\n${marker(i)}\n`)
    const end = i + 1 < commands.length ? stdout.indexOf(`\n${marker(i + 1)}\n`) : stdout.length
    if (start < 0 || end < 0) throw new Error(`no output for: ${commands[i] as string}`)
    return tidy(stdout.slice(start + marker(i).length + 2, end).replaceAll(`127.0.0.1:${port}`, SHOWN_HOST))
  })
}

/** CRLF to LF, the per-connection headers dropped, no trailing blanks. */
function tidy (output: string): string {
  return output.replace(/\r\n/g, '\n').split('\n')
    .filter((line) => !DROPPED_HEADER.test(line))
    .map((line) => line.trimEnd()).join('\n').trimEnd()
}

/** One session block's body: its commands, each followed by what it printed now. */
async function renderBlock (body: string, run: Spawn): Promise<string> {
  const commands = body.split('\n').filter((line) => line.startsWith('$ ')).map((line) => line.slice(2))
  if (commands.length === 0) throw new Error('a session block has no `$ ` command')
  const demo = await startDemo(run)
  try {
    const outputs = await runCommands(commands, demo.port)
    return commands.map((command, i) => {
      const output = outputs[i] as string
      return output === '' ? `$ ${command}\n` : `$ ${command}\n${output}\n${i + 1 < commands.length ? '\n' : ''}`
    }).join('')
  } finally {
    await demo.stop()
  }
}

/** The document with every session block regenerated. */
export async function renderDoc (text: string, run: Spawn = spawn): Promise<string> {
  let out = ''
  let last = 0
  for (const match of text.matchAll(SESSION)) {
    out += text.slice(last, match.index) + (match[1] as string) + await renderBlock(match[2] as string, run) + (match[3] as string)
    last = (match.index ?? 0) + match[0].length
  }
  return out + text.slice(last)
}

async function main (): Promise<void> {
  const check = process.argv.includes('--check')
  let differs = 0
  for (const file of sessionFiles()) {
    const text = readFileSync(file, 'utf8')
    if (!text.includes('<!-- session -->')) continue
    const rendered = await renderDoc(text)
    if (rendered === text) continue
    differs++
    if (check) process.stderr.write(`${file}: its sessions differ from a fresh run\n`)
    else writeFileSync(file, rendered)
  }
  process.stderr.write(`${check ? 'checked' : 'rewrote'}: ${differs} file(s) ${check ? 'differ' : 'changed'}\n`)
  if (check && differs > 0) process.exitCode = 1
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) await main()
