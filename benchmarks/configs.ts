import type { AlgorithmName } from '../lib/index.js'

/*
 * The server configurations the harness compares. Each runs as its own child
 * process (benchmarks/server.ts <id>), so no two share an event loop, a JIT
 * or a Redis connection. Limits are set so that no configuration ever rejects,
 * except the flood cases, whose single identity is limited on purpose.
 */

export type Load = 'none' | 'hot' | '10k' | 'flood'
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
  /** The plugin's batchWrites option (default true): one socket write per event-loop turn. */
  batchWrites?: boolean
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

export const CONFIGS: BenchConfig[] = [
  { id: 'bare', label: 'bare Fastify', kind: 'bare', load: '10k', autoPipelining: false },
  { id: 'frl', label: '@fastify/rate-limit, Redis store (fixed window)', kind: 'frl', load: '10k', autoPipelining: false },
  ...ALGOS.map((algorithm): BenchConfig => ({ id: `${algorithm}-10k`, label: `${algorithm}, 10k keys`, kind: 'ours', load: '10k', algorithm, autoPipelining: false })),
  ...ALGOS.map((algorithm): BenchConfig => ({ id: `${algorithm}-hot`, label: `${algorithm}, 1 hot key`, kind: 'ours', load: 'hot', algorithm, autoPipelining: false })),
  { id: 'sliding-window-10k-ap', label: 'sliding-window, 10k keys, auto-pipelining', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: true },
  { id: 'sliding-window-10k-nobatch', label: 'sliding-window, 10k keys, batchWrites: false', kind: 'ours', load: '10k', algorithm: 'sliding-window', autoPipelining: false, batchWrites: false },
  { id: 'frl-ap', label: '@fastify/rate-limit, auto-pipelining', kind: 'frl', load: '10k', autoPipelining: true },
  { id: 'flood-nocache', label: 'flood, 1 limited identity, deny cache off', kind: 'ours', load: 'flood', algorithm: 'sliding-window', autoPipelining: false, denyCache: false },
  { id: 'flood-cache', label: 'flood, 1 limited identity, deny cache on', kind: 'ours', load: 'flood', algorithm: 'sliding-window', autoPipelining: false, denyCache: true }
]

export const QUICK_IDS = ['bare', 'frl', 'sliding-window-10k', 'flood-cache']

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

export const STATS_PATH = '/__bench/stats'
export const KEYS_10K = 10_000
