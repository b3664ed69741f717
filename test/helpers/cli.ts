import { fileURLToPath } from 'node:url'
import { runCli } from '../../lib/console/cli/cli.js'
import { spawnOwned } from './processes.js'

/** The CLI's entry, run from source as the package's bin runs its build. */
export const CLI_MAIN = fileURLToPath(new URL('../../lib/console/cli/main.ts', import.meta.url))

export interface CliRun { code: number | null, out: string, err: string }

/** The CLI as a real child process (`node --import tsx lib/console/cli/main.ts …`), with `env` over this process's. */
export async function cliChild (args: string[], env: Record<string, string | undefined> = {}): Promise<CliRun> {
  const child = spawnOwned(process.execPath, ['--import', 'tsx', CLI_MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env, NODE_OPTIONS: '' } })
  let out = ''
  let err = ''
  child.stdout?.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { err += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.once('close', (exit) => { resolve(exit) }))
  return { code, out, err }
}

/** The same command in this process (runCli, as main.ts calls it): the cheap form for the many cases of one file. */
export async function cliHere (args: string[], env: Record<string, string | undefined> = {}): Promise<CliRun> {
  let out = ''
  let err = ''
  const code = await runCli(args, {
    out: (text) => { out += text + '\n' },
    err: (text) => { err += text + '\n' },
    env: { ...env },
    tty: false
  })
  return { code, out, err }
}

/** A message as the CLI must give it: one line, no stack trace. */
export function oneLineError (run: CliRun): boolean {
  const lines = run.err.trimEnd().split('\n')
  return lines.length === 1 && !/\n\s+at /.test(run.err) && (lines[0] ?? '').startsWith('fastify-redis-rate-limit: ')
}
