import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { addressesOf, type BenchConfig } from './configs.js'
import type { DriveOptions, DriveResult, LoadDriver } from './load.js'

/*
 * `--load wrk`: the same configurations driven by wrk (Debian's `wrk`
 * package; benchmarks/install-wrk.sh installs it). benchmarks/wrk-keys.lua
 * sends the addresses the harness writes to a file from clientIp(), so wrk
 * and autocannon runs carry the same identities, and prints a WRK_JSON line
 * (requests, errors, p50/p99 from wrk's latency distribution, status codes
 * where counted). wrk's CPU is counted with the harness's as the load
 * generator's: a child that has exited is in the parent's cutime/cstime.
 */

const LUA = fileURLToPath(new URL('./wrk-keys.lua', import.meta.url))

/** Thrown when --load wrk finds no wrk: its message says how to install it. */
export class WrkMissing extends Error {}

const WRK_MISSING = 'wrk is not installed: run `npm run bench:install-wrk` (benchmarks/install-wrk.sh: apt-get install -y wrk on Debian/Ubuntu), ' +
  'or install the wrk package with your package manager, or drop --load wrk (autocannon is the default)'

interface WrkJson {
  requests: number
  durationUs: number
  connectErrors: number
  readErrors: number
  writeErrors: number
  statusErrors: number
  timeouts: number
  p50Us: number
  p99Us: number
  codes: Record<string, number>
}

/** `wrk -v` prints its version (and exits 1); undefined when there is no wrk on PATH. */
function wrkVersion (): string | undefined {
  const probe = spawnSync('wrk', ['-v'], { encoding: 'utf8' })
  if (probe.error !== undefined) return undefined
  return /wrk\s+(\S+)/.exec(`${probe.stdout}${probe.stderr}`)?.[1] ?? '?'
}

/** The counts matter in the flood and overload cases (how many 200s exactly); elsewhere parsing headers would only cost wrk CPU. */
const countsCodes = (config: BenchConfig): boolean => config.load === 'overload' || config.load === 'flood'

function toResult (json: WrkJson, counted: boolean): DriveResult {
  const statusCodes: Record<string, number> = counted ? { ...json.codes } : { '2xx/3xx': json.requests - json.statusErrors }
  if (!counted && json.statusErrors > 0) statusCodes['4xx/5xx'] = json.statusErrors
  return {
    seconds: json.durationUs / 1e6,
    responses: json.requests,
    non2xx: json.statusErrors,
    errors: json.connectErrors + json.readErrors + json.writeErrors + json.timeouts,
    statusCodes,
    p50Ms: json.p50Us / 1000,
    p99Ms: json.p99Us / 1000
  }
}

async function runWrk (args: string[]): Promise<WrkJson> {
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', resolve)
  })
  const line = stdout.split('\n').find((l) => l.startsWith('WRK_JSON '))
  if (line === undefined) throw new Error(`wrk exited with ${String(code)} and no WRK_JSON line: ${(stderr || stdout).trim().split('\n').slice(0, 3).join(' ')}`)
  return JSON.parse(line.slice(9)) as WrkJson
}

/** A wrk driver, or an Error that says how to install wrk. */
export function wrkDriver (threads: number): LoadDriver {
  const version = wrkVersion()
  if (version === undefined) throw new WrkMissing(WRK_MISSING)
  const dir = mkdtempSync(join(tmpdir(), 'rrl-bench-wrk-'))
  const files = new Map<number, string>()
  // One address file per key count (10,000 or 1), written once per harness run.
  const fileFor = (config: BenchConfig): string => {
    const addresses = addressesOf(config)
    let file = files.get(addresses.length)
    if (file === undefined) {
      file = join(dir, `addresses-${addresses.length}.txt`)
      writeFileSync(file, addresses.join('\n') + '\n')
      files.set(addresses.length, file)
    }
    return file
  }
  const drive = async (config: BenchConfig, { port, connections, seconds }: DriveOptions): Promise<DriveResult> => {
    const counted = countsCodes(config)
    const wholeSeconds = Math.max(1, Math.round(seconds))
    const json = await runWrk(['-t', String(Math.min(threads, connections)), '-c', String(connections), '-d', `${wholeSeconds}s`, '--timeout', '10s',
      '-s', LUA, `http://127.0.0.1:${port}/`, '--', fileFor(config), counted ? 'codes' : ''])
    return toResult(json, counted)
  }
  return { tool: 'wrk', version, drive, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}
