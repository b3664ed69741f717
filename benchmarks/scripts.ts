/*
 * Redis-side cost of each script, without HTTP. First the batch script in full
 * batches beside its floors (benchmarks/batches.ts: the issue 17 figures).
 * Then each per-algorithm script alone, without Fastify: a pipelined EVALSHA
 * loop against the private server. Per path (admitted over 10k keys, admitted
 * on one hot key, rejected) it reports µs per decision three ways (wall clock
 * of the loop, Redis CPU from INFO cpu, EVALSHA usec_per_call from INFO
 * commandstats) and the number of redis.call per decision (every other
 * commandstats call ÷ EVALSHA calls). Then memory per idle identity.
 *
 * Scripts are assembled from scripts/*.lua (test/helpers/lua.ts, loadScripts) with the argument contract
 * KEYS[1] = key, ARGV = limit, windowMs, burst, cost, now ('' = Redis TIME), dry ('' = write).
 * When test/helpers/lua.ts exports buildMultiScript (multi-limits), a two-block
 * decision (sliding-window + fixed-window in one call) is measured too.
 */
import { Redis } from 'ioredis'
import { ALGORITHMS, type AlgorithmName } from '../lib/index.js'
import { DECISION_STRIDE } from '../lib/store/redis/protocol.js'
import { loadScripts } from '../test/helpers/lua.js'
import { clientIp, KEYS_10K } from './configs.js'
import { commandStats, parseInfo, redisCpuSeconds, type BenchRedis } from './common.js'
import { BATCH_ROUNDS, batchMarkdown, runBatchBench, type BatchBench } from './batches.js'

const SUFFIX: Record<AlgorithmName, string> = { 'fixed-window': 'FC', 'sliding-window': 'SW', 'sliding-log': 'sl', 'token-bucket': 'TB', gcra: 'GC' }

/** limit, windowMs, burst: never rejects at these rates. */
const HIGH: Record<AlgorithmName, [number, number, number]> = {
  'fixed-window': [100_000_000, 3_600_000, 100_000_000],
  'sliding-window': [100_000_000, 3_600_000, 100_000_000],
  'sliding-log': [10_000, 1_000, 10_000],
  'token-bucket': [100_000_000, 60_000, 100_000_000],
  gcra: [100_000_000, 60_000, 100_000_000]
}

interface PathResult {
  algorithm: string
  path: string
  decisions: number
  wallUs: number
  redisCpuUs: number
  evalUsecPerCall: number
  callsPerDecision: number
  commands: string
  replyOk: boolean
}

interface MemoryResult {
  algorithm: string
  state: string
  memoryUsage: number
  perKeyInfo: number
  encoding: string
}

function keyOf (algorithm: AlgorithmName, n: number, window: number): string {
  return `rl:{GET:/|ip=${clientIp(n)}}:${SUFFIX[algorithm]}${window}`
}

async function loadSha (client: Redis, source: string): Promise<string> {
  return String(await client.script('LOAD', source))
}

/** Runs `count` decisions, `batch` per pipeline, and measures what Redis spent on them. */
async function measurePath (client: Redis, admin: Redis, sha: string, keys: Array<string | string[]>, args: Array<string | number>, count: number, expectAllowed: number): Promise<Omit<PathResult, 'algorithm' | 'path'>> {
  const batch = 500
  await admin.config('RESETSTAT')
  const cpuBefore = await redisCpuSeconds(admin)
  const start = process.hrtime.bigint()
  let replyOk = true
  let n = 0
  while (n < count) {
    const pipeline = client.pipeline()
    const end = Math.min(count, n + batch)
    for (; n < end; n++) {
      const key = keys[n % keys.length] as string | string[]
      if (typeof key === 'string') pipeline.evalsha(sha, 1, key, ...args)
      else pipeline.evalsha(sha, key.length, ...key, ...args)
    }
    const replies = await pipeline.exec()
    const first = replies?.[0]
    // DECISION_STRIDE integers per block (the reply layout is the script's own: protocol.ts owns it).
    const width = DECISION_STRIDE * (typeof keys[0] === 'string' ? 1 : (keys[0] as string[]).length)
    if (first === undefined || first[0] !== null || !Array.isArray(first[1]) || first[1].length !== width || first[1][0] !== expectAllowed) replyOk = false
  }
  const wall = Number(process.hrtime.bigint() - start) / 1e3
  const cpu = (await redisCpuSeconds(admin) - cpuBefore) * 1e6
  const stats = await commandStats(admin)
  const evalsha = stats.get('evalsha') ?? { calls: 0, usec: 0 }
  let inner = 0
  const names: string[] = []
  for (const [name, stat] of stats) {
    if (name === 'evalsha' || name === 'info' || name.startsWith('config')) continue
    inner += stat.calls
    names.push(`${name.toUpperCase()} ${(stat.calls / evalsha.calls).toFixed(2)}`)
  }
  return {
    decisions: count,
    wallUs: wall / count,
    redisCpuUs: cpu / count,
    evalUsecPerCall: evalsha.calls > 0 ? evalsha.usec / evalsha.calls : Number.NaN,
    callsPerDecision: evalsha.calls > 0 ? inner / evalsha.calls : Number.NaN,
    commands: names.sort().join(', '),
    replyOk
  }
}

async function usedMemory (admin: Redis): Promise<number> {
  return Number(parseInfo(await admin.info('memory')).get('used_memory'))
}

async function memoryOf (client: Redis, admin: Redis, sha: string, algorithm: AlgorithmName, keyCount: number, entries: number): Promise<Omit<MemoryResult, 'algorithm' | 'state'>> {
  await admin.flushall()
  // A quota that keeps the identity's state for the hour, as a real idle caller's would be kept.
  const [limit, window, burst] = [algorithm === 'sliding-log' ? 10_000 : 100, 3_600_000, algorithm === 'sliding-log' ? 10_000 : 100]
  const keys = Array.from({ length: keyCount }, (_, n) => keyOf(algorithm, n, window))
  const before = await usedMemory(admin)
  // Entries at distinct milliseconds (an injected clock), as a real caller's requests would be.
  const base = Date.now()
  for (let entry = 0; entry < entries; entry++) {
    const pipeline = client.pipeline()
    for (const key of keys) pipeline.evalsha(sha, 1, key, limit, window, burst, 1, String(base + entry), '')
    await pipeline.exec()
  }
  const after = await usedMemory(admin)
  const sample = keys[0] as string
  const usage = Number(await admin.call('MEMORY', 'USAGE', sample, 'SAMPLES', '0'))
  const encoding = String(await admin.call('OBJECT', 'ENCODING', sample))
  return { memoryUsage: usage, perKeyInfo: (after - before) / keyCount, encoding }
}

// A non-literal specifier: the multi-limit builder may not exist in the lib/ being measured.
const LIB_SCRIPTS: string = '../test/helpers/lua.js'

async function multiSource (): Promise<string | undefined> {
  try {
    const mod = await import(LIB_SCRIPTS) as { buildMultiScript?: () => { source: string } }
    return mod.buildMultiScript?.().source
  } catch {
    return undefined
  }
}

export async function runScriptBench (redis: BenchRedis, options: { quick: boolean }): Promise<{ markdown: string, raw: unknown, batches: BatchBench | undefined }> {
  if (!redis.private) {
    return { markdown: '## Scripts (Redis side)\n\nSkipped: needs a private redis-server (it resets stats and flushes).\n', raw: undefined, batches: undefined }
  }
  const client = new Redis(redis.url)
  const admin = new Redis(redis.url)
  const count = options.quick ? 10_000 : 100_000
  const paths: PathResult[] = []
  const memory: MemoryResult[] = []
  let batches: BatchBench | undefined
  try {
    await admin.flushall()
    // Multiples of 512 decisions: every call a full batch of 128.
    batches = await runBatchBench(redis.url, admin, options.quick ? 10_240 : 102_400, options.quick ? 1 : BATCH_ROUNDS)
    await admin.flushall()
    const floorSha = await loadSha(client, 'return 1')
    const floor = await measurePath(client, admin, floorSha, ['k'], [], count, Number.NaN)
    paths.push({ algorithm: '(floor: `return 1`)', path: '–', ...floor, replyOk: true })
    // Floors: what the calls alone cost, without any algorithm logic, and the reference script.
    const floorKeys = Array.from({ length: KEYS_10K }, (_, n) => keyOf('sliding-window', n, 3_600_000))
    const floors: Array<[string, string, Array<string | number>]> = [
      ['(floor: TIME)', "redis.call('TIME') return 1", []],
      ['(floor: TIME + GET + SET PX, no logic)', "redis.call('TIME') redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '123456:7:8', 'PX', 3600000) return 1", []],
      ['(@fastify/rate-limit\'s script: INCR + PTTL)', "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) return { c, ARGV[1] } end return { c, redis.call('PTTL', KEYS[1]) }", [3_600_000]]
    ]
    for (const [label, source, args] of floors) {
      await admin.flushall()
      const sha = await loadSha(client, source)
      await measurePath(client, admin, sha, floorKeys, args, KEYS_10K, Number.NaN)
      paths.push({ algorithm: label, path: 'admitted, 10k keys', ...await measurePath(client, admin, sha, floorKeys, args, count, Number.NaN), replyOk: true })
    }

    const algorithmScripts = loadScripts()
    for (const algorithm of ALGORITHMS) {
      const source = algorithmScripts[algorithm].source
      const sha = await loadSha(client, source)
      const [limit, window, burst] = HIGH[algorithm]
      const keys10k = Array.from({ length: KEYS_10K }, (_, n) => keyOf(algorithm, n, window))
      await admin.flushall()
      // First decision of each of 10k fresh keys, then steady state on the same keys.
      paths.push({ algorithm, path: 'admitted, new key', ...await measurePath(client, admin, sha, keys10k, [limit, window, burst, 1, '', ''], KEYS_10K, 1) })
      paths.push({ algorithm, path: 'admitted, 10k keys', ...await measurePath(client, admin, sha, keys10k, [limit, window, burst, 1, '', ''], count, 1) })
      // The same with `now` passed in (as the test clock does): what Redis TIME costs inside the script.
      paths.push({ algorithm, path: 'admitted, 10k keys, now from ARGV (no TIME)', ...await measurePath(client, admin, sha, keys10k, [limit, window, burst, 1, String(Date.now()), ''], count, 1) })
      await admin.flushall()
      // One hot key; for sliding-log the log holds up to `limit` entries of the last second (a skiplist).
      const hotCount = algorithm === 'sliding-log' ? Math.min(count, 5_000) : count
      paths.push({ algorithm, path: algorithm === 'sliding-log' ? 'admitted, 1 hot key (≤ 5,000 entries)' : 'admitted, 1 hot key', ...await measurePath(client, admin, sha, [keyOf(algorithm, 0, window)], [limit, window, burst, 1, '', ''], hotCount, 1) })
      // Rejected: 1,000 identities at limit 1 (sliding-log: limit 100, a full listpack log).
      await admin.flushall()
      const rejectLimit = algorithm === 'sliding-log' ? 100 : 1
      const rejectKeys = Array.from({ length: 1000 }, (_, n) => keyOf(algorithm, n, 3_600_000))
      const fill = client.pipeline()
      for (const key of rejectKeys) fill.evalsha(sha, 1, key, rejectLimit, 3_600_000, rejectLimit, rejectLimit, '', '')
      await fill.exec()
      paths.push({ algorithm, path: `rejected (limit ${rejectLimit} reached)`, ...await measurePath(client, admin, sha, rejectKeys, [rejectLimit, 3_600_000, rejectLimit, 1, '', ''], count, 0) })

      const idle = await memoryOf(client, admin, sha, algorithm, options.quick ? 1000 : KEYS_10K, 1)
      memory.push({ algorithm, state: 'idle identity after 1 request', ...idle })
      if (algorithm === 'sliding-log') {
        for (const entries of options.quick ? [100] : [100, 128, 129, 1000]) {
          memory.push({ algorithm, state: `${entries} entries`, ...await memoryOf(client, admin, sha, algorithm, entries >= 1000 ? 50 : 200, entries) })
        }
      }
    }
    const multi = await multiSource()
    if (multi !== undefined) {
      await admin.flushall()
      const sha = await loadSha(client, multi)
      const keys = Array.from({ length: KEYS_10K }, (_, n) => [keyOf('sliding-window', n, 3_600_000), keyOf('fixed-window', n, 60_000)])
      const blocks = [ALGORITHMS.indexOf('sliding-window') + 1, 100_000_000, 3_600_000, 100_000_000, 1, '', ALGORITHMS.indexOf('fixed-window') + 1, 100_000_000, 60_000, 100_000_000, 1, '']
      paths.push({ algorithm: 'multi (sliding-window 1h + fixed-window 1m)', path: 'admitted, 10k keys', ...await measurePath(client, admin, sha, keys, ['', '', ...blocks], count, 1) })
    }
  } finally {
    await admin.flushall().catch(() => {})
    client.disconnect()
    admin.disconnect()
  }

  const f = (value: number, digits = 1): string => Number.isFinite(value) ? value.toFixed(digits) : '–'
  const lines = [
    ...(batches === undefined ? [] : [batchMarkdown(batches)]),
    '## Scripts (Redis side, no HTTP)',
    '',
    `Pipelined EVALSHA (500 per pipeline) from one ioredis client to the private server, ${count.toLocaleString('en-US')} decisions per path (10,000 for "new key"), Redis TIME as the clock. ` +
      'Wall µs is the loop\'s elapsed time ÷ decisions (bounded by the Node client as much as by Redis); Redis CPU is INFO cpu sys+user ÷ decisions; ' +
      'EVALSHA µs is commandstats usec_per_call (script execution only, no I/O); redis.call/decision counts every command the script ran (TIME included).',
    '',
    '| script | path | wall µs/decision | Redis CPU µs/decision | EVALSHA µs (cmdstat) | redis.call/decision | calls | reply as expected |',
    '| --- | --- | ---: | ---: | ---: | ---: | --- | --- |',
    ...paths.map((p) => `| ${p.algorithm} | ${p.path} | ${f(p.wallUs)} | ${f(p.redisCpuUs)} | ${f(p.evalUsecPerCall)} | ${f(p.callsPerDecision, 2)} | ${p.commands} | ${p.replyOk ? 'yes' : '**no: contract changed?**'} |`),
    '',
    '## Memory per identity in Redis',
    '',
    `MEMORY USAGE (SAMPLES 0) of one key, and the INFO memory used_memory delta ÷ keys (includes the keyspace and expires entries), keys named like \`${keyOf('sliding-window', 4242, 3_600_000)}\`. ` +
      'Sliding-log entries are written at distinct milliseconds; Redis 7 keeps a sorted set of ≤ 128 entries (zset-max-listpack-entries) as a listpack and converts it to a skiplist at the 129th.',
    '',
    '| algorithm | state | MEMORY USAGE bytes | used_memory Δ per key | encoding |',
    '| --- | --- | ---: | ---: | --- |',
    ...memory.map((m) => `| ${m.algorithm} | ${m.state} | ${m.memoryUsage.toLocaleString('en-US')} | ${Math.round(m.perKeyInfo).toLocaleString('en-US')} | ${m.encoding} |`),
    ''
  ]
  return { markdown: lines.join('\n'), raw: { batches, paths, memory }, batches }
}
