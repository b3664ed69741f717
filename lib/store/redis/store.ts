import { performance } from 'node:perf_hooks'
import type { Cluster, Redis } from 'ioredis'
import type { RawDecision } from '../algorithms.js'
import { FST_RRL_EVICTION_POLICY, FST_RRL_REDIS_UNAVAILABLE } from '../../errors.js'
import { Dispatcher, type DispatchOptions } from './dispatcher.js'
import { decideCall, refundCall, toDecisions, toRefunds } from './protocol.js'
import { buildBatchScript, type LoadedScript } from './scripts.js'
import { awaitWithin } from '../../util/settle.js'
import { penaltyKey, type DebugLog, type DecideMode, type Store, type StoreRequest } from '../port.js'

/*
 * The Redis store: every decision, peek and refund goes through the
 * dispatcher (dispatcher.ts), which sends the decisions of one
 * event-loop turn as one call of the batch script, bounded by `timeout`
 * (measured on Redis, not on Node's own lag). A client that is not ready is
 * not asked (its offline queue would hold the request for seconds).
 */

type Client = Redis | Cluster

/** How long ready() waits for a connecting client and the script loads; a down Redis must not stall startup. */
const WARM_UP_MS = 500

export type RedisStoreOptions = Omit<DispatchOptions, 'clock'>

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

/** Waits at most `ms` for a connecting client's ready event, and leaves no listener behind. */
async function readyWithin (client: Client, ms: number): Promise<void> {
  let onReady = (): void => {}
  await awaitWithin(new Promise<void>((resolve) => { onReady = resolve; client.once('ready', resolve) }), ms, 'client ready')
  client.off('ready', onReady)
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
  decide (request: StoreRequest, mode: DecideMode): Promise<RawDecision[]> {
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue({ ...decideCall(request, mode), resolve: (values) => { resolve(toDecisions(values)) }, reject })
    })
  }

  /** refundOn: gives back every block's units, spent `elapsedMs` ago, in this turn's batch. */
  refund (request: StoreRequest, elapsedMs: number): Promise<boolean[]> {
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue({ ...refundCall(request, elapsedMs), resolve: (values) => { resolve(toRefunds(values)) }, reject })
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
    const deadline = performance.now() + maxWaitMs
    if (client.status === 'wait') client.connect().catch(() => {})
    if (client.status !== 'ready') await readyWithin(client, maxWaitMs)
    if (client.status !== 'ready') return
    const masters: Redis[] = this.cluster ? (client as Cluster).nodes('master') : [client as Redis]
    const source = this.#script.source
    const loaded = Promise.all(masters.map(async (node) => { await node.script('LOAD', source) })).catch(() => {})
    await awaitWithin(Promise.all([loaded, checkEviction(masters, log)]), Math.max(0, deadline - performance.now()), 'script load')
  }

  close (): void {}
}
