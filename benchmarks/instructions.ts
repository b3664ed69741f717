/*
 * npm run bench:instructions
 *
 * What Redis executes per decision, counted in instructions rather than
 * seconds: a private redis-server runs under valgrind's callgrind, and each
 * case (the batch script in full batches per algorithm, then the floors of
 * benchmarks/batches.ts) is one callgrind dump. An instruction count does not
 * move with the machine's load or the VM's speed, so two runs, or two commits,
 * compare to the instruction, where a µs figure on this VM drifts by up to
 * 1.6× within an hour. It does not replace the timed benchmarks (cache misses
 * and syscalls cost more than their instructions); it is how a change to the
 * Lua is judged.
 *
 * Per case: instructions of the whole server ÷ decisions (parsing, replies and
 * I/O too), those inside evalGenericCommand or fcallCommand (the script's execution, what
 * commandstats times) ÷ decisions, and for the default algorithm the functions
 * that spend them (self cost; Redis's static functions, the Lua VM's among
 * them, have no symbol in Debian's build and show as addresses).
 * Writes benchmarks/results/<date>-instructions.md.
 *
 *   --only a,b    algorithms to measure (default all five)
 *   --no-floors   skip the floors (a quicker loop while changing the Lua)
 *   --single      one decision per call only (issue 33, item 1): every algorithm of --only
 *                 and @fastify/rate-limit's script, and where fixed-window's call spends them
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { readdirSync, statSync, writeFileSync, mkdirSync } from 'node:fs'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { freePort, ping, spawnOwned, tempDir } from '../test/helpers/processes.js'
import { algorithmBatches, commandMeter, floors, type BatchFigures, type Meter } from './batches.js'
import { loadAverage } from './quiet.js'
import { ALGORITHMS, type AlgorithmName } from '../lib/index.js'

const HERE = dirname(fileURLToPath(import.meta.url))
const DECISIONS = 10_240
/** maxBatch 1 sends each decision as its own call: fewer suffice. */
const SINGLE_DECISIONS = 2_048
/** About what an instance under load sends per call (autocannon, 50 connections: 12 per call). */
const SMALL_BATCH = 16
/** The script's entries in Redis 7: EVAL and EVALSHA go through the first, FCALL through the second. */
const SCRIPT_ENTRIES = ['evalGenericCommand', 'fcallCommand']

export interface Callgrind { url: string, pid: number, dir: string, stop: () => void }

export async function startCallgrind (): Promise<Callgrind> {
  if (spawnSync('valgrind', ['--version'], { stdio: 'ignore' }).status !== 0) throw new Error('valgrind is not installed (apt-get install valgrind)')
  const port = await freePort()
  const dir = tempDir('callgrind')
  const child = spawnOwned('valgrind', ['--tool=callgrind', `--callgrind-out-file=${join(dir, 'cg.out')}`,
    'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir])
  const deadline = Date.now() + 60_000
  while (!(await ping(port))) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error('redis-server under callgrind did not answer within 60 s')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return { url: `redis://127.0.0.1:${port}`, pid: child.pid as number, dir, stop: () => child.kill('SIGKILL') }
}

/** The newest dump file callgrind wrote. */
function newestDump (dir: string): string {
  const dumps = readdirSync(dir).filter((name) => /^cg\.out\.\d+$/.test(name)).map((name) => join(dir, name))
  return dumps.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0] as string
}

export interface Dump { total: number, inclusive: Map<string, number>, self: Array<[string, number]> }

/** One callgrind_annotate listing: the program total, and per function ("fn (object)") its instructions. */
function annotate (file: string, inclusive: boolean): { total: number, rows: Array<[string, string, number]> } {
  const text = execFileSync('callgrind_annotate', [`--inclusive=${inclusive ? 'yes' : 'no'}`, '--threshold=100', file], { encoding: 'utf8', maxBuffer: 64 << 20 })
  const total = Number(/([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS/.exec(text)?.[1]?.replaceAll(',', '') ?? Number.NaN)
  const rows: Array<[string, string, number]> = []
  for (const line of text.split('\n')) {
    // "1,234 (5.6%)  file:function [object]"
    const match = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+?)\s+\[(.+)\]\s*$/.exec(line)
    if (match === null) continue
    rows.push([(match[2] as string).replace(/^.*:/, ''), (match[3] as string).replace(/^.*\//, ''), Number((match[1] as string).replaceAll(',', ''))])
  }
  return { total, rows }
}

function readDump (file: string): Dump {
  const self = annotate(file, false)
  // A function listed under several objects or call contexts: its largest inclusive count.
  const inclusive = new Map<string, number>()
  for (const [fn, , ir] of annotate(file, true).rows) inclusive.set(fn, Math.max(ir, inclusive.get(fn) ?? 0))
  return { total: self.total, inclusive, self: self.rows.map(([fn, object, ir]) => [`${fn} (${object})`, ir]) }
}

/** Instructions inside the script entries (NaN when the dump has none). */
function scriptInstructions (dump: Dump): number {
  const counts = SCRIPT_ENTRIES.map((name) => dump.inclusive.get(name)).filter((ir) => ir !== undefined)
  return counts.length === 0 ? Number.NaN : counts.reduce((sum, ir) => sum + ir, 0)
}

/** A meter that adds callgrind's counts (zeroed before the work, dumped after) to the commandstats figures. */
export function instructionMeter (server: Callgrind, admin: Redis, dumps: Map<number, Dump>): Meter {
  const commands = commandMeter(admin)
  const control = (flag: string): void => { execFileSync('callgrind_control', [flag, String(server.pid)], { stdio: 'ignore' }) }
  return async (decisions, work) => {
    control('--zero')
    const figures = await commands(decisions, work)
    control('--dump')
    const dump = readDump(newestDump(server.dir))
    dumps.set(dumps.size, dump)
    return { ...figures, instructions: { total: dump.total / decisions, script: scriptInstructions(dump) / decisions } }
  }
}

const n = (value: number | undefined): string => value === undefined || !Number.isFinite(value) ? '–' : Math.round(value).toLocaleString('en-US')

function row (label: string, figures: BatchFigures, floor: BatchFigures | undefined): string {
  const ratio = floor?.instructions === undefined || figures.instructions === undefined ? '–' : `${(figures.instructions.script / floor.instructions.script).toFixed(2)}×`
  return `| ${label} | ${figures.decisionsPerCall.toFixed(1)} | ${n(figures.instructions?.script)} | ${n(figures.instructions?.total)} | ${figures.callsPerDecision.toFixed(2)} | ${ratio} |`
}

/** The functions that spend the default algorithm's instructions (self cost), per decision. */
function breakdown (dump: Dump, decisions: number, top = 25): string[] {
  const lines = ['| function (object) | instructions per decision | share |', '| --- | ---: | ---: |']
  // Frames live at the dump (main, below main) show the whole total as their own: not a cost.
  const costs = dump.self.filter(([, ir]) => ir < dump.total * 0.99)
  for (const [name, ir] of costs.sort((a, b) => b[1] - a[1]).slice(0, top)) {
    lines.push(`| \`${name}\` | ${n(ir / decisions)} | ${(ir / dump.total * 100).toFixed(1)} % |`)
  }
  return lines
}

function parseArgs (argv: string[]): { only: AlgorithmName[], floors: boolean, single: boolean } {
  const args = { only: [...ALGORITHMS], floors: true, single: false }
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--no-floors') args.floors = false
    else if (argv[i] === '--single') args.single = true
    else if (argv[i] === '--only') args.only = (argv[++i] ?? '').split(',') as AlgorithmName[]
    else throw new Error(`unknown argument ${argv[i]} (see the header of benchmarks/instructions.ts)`)
  }
  for (const name of args.only) if (!ALGORITHMS.includes(name)) throw new Error(`--only: unknown algorithm ${name}`)
  return args
}

/** One decision per call for every algorithm, beside the peer's script: what a call costs before its first decision. */
async function singleCalls (server: Callgrind, admin: Redis, only: AlgorithmName[], loadStart: number): Promise<string> {
  const dumps = new Map<number, Dump>()
  const meter = instructionMeter(server, admin, dumps)
  const rows = await algorithmBatches(server.url, SINGLE_DECISIONS, { meter, timeout: 30_000, only, maxBatch: 1 })
  const fixedDump = dumps.get(rows.findIndex((r) => r.algorithm === 'fixed-window'))
  const peer = (await floors(server.url, SINGLE_DECISIONS, meter)).find((r) => r.id === 'frl')
  const peerDump = dumps.get(dumps.size - 1)
  const ratio = (r: BatchFigures): string => peer?.instructions === undefined || r.instructions === undefined ? '–' : `${(r.instructions.script / peer.instructions.script).toFixed(2)}×`
  return [
    `# Redis instructions per decision at one decision per call, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `callgrind, ${SINGLE_DECISIONS.toLocaleString('en-US')} decisions per case: consume() with maxBatch 1 (each decision its own call of the batch function), and @fastify/rate-limit's script, one EVALSHA per decision. Load ${loadStart.toFixed(2)} at the start (counts do not depend on it).`,
    '',
    '| case | in the script per decision | whole server per decision | redis.call per decision | script × @fastify/rate-limit\'s |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.algorithm}${r.degraded > 0 ? ` **(${r.degraded} degraded)**` : ''} | ${n(r.instructions?.script)} | ${n(r.instructions?.total)} | ${r.callsPerDecision.toFixed(2)} | ${ratio(r)} |`),
    ...(peer === undefined ? [] : [`| @fastify/rate-limit's script | ${n(peer.instructions?.script)} | ${n(peer.instructions?.total)} | ${peer.callsPerDecision.toFixed(2)} | 1.00× |`]),
    '',
    '## Where a fixed-window call spends them (self cost, whole server)',
    '',
    ...(fixedDump === undefined ? ['(not measured)'] : breakdown(fixedDump, SINGLE_DECISIONS, 30)),
    '',
    '## Where @fastify/rate-limit\'s call spends them',
    '',
    ...(peerDump === undefined ? ['(not measured)'] : breakdown(peerDump, SINGLE_DECISIONS, 30)),
    ''
  ].join('\n')
}

async function main (): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  if (args.single) {
    const loadStart = loadAverage()
    const server = await startCallgrind()
    const admin = new Redis(server.url)
    try {
      const markdown = await singleCalls(server, admin, args.only, loadStart)
      process.stdout.write(markdown)
      const out = join(HERE, 'results', `${new Date().toISOString().slice(0, 10)}-instructions-single.md`)
      writeFileSync(out, markdown)
      process.stderr.write(`written ${out}\n`)
    } finally {
      admin.disconnect()
      server.stop()
    }
    return
  }
  const loadStart = loadAverage()
  const server = await startCallgrind()
  const admin = new Redis(server.url)
  const dumps = new Map<number, Dump>()
  try {
    const meter = instructionMeter(server, admin, dumps)
    // Under callgrind Redis runs about 50× slower: a timeout that lets every decision reach it.
    const algorithms = await algorithmBatches(server.url, DECISIONS, { meter, timeout: 30_000, only: args.only })
    const defaultDump = dumps.get(algorithms.findIndex((r) => r.algorithm === 'sliding-window'))
    // One decision per call: what a call costs before its first decision (a batch shares it).
    const single = args.only.includes('sliding-window') ? await algorithmBatches(server.url, SINGLE_DECISIONS, { meter, timeout: 30_000, only: ['sliding-window'], maxBatch: 1 }) : []
    const small = args.only.includes('sliding-window') ? await algorithmBatches(server.url, SINGLE_DECISIONS, { meter, timeout: 30_000, only: ['sliding-window'], maxBatch: SMALL_BATCH }) : []
    const floorRows = args.floors ? await floors(server.url, DECISIONS, meter) : []
    const getSet = floorRows.find((r) => r.id === 'get-set-loop')
    const lines = [
      `# Redis instructions per decision, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
      '',
      `redis-server ${String(await admin.info('server')).match(/redis_version:(\S+)/)?.[1] ?? '?'} under valgrind ${spawnSync('valgrind', ['--version'], { encoding: 'utf8' }).stdout.trim()} (callgrind, instructions executed: Ir). ` +
        `${DECISIONS.toLocaleString('en-US')} decisions per case, as benchmarks/batches.ts makes them (consume(), maxBatch 128, 10k keys already created; floors the same number of keys). ` +
        `Load average ${loadStart.toFixed(2)} at the start, ${loadAverage().toFixed(2)} at the end (instruction counts do not depend on it).`,
      '',
      '| case | decisions per call | in the script (evalGenericCommand, fcallCommand) per decision | whole server per decision | redis.call per decision | script × GET+SET loop |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      ...algorithms.map((r) => row(r.algorithm + (r.degraded > 0 ? ` **(${r.degraded} degraded)**` : ''), r, getSet)),
      ...single.map((r) => row(`${r.algorithm}, one decision per call (maxBatch 1)${r.degraded > 0 ? ` **(${r.degraded} degraded)**` : ''}`, r, getSet)),
      ...small.map((r) => row(`${r.algorithm}, ${SMALL_BATCH} decisions per call (maxBatch ${SMALL_BATCH})${r.degraded > 0 ? ` **(${r.degraded} degraded)**` : ''}`, r, getSet)),
      ...floorRows.map((r) => row(`floor: ${r.label}`, r, getSet)),
      '',
      '## Where sliding-window\'s instructions go (self cost, whole server)',
      '',
      ...(defaultDump === undefined ? ['(no dump)'] : breakdown(defaultDump, DECISIONS)),
      ''
    ]
    const markdown = lines.join('\n')
    process.stdout.write(markdown)
    const out = join(HERE, 'results', `${new Date().toISOString().slice(0, 10)}-instructions.md`)
    mkdirSync(dirname(out), { recursive: true })
    writeFileSync(out, markdown)
    process.stderr.write(`written ${out}\n`)
  } finally {
    admin.disconnect()
    server.stop()
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
    process.exit(1)
  })
}
