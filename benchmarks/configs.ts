import type { AlgorithmName } from '../lib/index.js'

/*
 * The server configurations the harness compares. Each runs as its own child
 * process (benchmarks/server.ts <id>), so no two share an event loop, a JIT
 * or a Redis connection. Limits are set so that no configuration ever rejects,
 * except the flood cases, whose single identity is limited on purpose.
 */

export type Load = 'none' | 'hot' | '10k' | 'flood' | 'overload'
export type Kind = 'bare' | 'ours' | 'frl'

export interface BenchConfig {
  id: string
  label: string
  kind: Kind
  /** Which client keys the load generator sends (X-Forwarded-For, trusted from loopback). */
  load: Load
  algorithm?: AlgorithmName
  autoPipelining: boolean
  /** Flood only: ask the plugin for its local deny cache on or off. */
  denyCache?: boolean
  /** The plugin's batchWrites option (default true: the decisions of one event-loop turn share one script call; false: one call each). */
  batchWrites?: boolean
  /** The plugin's maxBatch option (decisions per script call, default 128); unset: the plugin's default. */
  maxBatch?: number
  /**
   * Register a recording OpenTelemetry MeterProvider in the server before ready(), so the
   * plugin records rate_limit.store.batch.size and rate_limit.store.latency; the stats
   * endpoint then returns their distributions. It costs the plugin's per-decision metric
   * calls, so throughput rows are measured without it.
   */
  batchMetrics?: boolean
  /** The plugin's Redis client (default ioredis; `node-redis`: the `redis` package, v6, `disableOfflineQueue: true`). */
  client?: 'ioredis' | 'node-redis'
  /** Fixed connection count for this configuration (else --connections). */
  connections?: number
  /** Fixed warm-up seconds (overload: 0, the 25 admissions must fall in the measured window). */
  warmup?: number
}

const ALGOS: AlgorithmName[] = ['sliding-window', 'fixed-window', 'gcra', 'token-bucket', 'sliding-log']

/** Route block per algorithm: high enough never to reject at the rates this machine reaches. */
export function blockFor (algorithm: AlgorithmName, load: Load): Record<string, unknown> {
  switch (algorithm) {
    // MAX_SLIDING_LOG_LIMIT is 10,000: over 250 ms that is 40,000 req/s for one hot key (a log of
    // ~5,000 entries, a skiplist); over 10 s, 10k keys at ~30k req/s hold ~30 entries each (listpacks).
    case 'sliding-log': return { algorithm, limit: 10_000, window: load === 'hot' ? 250 : 10_000 }
    case 'token-bucket':
    case 'gcra': return { algorithm, limit: 100_000_000, window: '1m', burst: 100_000_000 }
    default: return { algorithm, limit: 100_000_000, window: '1h' }
  }
}

/** The overload route's limit (per hour, one identity): exactly this many must be admitted. */
export const OVERLOAD_LIMIT = 25
/** Concurrent connections of the overload case: the `wrk -c 3000` row of issue 11. */
export const OVERLOAD_CONNECTIONS = 3000

/**
 * Overload (issue 11): the plugin's default options except denyCache: false, one identity,
 * limit 25 per hour, 3,000 connections, no warm-up. Admitted must be exactly 25, degraded 0.
 */
function overload (id: string, label: string, maxBatch?: number): BenchConfig {
  return { id, label, kind: 'ours', load: 'overload', algorithm: 'sliding-window', autoPipelining: false, denyCache: false, maxBatch, batchMetrics: true, connections: OVERLOAD_CONNECTIONS, warmup: 0 }
}

export const CONFIGS: BenchConfig[] = [
  { id: 'bare', label: 'bare Fastify', kind: 'bare', load: '10k', autoPipelining: false },
  { id: 'frl', label: '@fastify/rate-limit, Redis store (fixed window)', kind: 'frl', load: '10k', autoPipelining: false },
  ...ALGOS.map((algorithm): BenchConfig => ({ id: `${algorithm}-10k`, label: `${algorithm}, 10k keys`, kind: 'ours', load: '10k', algorithm, autoPipelining: false })),
  ...ALGOS.map((algorithm): BenchConfig => ({ id: `${algorithm}-hot`, label: `${algorithm}, 1 hot key`, kind: 'ours', load: 'hot', algorithm, autoPipelining: false })),
  { id: 'sliding-window-10k-ap', label: 'sliding-window, 10k keys, auto-pipelining', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: true },
  { id: 'sliding-window-10k-node-redis', label: 'sliding-window, 10k keys, node-redis v6 client', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, client: 'node-redis' },
  { id: 'sliding-window-10k-nobatch', label: 'sliding-window, 10k keys, batchWrites: false (one script call per decision)', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, batchWrites: false },
  { id: 'sliding-window-10k-mb64', label: 'sliding-window, 10k keys, maxBatch: 64', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, maxBatch: 64 },
  { id: 'sliding-window-10k-mb256', label: 'sliding-window, 10k keys, maxBatch: 256', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, maxBatch: 256 },
  { id: 'sliding-window-10k-otel', label: 'sliding-window, 10k keys, OpenTelemetry recording batch sizes', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, batchMetrics: true },
  { id: 'frl-ap', label: '@fastify/rate-limit, auto-pipelining', kind: 'frl', load: '10k', autoPipelining: true },
  { id: 'flood-nocache', label: 'flood, 1 limited identity, deny cache off', kind: 'ours', load: 'flood', algorithm: 'sliding-window', autoPipelining: false, denyCache: false },
  { id: 'flood-cache', label: 'flood, 1 limited identity, deny cache on', kind: 'ours', load: 'flood', algorithm: 'sliding-window', autoPipelining: false, denyCache: true },
  overload('overload', `overload: ${OVERLOAD_CONNECTIONS} connections, limit ${OVERLOAD_LIMIT}/h, default options, deny cache off`),
  overload('overload-mb64', `overload: ${OVERLOAD_CONNECTIONS} connections, maxBatch: 64`, 64),
  overload('overload-mb256', `overload: ${OVERLOAD_CONNECTIONS} connections, maxBatch: 256`, 256)
]

export const QUICK_IDS = ['bare', 'frl', 'sliding-window-10k', 'flood-cache', 'overload']

export function configById (id: string): BenchConfig {
  const config = CONFIGS.find((candidate) => candidate.id === id)
  if (config === undefined) throw new Error(`unknown benchmark configuration ${JSON.stringify(id)} (known: ${CONFIGS.map((c) => c.id).join(', ')})`)
  return config
}

/** Candidate plugin options for the local deny cache, tried in order (BENCH_DENY_CACHE='{"opt":…}' overrides). */
export function denyCacheCandidates (on: boolean): Array<Record<string, unknown>> {
  const env = process.env[on ? 'BENCH_DENY_CACHE_ON' : 'BENCH_DENY_CACHE_OFF']
  if (env !== undefined && env !== '') return [JSON.parse(env) as Record<string, unknown>]
  return on
    ? [{ denyCache: true }, { denyCache: {} }, { denyCache: { max: 10_000 } }, { localDenyCache: true }, { denyCacheSize: 10_000 }]
    : [{ denyCache: false }, { denyCache: { max: 0 } }, { localDenyCache: false }, { denyCacheSize: 0 }]
}

/** The IP the n-th client key is sent as (X-Forwarded-For). */
export function clientIp (n: number): string {
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`
}

/** The client addresses a configuration's load sends, in order (autocannon and wrk alike). */
export function addressesOf (config: BenchConfig): string[] {
  return Array.from({ length: config.load === '10k' ? KEYS_10K : 1 }, (_, n) => clientIp(n))
}

export const STATS_PATH = '/__bench/stats'
export const KEYS_10K = 10_000
