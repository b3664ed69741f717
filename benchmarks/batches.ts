import { createRequire } from 'node:module'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import rateLimit, { ALGORITHMS, type AlgorithmName } from '../lib/index.js'
import { blockFor, clientIp, KEYS_10K } from './configs.js'
import { commandDelta, commandStats, redisCpuSeconds } from './common.js'

/*
 * The batch script in full batches, beside its floors, on the same server in
 * the same run (issue 17): per algorithm, decisions through the public
 * `fastify.rateLimit.consume()` (maxBatch 128; 512 started per event-loop
 * turn, so four calls of 128 are in flight), and per floor the same number of
 * keys: a Lua loop over 128 keys doing INCR (+ PEXPIRE when 1), a loop doing
 * GET + tonumber + SET … PX, and @fastify/rate-limit's own script (its
 * RedisStore's command), one EVALSHA per decision in a pipeline of 512.
 * Script µs is commandstats usec of FCALL, EVALSHA and EVAL ÷ decisions (script execution alone);
 * Redis CPU is INFO cpu (user + sys) ÷ decisions (parsing and replies too).
 * Every case runs once per round (BATCH_ROUNDS), and each figure is the median.
 */

export const FULL_BATCH = 128
const PER_TURN = 4 * FULL_BATCH
const TTL_MS = 3_600_000

/** Issue 17's script-call µs per decision in full batches (its "EVALSHA"; FCALL since the Functions library), at most. */
export const EVALSHA_TARGET_US: Record<AlgorithmName, number> = { 'fixed-window': 1.5, 'sliding-window': 2.5, 'token-bucket': 2.5, gcra: 2.5, 'sliding-log': 4.0 }

export type FloorId = 'incr-loop' | 'get-set-loop' | 'frl'

export interface BatchFigures {
  /** Decisions (floors: keys) measured. */
  decisions: number
  scriptCalls: number
  decisionsPerCall: number
  evalUsPerDecision: number
  redisCpuUsPerDecision: number
  /** Commands other than the script calls ÷ decisions: the redis.call each decision made. */
  callsPerDecision: number
  /** Instructions Redis executed ÷ decisions (benchmarks/instructions.ts: callgrind): all of them, and inside FCALL/EVAL/EVALSHA. */
  instructions?: { total: number, script: number }
}

export interface AlgorithmBatch extends BatchFigures { algorithm: AlgorithmName, allowed: number, degraded: number }
export interface FloorBatch extends BatchFigures { id: FloorId, label: string }
export interface BatchBench { algorithms: AlgorithmBatch[], floors: FloorBatch[], rounds?: number }

/** What Redis spent on `work`, which takes `decisions` decisions. */
export type Meter = (decisions: number, work: () => Promise<void>) => Promise<BatchFigures>

/** The commandstats and INFO cpu meter. */
export const commandMeter = (admin: Redis): Meter => async (decisions, work) => {
  const commandsBefore = await commandStats(admin)
  const cpuBefore = await redisCpuSeconds(admin)
  await work()
  const cpu = await redisCpuSeconds(admin) - cpuBefore
  const delta = commandDelta(commandsBefore, await commandStats(admin))
  return {
    decisions,
    scriptCalls: delta.evalCalls,
    decisionsPerCall: delta.evalCalls > 0 ? decisions / delta.evalCalls : Number.NaN,
    evalUsPerDecision: delta.evalUsec / decisions,
    redisCpuUsPerDecision: cpu * 1e6 / decisions,
    callsPerDecision: (delta.total - delta.evalCalls) / decisions
  }
}

/** `count` decisions from key `from` on, PER_TURN started per turn; resolves to how many were admitted. */
async function consumeMany (app: FastifyInstance, policy: string, from: number, count: number): Promise<number> {
  let allowed = 0
  for (let n = from; n < from + count; n += PER_TURN) {
    const turn = []
    for (let i = n; i < Math.min(from + count, n + PER_TURN); i++) turn.push(app.rateLimit.consume(policy, { ip: clientIp(i % KEYS_10K) }))
    for (const decision of await Promise.all(turn)) if (decision.allowed) allowed++
  }
  return allowed
}

/** Plugin options a harness may add (the instruction count's slow server needs a longer timeout). */
export interface BatchOptions { meter: Meter, timeout?: number, only?: readonly AlgorithmName[], maxBatch?: number }

export async function algorithmBatches (url: string, count: number, options: BatchOptions): Promise<AlgorithmBatch[]> {
  const client = new Redis(url)
  const app = Fastify({ logger: false })
  const policies = Object.fromEntries(ALGORITHMS.map((algorithm) => [algorithm, blockFor(algorithm, '10k')]))
  try {
    await app.register(rateLimit, { redis: client, prefix: 'bb', maxBatch: options.maxBatch ?? FULL_BATCH, metrics: false, policies: policies as never, ...(options.timeout === undefined ? {} : { timeout: options.timeout }) })
    await app.ready()
    const out: AlgorithmBatch[] = []
    for (const algorithm of options.only ?? ALGORITHMS) {
      // A first pass creates the 10k keys (and loads the script); the measured pass finds them all.
      await consumeMany(app, algorithm, 0, KEYS_10K)
      const degradedBefore = app.rateLimit.stats().degraded
      let allowed = 0
      const figures = await options.meter(count, async () => { allowed = await consumeMany(app, algorithm, KEYS_10K, count) })
      out.push({ algorithm, ...figures, allowed, degraded: app.rateLimit.stats().degraded - degradedBefore })
    }
    return out
  } finally {
    await app.close()
    client.disconnect()
  }
}

const FLOOR_SCRIPTS: Record<Exclude<FloorId, 'frl'>, [string, string]> = {
  'incr-loop': ['Lua loop over 128 keys: INCR (+ PEXPIRE when 1)',
    "for i = 1, #KEYS do if redis.call('INCR', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[1]) end end return 1"],
  'get-set-loop': ['Lua loop over 128 keys: GET + tonumber + SET … PX',
    "for i = 1, #KEYS do local v = tonumber(redis.call('GET', KEYS[i])) or 0 redis.call('SET', KEYS[i], v + 1, 'PX', ARGV[1]) end return 1"]
}

/** `count` keys through one floor script, 128 keys per call, four calls per pipeline. */
async function loopFloor (client: Redis, sha: string, tag: string, from: number, count: number): Promise<void> {
  for (let n = from; n < from + count; n += PER_TURN) {
    const pipeline = client.pipeline()
    for (let call = n; call < Math.min(from + count, n + PER_TURN); call += FULL_BATCH) {
      const keys = Array.from({ length: FULL_BATCH }, (_, i) => `bf:{${clientIp((call + i) % KEYS_10K)}}:${tag}`)
      pipeline.evalsha(sha, keys.length, ...keys, TTL_MS)
    }
    await pipeline.exec()
  }
}

type FrlPipeline = ReturnType<Redis['pipeline']> & { rateLimit: (key: string, windowMs: number, max: number, continueExceeding: boolean, backoff: boolean) => unknown }
type FrlStore = new (continueExceeding: boolean, exponentialBackoff: boolean, redis: Redis, key?: string) => { key: string }

/** @fastify/rate-limit's own script (its RedisStore defines the command on the client), one EVALSHA per decision, 512 per pipeline. */
async function frlFloor (client: Redis, from: number, count: number): Promise<void> {
  const RedisStore = createRequire(import.meta.url)('@fastify/rate-limit/store/RedisStore.js') as FrlStore
  const store = new RedisStore(false, false, client, 'frl:')
  for (let n = from; n < from + count; n += PER_TURN) {
    const pipeline = client.pipeline() as FrlPipeline
    for (let i = n; i < Math.min(from + count, n + PER_TURN); i++) pipeline.rateLimit(store.key + clientIp(i % KEYS_10K), TTL_MS, 1_000_000_000, false, false)
    await pipeline.exec()
  }
}

export async function floors (url: string, count: number, meter: Meter): Promise<FloorBatch[]> {
  const client = new Redis(url)
  try {
    const out: FloorBatch[] = []
    for (const [id, [label, source]] of Object.entries(FLOOR_SCRIPTS) as Array<[FloorId, [string, string]]>) {
      const sha = String(await client.script('LOAD', source))
      await loopFloor(client, sha, id, 0, KEYS_10K)
      out.push({ id, label, ...await meter(count, async () => { await loopFloor(client, sha, id, KEYS_10K, count) }) })
    }
    await frlFloor(client, 0, KEYS_10K)
    out.push({ id: 'frl', label: '@fastify/rate-limit\'s script, one EVALSHA per decision, pipelined', ...await meter(count, async () => { await frlFloor(client, KEYS_10K, count) }) })
    return out
  } finally {
    client.disconnect()
  }
}

/** Rounds the batch benchmark takes by default: this VM's speed drifts by up to 1.6× within minutes, so one pass of each case compares cases measured at different speeds. */
export const BATCH_ROUNDS = 3

const median = (values: number[]): number => {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)] as number
}

/** Each timed figure the median of its rounds (the counts are the same in every round). */
function medianOf<T extends BatchFigures> (rows: T[]): T {
  const first = rows[0] as T
  return { ...first, evalUsPerDecision: median(rows.map((row) => row.evalUsPerDecision)), redisCpuUsPerDecision: median(rows.map((row) => row.redisCpuUsPerDecision)) }
}

/**
 * Every algorithm in full batches, then the floors, `rounds` times (each case
 * in every round, so every case sees the machine's fast and slow moments), each
 * figure the median of its rounds; `count` decisions each (a multiple of 512
 * keeps every call full).
 */
export async function runBatchBench (url: string, admin: Redis, count: number, rounds = BATCH_ROUNDS): Promise<BatchBench> {
  const meter = commandMeter(admin)
  const passes: BatchBench[] = []
  for (let round = 0; round < rounds; round++) passes.push({ algorithms: await algorithmBatches(url, count, { meter }), floors: await floors(url, count, meter) })
  const first = passes[0] as BatchBench
  return {
    rounds,
    algorithms: first.algorithms.map((_row, i) => medianOf(passes.map((pass) => pass.algorithms[i] as AlgorithmBatch))),
    floors: first.floors.map((_row, i) => medianOf(passes.map((pass) => pass.floors[i] as FloorBatch)))
  }
}

const f = (value: number, digits = 2): string => Number.isFinite(value) ? value.toFixed(digits) : '–'
const times = (value: number, floor: number | undefined): string => floor !== undefined && Number.isFinite(value / floor) ? `${(value / floor).toFixed(2)}×` : '–'

/** The table: algorithms with their ratios to the floors, then the floors themselves. */
export function batchMarkdown (bench: BatchBench): string {
  const floor = (id: FloorId): FloorBatch | undefined => bench.floors.find((row) => row.id === id)
  const [incr, getSet, frl] = [floor('incr-loop'), floor('get-set-loop'), floor('frl')]
  const count = bench.algorithms[0]?.decisions ?? bench.floors[0]?.decisions ?? 0
  const lines = [
    '## Scripts in full batches, beside their floors (same server, same run)',
    '',
    `Medians of ${bench.rounds ?? 1} round(s), every case in each. Per algorithm, ${count.toLocaleString('en-US')} decisions through \`fastify.rateLimit.consume()\` over 10k keys (already created), maxBatch ${FULL_BATCH}, ${PER_TURN} started per event-loop turn; ` +
      'per floor the same number of keys. Script µs is INFO commandstats usec of FCALL, EVALSHA and EVAL ÷ decisions (script execution only; the plugin calls its library by FCALL, the floors are EVALSHA); Redis CPU is INFO cpu user + sys ÷ decisions (parsing, replies, I/O too); ' +
      'the ×-columns divide script µs by the floor\'s, and the last column Redis CPU by @fastify/rate-limit\'s.',
    '',
    '| script | decisions per call | script µs/decision (FCALL, EVALSHA) | Redis CPU µs/decision | redis.call/decision | × INCR loop | × GET+SET loop | × @fastify/rate-limit | Redis CPU × @fastify/rate-limit | target (issue 17) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of bench.algorithms) {
    const flags = [row.decisionsPerCall < FULL_BATCH - 0.5 ? ' **(batches not full)**' : '', row.degraded > 0 || row.allowed !== row.decisions ? ` **(${row.decisions - row.allowed} not admitted, ${row.degraded} degraded)**` : ''].join('')
    lines.push(`| ${row.algorithm}${flags} | ${f(row.decisionsPerCall, 1)} | ${f(row.evalUsPerDecision)} | ${f(row.redisCpuUsPerDecision)} | ${f(row.callsPerDecision)} | ${times(row.evalUsPerDecision, incr?.evalUsPerDecision)} | ` +
      `${times(row.evalUsPerDecision, getSet?.evalUsPerDecision)} | ${times(row.evalUsPerDecision, frl?.evalUsPerDecision)} | ${times(row.redisCpuUsPerDecision, frl?.redisCpuUsPerDecision)} | ≤ ${EVALSHA_TARGET_US[row.algorithm].toFixed(1)} µs |`)
  }
  for (const row of bench.floors) {
    lines.push(`| floor: ${row.label} | ${f(row.decisionsPerCall, 1)} | ${f(row.evalUsPerDecision)} | ${f(row.redisCpuUsPerDecision)} | ${f(row.callsPerDecision)} | ${times(row.evalUsPerDecision, incr?.evalUsPerDecision)} | ` +
      `${times(row.evalUsPerDecision, getSet?.evalUsPerDecision)} | ${times(row.evalUsPerDecision, frl?.evalUsPerDecision)} | ${times(row.redisCpuUsPerDecision, frl?.redisCpuUsPerDecision)} | |`)
  }
  return lines.join('\n') + '\n'
}
