import type { Cluster, Redis } from 'ioredis'
import type { RawDecision } from '../algorithms.js'
import { FST_RRL_EVICTION_POLICY, FST_RRL_REDIS_UNAVAILABLE } from '../../errors.js'
import { Dispatcher, type DispatchOptions } from './dispatcher.js'
import { multiRefundMode, SCRIPT_MODE } from './protocol.js'
import { buildBatchScript, type LoadedScript } from './scripts.js'
import { penaltyKey, type BlockRun, type DebugLog, type DecideMode, type Store } from '../port.js'

/*
 * The Redis store: every decision, peek and refund goes through the
 * dispatcher (lib/redis-dispatch.ts), which sends the decisions of one
 * event-loop turn as one call of the batch script, bounded by `timeout`
 * (measured on Redis, not on Node's own lag). A client that is not ready is
 * not asked (its offline queue would hold the request for seconds).
 */

type Client = Redis | Cluster

/** How long ready() waits for a connecting client and the script loads; a down Redis must not stall startup. */
const WARM_UP_MS = 500

export type RedisStoreOptions = Omit<DispatchOptions, 'clock'>

/** Four integers per block: allowed, remaining, resetMs, retryAfterMs. */
function toDecisions (values: readonly number[]): RawDecision[] {
  const out: RawDecision[] = []
  for (let i = 0; i < values.length; i += 4) {
    const decision: RawDecision = { allowed: values[i] === 1, remaining: values[i + 1] as number, resetMs: values[i + 2] as number, retryAfterMs: values[i + 3] as number }
    if (values[i] === 2) decision.penalized = true
    out.push(decision)
  }
  return out
}

/** One decision's ARGV segment for the batch script: block count, mode, then 7 values per block. */
function segment (runs: readonly BlockRun[], costs: readonly number[], mode: string): Array<string | number> {
  const args: Array<string | number> = [runs.length, mode]
  for (let i = 0; i < runs.length; i++) {
    const run = runs[i] as BlockRun
    args.push(run.algorithmNumber, run.scriptArgs[0], run.scriptArgs[1], run.scriptArgs[2], costs[i] as number, run.shadow ? '1' : '', run.penalty?.arg ?? '')
  }
  return args
}

/** The block keys, then one penalty key per block that has a penalty (see buildBatchScript). */
function keysWithPenalties (runs: readonly BlockRun[], keys: readonly string[]): readonly string[] {
  let all: string[] | undefined
  for (let i = 0; i < runs.length; i++) {
    if ((runs[i] as BlockRun).penalty === undefined) continue
    all ??= [...keys]
    all.push(penaltyKey(keys[i] as string))
  }
  return all ?? keys
}

/**
 * Whether keys that carry a TTL (all of ours) can be evicted before it runs
 * out: every allkeys-* and volatile-* policy, once maxmemory is reached.
 * `noeviction` refuses writes instead (OOM, so onRedisError decides), and
 * `maxmemory 0` sets no limit, so nothing is evicted.
 */
export function evictsLimiterKeys (maxmemory: string, policy: string): boolean {
  return maxmemory !== '0' && (policy.startsWith('allkeys-') || policy.startsWith('volatile-'))
}

/** `CONFIG GET maxmemory maxmemory-policy` as a map (the reply is a flat name, value list). */
async function memoryConfig (node: Redis): Promise<Map<string, string>> {
  const reply = await node.call('CONFIG', 'GET', 'maxmemory', 'maxmemory-policy') as unknown[]
  const config = new Map<string, string>()
  for (let i = 0; i + 1 < reply.length; i += 2) config.set(String(reply[i]), String(reply[i + 1]))
  return config
}

/**
 * Reads each master's eviction settings and warns once (FST_RRL_EVICTION_POLICY)
 * when any can evict limiter keys early. A CONFIG refused (managed Redis that
 * renames it, an ACL without @admin) is not an error: a debug line, no warning.
 */
async function checkEviction (masters: readonly Redis[], log: DebugLog | undefined): Promise<void> {
  const risky: string[] = []
  await Promise.all(masters.map(async (node) => {
    const address = `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`
    try {
      const config = await memoryConfig(node)
      const maxmemory = config.get('maxmemory') ?? '0'
      const policy = config.get('maxmemory-policy') ?? 'noeviction'
      if (evictsLimiterKeys(maxmemory, policy)) risky.push(`${address} has maxmemory-policy ${policy} with maxmemory ${maxmemory}`)
    } catch (error) {
      log?.debug({ node: address, cause: (error as Error).message }, 'rate limit: cannot read maxmemory-policy (CONFIG refused), eviction not checked')
    }
  }))
  if (risky.length > 0) FST_RRL_EVICTION_POLICY(risky.sort().join('; '))
}

export class RedisStore implements Store {
  readonly #client: Client
  readonly #script: LoadedScript
  readonly #dispatcher: Dispatcher

  constructor (client: Client, options: RedisStoreOptions, clock?: () => number) {
    this.#client = client
    this.#script = buildBatchScript()
    this.#dispatcher = new Dispatcher(client, this.#script, { ...options, clock })
  }

  /** The client, for what is not a decision (runtime overrides). */
  get client (): Client {
    return this.#client
  }

  /** Whether the client is a Redis Cluster (every key of one call must share a slot). */
  get cluster (): boolean {
    return (this.#client as { isCluster?: boolean }).isCluster === true
  }

  /** Decisions queued or waiting on Redis now. */
  get pending (): number {
    return this.#dispatcher.pending
  }

  /** Every block of one request, all-or-nothing, in this turn's batch. */
  decide (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], mode: DecideMode): Promise<RawDecision[]> {
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue({ keys: keysWithPenalties(runs, keys), args: segment(runs, costs, SCRIPT_MODE[mode]), replyLength: runs.length * 4, resolve: (values) => { resolve(toDecisions(values)) }, reject })
    })
  }

  /** refundOn: gives back every block's units, spent `elapsedMs` ago, in this turn's batch. */
  refund (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], elapsedMs: number): Promise<boolean[]> {
    const mode = multiRefundMode(String(Math.max(0, Math.round(elapsedMs))))
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue({ keys: keysWithPenalties(runs, keys), args: segment(runs, costs, mode), replyLength: runs.length, resolve: (values) => { resolve(values.map((given) => given === 1)) }, reject })
    })
  }

  async reset (keys: readonly string[]): Promise<void> {
    const client = this.#client
    if (client.status !== 'ready') throw new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`)
    // A reset forgives penalties too.
    if (keys.length > 0) await client.del(...keys, ...keys.map(penaltyKey))
  }

  /**
   * Before ready() resolves, for at most `maxWaitMs` in all: lets a client
   * that is still connecting finish, then loads the batch script on every
   * master (each Cluster master's connection is opened by that load), so the
   * first decision after ready() costs what the thousandth does. A
   * lazyConnect client is asked to connect: the store never sends to a client
   * that is not ready, so it would otherwise never connect. Redis being absent
   * does not fail ready(): requests then follow onRedisError until the client
   * connects by itself, and NOSCRIPT reloads the script where the load missed.
   * In the same bounded wait, each master's maxmemory-policy is read (see checkEviction).
   */
  async warmUp (log?: DebugLog, maxWaitMs = WARM_UP_MS): Promise<void> {
    const client = this.#client
    let timer: NodeJS.Timeout | undefined
    const expired = new Promise<void>((resolve) => { timer = setTimeout(resolve, maxWaitMs) })
    try {
      if (client.status === 'wait') client.connect().catch(() => {})
      if (client.status !== 'ready') {
        let onReady = (): void => {}
        await Promise.race([expired, new Promise<void>((resolve) => { onReady = resolve; client.once('ready', resolve) })])
        client.off('ready', onReady)
      }
      if (client.status !== 'ready') return
      const masters: Redis[] = this.cluster ? (client as Cluster).nodes('master') : [client as Redis]
      const source = this.#script.source
      const loaded = Promise.all(masters.map(async (node) => { await node.script('LOAD', source) })).catch(() => {})
      await Promise.race([expired, Promise.all([loaded, checkEviction(masters, log)])])
    } finally {
      clearTimeout(timer)
    }
  }

  close (): void {}
}
