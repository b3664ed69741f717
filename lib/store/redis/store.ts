import { performance } from 'node:perf_hooks'
import { WAKE_CHANNEL } from '../../kinds/concurrency/lease.js'
import { FST_RRL_EVICTION_POLICY, FST_RRL_REDIS_CIRCUIT_OPEN, FST_RRL_REDIS_UNAVAILABLE } from '../../errors.js'
import { NodeBreakers, type BreakerOptions } from './breakers.js'
import { Dispatcher, type DispatchOptions } from './dispatcher.js'
import { adjustCall, decideCall, toAdjusted, toDecisions } from './protocol.js'
import { readLibrary, readScript } from './lua.js'
import { ScriptRoute } from './script-route.js'
import { awaitWithin } from '../../util/await-within.js'
import type { ClientPort, MasterPort } from './client/port.js'
import { RedisRecords } from './records.js'
import { RedisAudit, RedisBoard } from './board.js'
import type { NodeHealth } from '../../types/api.js'
import { penaltyKey, type Adjustment, type RecordHash, type AuditTrail, type PictureBoard, type PictureKeys, type StartupLog, type DecideMode, type Decided, type SlotAdjustment, type Store, type StoreRequest } from '../port.js'

/*
 * The Redis store: every decision, peek and adjustment goes through the
 * dispatcher (dispatcher.ts), which sends the decisions of one
 * event-loop turn as one call of the batch function, bounded by `timeout`
 * (measured on Redis, not on Node's own lag). A client that is not ready is
 * not asked (its offline queue would hold the request for seconds).
 */

/** How long ready() waits for a connecting client and the script loads; a down Redis must not stall startup. */
const WARM_UP_MS = 500
/** A call of slot releases is sent this many times at most before the lease is left to reclaim them. */
const RELEASE_TRIES = 4

export type RedisStoreOptions = Omit<DispatchOptions, 'clock'> & {
  /** undefined: no circuit breaker. */
  breaker?: BreakerOptions | undefined
  /** The clock of the breakers' cooldowns: the injected test clock, else monotonic ms. */
  elapsed?: () => number
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

/**
 * Reads each master's eviction settings and warns once (FST_RRL_EVICTION_POLICY)
 * when any can evict limiter keys early. A CONFIG refused (managed Redis that
 * renames it, an ACL without @admin) is not an error: a debug line, no warning.
 */
async function checkEviction (masters: readonly MasterPort[], log: StartupLog | undefined): Promise<void> {
  const risky: string[] = []
  await Promise.all(masters.map(async ({ address, configGet }) => {
    try {
      const config = await configGet(['maxmemory', 'maxmemory-policy'])
      const maxmemory = config.get('maxmemory') ?? '0'
      const policy = config.get('maxmemory-policy') ?? 'noeviction'
      if (evictsLimiterKeys(maxmemory, policy)) risky.push(`${address} has maxmemory-policy ${policy} with maxmemory ${maxmemory}`)
    } catch (error) {
      log?.debug({ node: address, cause: (error as Error).message }, 'rate limit: cannot read maxmemory-policy (CONFIG refused), eviction not checked')
    }
  }))
  if (risky.length > 0) FST_RRL_EVICTION_POLICY(risky.sort().join('; '))
}

/** Loads the library (or the scripts) on every master (a failed load is answered later by an EVAL) and checks eviction. */
async function warmMasters (client: ClientPort, route: ScriptRoute, log: StartupLog | undefined): Promise<void> {
  const masters = await client.masters()
  await Promise.all([route.load(masters), checkEviction(masters, log)])
}

export class RedisStore implements Store {
  readonly #client: ClientPort
  readonly #route: ScriptRoute
  readonly #dispatcher: Dispatcher
  /** The `clock` option: it stands in for Redis TIME. */
  readonly #clock: (() => number) | undefined
  /** The pause before a slot call is tried again (× the try number). */
  readonly #retryMs: number
  /** One per node (breakers.ts); undefined without a circuit breaker. */
  readonly #breakers: NodeBreakers | undefined
  #log: StartupLog | undefined
  /** Set by drain(): pauses before a slot call's retry end at once, and no later retry starts. */
  #draining = false
  /** Pauses before a slot call's retry, each ended by its function (drain() ends them all). */
  readonly #pauses = new Set<() => void>()
  /** adjustSlots calls not ended yet (a pause between tries has nothing in the dispatcher). */
  #slotCalls = 0
  #slotCallsEnded: Array<() => void> = []

  /** `client`: the port of the application's client (client/detect.ts clientPort). */
  constructor (client: ClientPort, options: RedisStoreOptions, clock?: () => number) {
    this.#client = client
    this.#clock = clock
    this.#retryMs = Math.max(50, options.timeout)
    this.#breakers = options.breaker === undefined ? undefined : new NodeBreakers(options.breaker, options.timeout, options.elapsed ?? (() => performance.now()))
    this.#route = new ScriptRoute(client, readScript(), readLibrary())
    this.#dispatcher = new Dispatcher(client, this.#route, { ...options, clock }, (entries) => { this.#releaseAbandoned(entries) })
  }

  /** The slots of decisions the dispatcher gave up on (dispatcher.ts): nobody holds them; when every try fails the lease reclaims them. */
  #releaseAbandoned (entries: SlotAdjustment[]): void {
    this.adjustSlots(entries).catch((error: unknown) => {
      this.#log?.debug({ cause: (error as Error).message }, 'rate limit: release of an abandoned decision\'s slots failed; the lease reclaims them')
    })
  }

  /** The client's port (another store on the same client, in tests). */
  get client (): ClientPort {
    return this.#client
  }

  /** Whether the client is a Redis Cluster (every key of one call must share a slot). */
  get cluster (): boolean {
    return this.#client.cluster
  }

  /** Decisions queued or waiting on Redis now. */
  get pending (): number {
    return this.#dispatcher.pending
  }

  /** Whether decisions go by FCALL of the Functions library (else EVALSHA: script-route.ts). */
  get functions (): boolean {
    return this.#route.functions
  }

  /**
   * Every block of one request, all-or-nothing, in this turn's batch; `at` is
   * the script's `now` (Redis TIME, or the test clock sent). A charge to a
   * ready client asks its node's breaker first, and every outcome of an allowed one reports to it,
   * so a probe is never left pending; a peek neither asks nor reports.
   */
  decide (request: StoreRequest, mode: DecideMode): Promise<Decided> {
    // A client that is not ready answers at once (the dispatcher asks nothing of it): a breaker
    // would save no wait, and its cooldown would only delay the first decision after the reconnect.
    const client = this.#client
    if (!client.isReady()) return Promise.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.state()}`))
    const breaker = mode === 'charge' ? this.#breakers?.of(this.nodeOf(request.blocks[0]?.key ?? '')) : undefined
    if (breaker !== undefined && !breaker.allow()) return Promise.reject(new FST_RRL_REDIS_CIRCUIT_OPEN(breaker.failures, breaker.retryInMs))
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue(decideCall(request, mode, (values, at, call) => {
        breaker?.success()
        resolve({ decisions: toDecisions(values), at, call })
      }, (error: unknown) => {
        breaker?.report(error)
        reject(error)
      }))
    })
  }

  nodeOf (key: string): string {
    return this.#client.nodeOf(key)
  }

  /** Usage changed after the decision (refundOn, settle, adjust), in this turn's batch. */
  adjust (entries: readonly Adjustment[]): Promise<boolean[]> {
    return new Promise((resolve, reject) => {
      this.#dispatcher.enqueue(adjustCall(entries, (values) => { resolve(toAdjusted(values)) }, reject))
    })
  }

  /**
   * Slot releases and renewals alone: tried RELEASE_TRIES times, `timeout` ×
   * the try number apart, so a release lost to a timeout or a reconnect is
   * sent again (idempotent: never defused, see dispatcher.ts); when every try
   * fails the lease reclaims the slots.
   */
  async adjustSlots (entries: readonly SlotAdjustment[]): Promise<boolean[]> {
    this.#slotCalls++
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.adjust(entries)
        } catch (error) {
          // Closing: the try after a pause cut short is the last (drain() waits for it, bounded by timeout).
          if (attempt >= RELEASE_TRIES || (this.#draining && attempt > 1)) throw error
          if (!this.#draining) await this.#pause(this.#retryMs * attempt)
        }
      }
    } finally {
      if (--this.#slotCalls === 0) for (const resolve of this.#slotCallsEnded.splice(0)) resolve()
    }
  }

  async reset (keys: readonly string[]): Promise<void> {
    const client = this.#client
    if (!client.isReady()) throw new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.state()}`)
    // A reset forgives penalties too.
    if (keys.length > 0) await client.del([...keys, ...keys.map(penaltyKey)])
  }

  /**
   * Before ready() resolves, for at most `maxWaitMs` in all: lets a client
   * that is still connecting finish, then loads the library (or the scripts) on every
   * master (each Cluster master's connection is opened by that load), so the
   * first decision after ready() costs what the thousandth does. A
   * lazyConnect client is asked to connect: the store never sends to a client
   * that is not ready, so it would otherwise never connect (a node-redis client
   * is never connected by the store: the application's own connect() would
   * then throw). Redis being absent
   * does not fail ready() (one warning says so): requests then follow onRedisError until the client
   * connects by itself, and a call that meets "Function not found" loads the library where the load missed.
   * In the same bounded wait, each master's maxmemory-policy is read (see checkEviction).
   */
  async warmUp (log?: StartupLog, maxWaitMs = WARM_UP_MS): Promise<void> {
    const client = this.#client
    const deadline = performance.now() + maxWaitMs
    this.#route.useLog(log)
    this.#log = log
    if (!client.isReady()) await client.whenReady(maxWaitMs)
    if (!client.isReady()) {
      // Else nothing above debug says so until the first request degrades.
      log?.warn({ err: new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.state()} at ready()`) }, 'rate limiter: Redis is not ready at startup; each route answers by its onRedisError until the client connects')
      return
    }
    await awaitWithin(warmMasters(client, this.#route, log), Math.max(0, deadline - performance.now()), 'script load')
  }

  records (key: string): RecordHash {
    return new RedisRecords(this.#client, key, this.#clock)
  }

  board (keys: PictureKeys): PictureBoard {
    return new RedisBoard(this.#client, keys, this.#clock)
  }

  audit (key: string, max: number): AuditTrail {
    return new RedisAudit(this.#client, key, max)
  }

  health (): NodeHealth[] {
    if (this.#breakers === undefined) return []
    return [...this.#breakers.entries()].map(([node, breaker]) => ({ node, breaker: breaker.state, failures: breaker.failures, retryInMs: breaker.retryInMs }))
  }

  /** The plugin's own subscriber on WAKE_CHANNEL; a message is a slot key as the script saw it, with the client's keyPrefix. */
  watchSlots (onWake: (key: string) => void, onGap: () => void): (() => Promise<void>) | undefined {
    const prefix = this.#client.keyPrefix
    return this.#client.subscribe({
      channel: WAKE_CHANNEL,
      onMessage: (message) => { if (message.startsWith(prefix)) onWake(message.slice(prefix.length)) },
      onReady: onGap
    })
  }

  /** A pause that drain() can end (an AbortSignal per pause would warn past ten listeners in an outage). */
  #pause (ms: number): Promise<void> {
    return new Promise((resolve) => {
      const end = (): void => {
        clearTimeout(timer)
        this.#pauses.delete(end)
        resolve()
      }
      const timer = setTimeout(end, ms).unref()
      this.#pauses.add(end)
    })
  }

  /** See Store.drain: the queue leaves now, then every call (retries, abandoned releases) ends within its timeout. */
  async drain (): Promise<void> {
    this.#draining = true
    for (const end of [...this.#pauses]) end()
    this.#dispatcher.flushNow()
    for (;;) {
      if (this.#dispatcher.pending > 0) await this.#dispatcher.whenIdle()
      else if (this.#slotCalls > 0) await new Promise<void>((resolve) => { this.#slotCallsEnded.push(resolve) })
      else return
    }
  }

  close (): void {}
}
