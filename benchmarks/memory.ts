/*
 * npm run bench -- memory [options]: Redis bytes per tracked caller (issue 33, item 4).
 *
 *   --callers N      distinct callers per configuration (default 100,000), one request each
 *   --max-load L     quiet gate before each policy's runs (default 1.5)   --load-wait S   (default 180)
 *   --out FILE       markdown to write (default benchmarks/results/<date>-memory.md), with FILE.json
 *
 * Each configuration (every algorithm of ours, @fastify/rate-limit's Redis store) gets a fresh
 * database of a private redis-server, one Fastify app, and N requests through app.inject, each
 * from its own client address: both sides at the same layer, the plugin's default options. Limit
 * 100 per day, so every caller's state is live when measured (a token bucket's key lives until it
 * is full again: 864 s for one unit), and the check says so (keys counted = callers). The figure is
 * `used_memory` after minus before, ÷ callers. Run under `noeviction` and under `allkeys-lru`
 * with a maxmemory never reached: Redis shares the integer objects 0–9,999 only when no LRU/LFU
 * policy is in force. Every key is checked for a TTL; a sample key is broken down with
 * MEMORY USAGE, OBJECT ENCODING and its name's length.
 */
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { Redis } from 'ioredis'
import rateLimit from '../lib/index.js'
import { machineDescription, packageVersion, parseInfo, sleep, startRedis } from './common.js'
import { loadAverage, waitForQuiet, type Gate } from './quiet.js'

const FRL_MODULE: string = '@fastify/rate-limit'
const POLICIES = ['noeviction', 'allkeys-lru'] as const
type Policy = typeof POLICIES[number]

interface MemoryConfig { id: string, label: string, block?: Record<string, unknown> }

const CONFIGS: MemoryConfig[] = [
  { id: 'frl', label: '@fastify/rate-limit (Redis store)' },
  { id: 'fixed-window', label: 'fixed-window', block: { algorithm: 'fixed-window', limit: 100, window: '1d' } },
  { id: 'sliding-window', label: 'sliding-window (default)', block: { limit: 100, window: '1d' } },
  { id: 'sliding-log', label: 'sliding-log (first entry)', block: { algorithm: 'sliding-log', limit: 100, window: '1d' } },
  { id: 'token-bucket', label: 'token-bucket', block: { algorithm: 'token-bucket', limit: 100, window: '1d' } },
  { id: 'gcra', label: 'gcra', block: { algorithm: 'gcra', limit: 100, window: '1d' } },
  { id: 'period', label: 'period (calendar day)', block: { limit: 100, period: 'day', timeZone: 'UTC' } }
]

interface Sample { key: string, keyBytes: number, type: string, encoding: string, memoryUsage: number }

interface MemoryResult {
  id: string
  label: string
  policy: Policy
  callers: number
  keys: number
  withoutTtl: number
  bytesPerCaller: number
  sample: Sample | undefined
}

interface Args { callers: number, maxLoad: number, loadWait: number, out: string }

function parseArgs (argv: string[]): Args {
  const args: Args = { callers: 100_000, maxLoad: 1.5, loadWait: 180, out: `benchmarks/results/${new Date().toISOString().slice(0, 10)}-memory.md` }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const value = Number(argv[i + 1])
    if (arg === '--out') args.out = String(argv[++i])
    else if (arg === '--callers' && value > 0) { args.callers = value; i++ } else if (arg === '--max-load' && value > 0) { args.maxLoad = value; i++ } else if (arg === '--load-wait' && value >= 0) { args.loadWait = value; i++ } else throw new Error(`unknown or invalid argument ${arg ?? ''} (see the header of benchmarks/memory.ts)`)
  }
  return args
}

async function appFor (config: MemoryConfig, redis: Redis): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  if (config.block === undefined) {
    // Loaded by a non-literal specifier: its types also declare `fastify.rateLimit` (benchmarks/server.ts says why).
    const frl = ((await import(FRL_MODULE)) as { default: FastifyPluginAsync<Record<string, unknown>> }).default
    await app.register(frl, { redis, max: 100, timeWindow: 86_400_000 })
    app.get('/', async () => 'ok')
  } else {
    await app.register(rateLimit, { redis })
    app.get('/', { config: { rateLimit: config.block as never } }, async () => 'ok')
  }
  await app.ready()
  return app
}

/** Caller i's address: 10.x.y.z, distinct for i < 2^24. */
function address (i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`
}

async function usedMemory (admin: Redis): Promise<number> {
  await sleep(200) // let lazy frees and the client buffers settle
  return Number(parseInfo(await admin.info('memory')).get('used_memory'))
}

/** Every key's TTL (one pipeline per SCAN page): how many keys, how many without one. */
async function ttlCheck (admin: Redis): Promise<{ keys: number, withoutTtl: number, first: string | undefined }> {
  let cursor = '0'
  let keys = 0
  let withoutTtl = 0
  let first: string | undefined
  do {
    const [next, page] = await admin.scan(cursor, 'COUNT', 1000)
    cursor = next
    if (page.length === 0) continue
    first ??= page[0]
    keys += page.length
    const pipeline = admin.pipeline()
    for (const key of page) pipeline.pttl(key)
    for (const [, ttl] of (await pipeline.exec()) ?? []) if (ttl === -1) withoutTtl++
  } while (cursor !== '0')
  return { keys, withoutTtl, first }
}

async function sampleOf (admin: Redis, key: string): Promise<Sample> {
  const [type, encoding, usage] = await Promise.all([admin.type(key), admin.object('ENCODING', key), admin.memory('USAGE', key, 'SAMPLES', 0)])
  return { key, keyBytes: Buffer.byteLength(key), type, encoding: String(encoding), memoryUsage: Number(usage) }
}

const WARM_UP = 200
const BATCH = 500

/** One request from each of `count` callers, BATCH at a time; each must be admitted. */
async function requests (app: FastifyInstance, config: MemoryConfig, count: number, addressOf: (i: number) => string): Promise<void> {
  for (let from = 0; from < count; from += BATCH) {
    const replies = await Promise.all(Array.from({ length: Math.min(BATCH, count - from) }, async (_, k) => await app.inject({ url: '/', remoteAddress: addressOf(from + k) })))
    const failed = replies.find((reply) => reply.statusCode !== 200)
    if (failed !== undefined) throw new Error(`${config.id}: a caller's first request answered ${failed.statusCode}: ${failed.body}`)
  }
}

async function measure (config: MemoryConfig, policy: Policy, callers: number, url: string, admin: Redis): Promise<MemoryResult> {
  await admin.flushall()
  const redis = new Redis(url)
  const app = await appFor(config, redis)
  // Warm-up callers (another address range) load the scripts and size the client buffers before `before`.
  await requests(app, config, WARM_UP, (i) => `172.16.${i >> 8}.${i & 255}`)
  const before = await usedMemory(admin)
  await requests(app, config, callers, address)
  const after = await usedMemory(admin)
  const ttl = await ttlCheck(admin)
  ttl.keys -= WARM_UP
  await app.close()
  redis.disconnect()
  const sample = ttl.first === undefined ? undefined : await sampleOf(admin, ttl.first)
  return { id: config.id, label: config.label, policy, callers, keys: ttl.keys, withoutTtl: ttl.withoutTtl, bytesPerCaller: (after - before) / callers, sample }
}

function markdown (results: MemoryResult[], gates: Record<Policy, Gate & { loadEnd: number }>, args: Args, version: string): string {
  const peer = (policy: Policy): number => results.find((r) => r.id === 'frl' && r.policy === policy)?.bytesPerCaller ?? Number.NaN
  const lines = [
    `# Bytes per tracked caller (${new Date().toISOString().slice(0, 10)})`, '',
    `${machineDescription()}; Redis ${version} (private, jemalloc); @fastify/rate-limit ${packageVersion('@fastify/rate-limit')}, ioredis ${packageVersion('ioredis')}.`,
    `${args.callers.toLocaleString('en-US')} callers per configuration, one request each through app.inject (limit 100 per day: all state live), the plugin's default options.`,
    ...POLICIES.map((p) => `- ${p}: load ${gates[p].loadStart.toFixed(2)} at start (${gates[p].gate}), ${gates[p].loadEnd.toFixed(2)} at end`), '',
    '| configuration | policy | bytes per caller | × peer | callers’ keys | keys without TTL | sample key (bytes) | type / encoding | MEMORY USAGE | rest (dict slots, expiry entry) |',
    '| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |'
  ]
  for (const r of results) {
    const s = r.sample
    lines.push(`| ${r.label} | ${r.policy} | ${r.bytesPerCaller.toFixed(1)} | ${(r.bytesPerCaller / peer(r.policy)).toFixed(2)} | ${r.keys} | ${r.withoutTtl} | \`${s?.key ?? '-'}\` (${s?.keyBytes ?? '-'}) | ${s?.type ?? '-'} / ${s?.encoding ?? '-'} | ${s?.memoryUsage ?? '-'} | ${s === undefined ? '-' : (r.bytesPerCaller - s.memoryUsage).toFixed(1)} |`)
  }
  return lines.join('\n') + '\n'
}

export async function runMemoryBench (argv: string[]): Promise<void> {
  const args = parseArgs(argv)
  const server = await startRedis()
  if (!server.private) throw new Error('the memory benchmark flushes and reconfigures its Redis: it needs a private redis-server on PATH (BENCH_REDIS_URL is not used)')
  const admin = new Redis(server.url)
  const results: MemoryResult[] = []
  const gates = {} as Record<Policy, Gate & { loadEnd: number }>
  try {
    for (const policy of POLICIES) {
      // maxmemory must be set for the policy to change integer sharing; 16 GB is never reached here.
      await admin.config('SET', 'maxmemory-policy', policy, 'maxmemory', policy === 'noeviction' ? '0' : String(16 * 2 ** 30))
      const gate = await waitForQuiet(`memory (${policy})`, { maxLoad: args.maxLoad, waitS: args.loadWait })
      for (const config of CONFIGS) {
        const result = await measure(config, policy, args.callers, server.url, admin)
        process.stderr.write(`  ${policy} ${config.id}: ${result.bytesPerCaller.toFixed(1)} B per caller, ${result.keys} keys, ${result.withoutTtl} without TTL\n`)
        results.push(result)
      }
      gates[policy] = { ...gate, loadEnd: loadAverage() }
    }
  } finally {
    admin.disconnect()
    await server.stop()
  }
  const text = markdown(results, gates, args, server.version)
  mkdirSync(dirname(args.out), { recursive: true })
  writeFileSync(args.out, text)
  writeFileSync(args.out.replace(/\.md$/, '') + '.json', JSON.stringify({ args, gates, results }, null, 2) + '\n')
  process.stdout.write(text)
  const missing = results.filter((r) => r.withoutTtl > 0 || r.keys < r.callers)
  if (missing.length > 0) {
    process.stderr.write(`keys without a TTL, or state that expired before it was measured: ${missing.map((r) => `${r.policy} ${r.id}`).join(', ')}\n`)
    process.exitCode = 1
  }
}
