import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { FST_RRL_IDENTITY_FAILED, FST_RRL_NO_REDIS, FST_RRL_REDIS_UNAVAILABLE, FST_RRL_REPLY_BUILDER_FAILED, FST_RRL_UNSUPPORTED_CLIENT } from './errors.js'
import { Bans } from './fleet/bans.js'
import { Overrides } from './fleet/overrides.js'
import { DenyCache } from './decide/deny-cache.js'
import { Holds } from './kinds/delay/holds.js'
import { Waiters } from './kinds/concurrency/waiters.js'
import { SlotKeeper } from './kinds/concurrency/slot-keeper.js'
import type { IdentityContext, IdentityKind } from './keys/identity.js'
import { auditKey, bansKey, overridesKey, pictureKeys } from './keys/layout.js'
import { PictureCounters } from './picture/counters.js'
import { AUDIT_ENTRIES, PICTURE_SERIES } from './limits.js'
import type { ResolvedOptions } from './options/index.js'
import type { CompileContext } from './policy/policy.js'
import { headerWriter, redirectGuard } from './reply/headers.js'
import { createRefuse } from './reply/problem.js'
import type { RouteRuntime } from './request/route-hook.js'
import { MemoryStore } from './store/memory/store.js'
import type { AuditTrail, PictureBoard, Store } from './store/port.js'
import { clientPort, describeClient } from './store/redis/client/detect.js'
import { RedisStore } from './store/redis/store.js'
import { BurstLogger, OncePerWindow } from './util/log-throttle.js'
import { PendingWork } from './util/pending-work.js'
import { awaitWithin } from './util/await-within.js'

/** What every route hook, the API and the not-found hook of one plugin instance share. */
export interface PluginRuntime extends RouteRuntime {
  /** Closes the local limiter, if one was created. */
  closeLocal: () => void
  /** The onSend hook that keeps the fields off 3xx replies; undefined with `headers: false`. */
  redirectGuard: ReturnType<typeof redirectGuard>
  /** The plugin's `timeout`: each close-time call is bounded by it (closeRuntime). */
  timeout: number
  /** Operator changes (bans, overrides, resets with an actor): the store's bounded trail. */
  audit: AuditTrail
  /** The fleet's pictures (lib/picture/). */
  board: PictureBoard
}

type StoreCall = (size: number, latencyMs: number) => void

function createStore (fastify: FastifyInstance, options: ResolvedOptions, elapsed: () => number, onStoreCall: StoreCall): Store {
  if (options.store === 'memory') return new MemoryStore(options.clock ?? options.hostClock, options.maxKeys)
  const decorated = fastify.hasDecorator('redis') ? (fastify as unknown as { redis: ResolvedOptions['redis'] }).redis : undefined
  const client = options.redis ?? decorated
  if (client === undefined || client === null) throw new FST_RRL_NO_REDIS()
  const port = clientPort(client)
  if (port === undefined) throw new FST_RRL_UNSUPPORTED_CLIENT(options.redis === undefined ? '`fastify.redis`' : 'option `redis`', describeClient(client))
  return new RedisStore(port, {
    timeout: options.timeout,
    maxBatch: options.maxBatch,
    maxInFlight: options.maxInFlight,
    maxPending: options.maxPending,
    coalesce: options.batchWrites,
    onBatch: onStoreCall,
    // One breaker per node the calls go to (store/redis/breakers.ts).
    breaker: options.circuitBreaker,
    elapsed
  }, options.clock)
}

function causeOf (error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

/** What rendering identities needs from the options, for routes and bans: identity failures logged once per burst. */
function identityContext (fastify: FastifyInstance, options: ResolvedOptions, clock: () => number): IdentityContext {
  const identityErrors = new BurstLogger(clock)
  return {
    user: options.user,
    apiKey: options.apiKey,
    ipv6Subnet: options.ipv6Subnet,
    hashSecret: options.hashSecret,
    identityTimeout: options.identityTimeout,
    onPartError: (kind: IdentityKind, error: unknown, route: string) => {
      const err = new FST_RRL_IDENTITY_FAILED(kind, route)
      identityErrors.report(fastify.log, { err, cause: causeOf(error) }, 'rate limit identity part threw or returned an unusable value; falling back to the client IP')
    }
  }
}

/** Ms on a clock that only moves forward, in Date.now's range at the process's start. */
function monotonicClock (): number {
  return performance.timeOrigin + performance.now()
}

/** The store, the decision state and the reply path of one plugin instance. */
export function createRuntime (fastify: FastifyInstance, options: ResolvedOptions): PluginRuntime {
  // Calendar time (the local store's windows, periods) is the host's; this instance's own
  // durations (breaker cooldowns, deny-cache entries, log throttles) are monotonic, so a host
  // clock stepped back (NTP, a resumed VM) cannot hold the breaker open for the step.
  const clock = options.clock ?? options.hostClock
  const elapsed = options.clock ?? monotonicClock
  // Metrics load at ready(); until then a store call records nothing.
  const store = createStore(fastify, options, elapsed, (size, latencyMs) => { runtime.metrics?.storeCall(size, latencyMs) })
  let local: MemoryStore | undefined
  const refuse = createRefuse(options.replyBuilder, options.useErrorHandler, (request, error) => {
    const err = new FST_RRL_REPLY_BUILDER_FAILED(request.routeOptions.method + ' ' + (request.routeOptions.url ?? ''))
    runtime.badInput.report(request.log, { err, cause: causeOf(error) }, 'rate limit replyBuilder failed; sent the default reply')
  })
  const audit = store.audit(auditKey(options.prefix), AUDIT_ENTRIES)
  const waiters = new Waiters(options.lease, (onWake, onGap) => store.watchSlots(onWake, onGap))
  const runtime: PluginRuntime = {
    store,
    writeHeaders: headerWriter(options.headers),
    redirectGuard: redirectGuard(options.headers),
    allowList: options.allowList,
    refuse,
    stats: { allowed: 0, limited: 0, degraded: 0, shadowLimited: 0, refunded: 0, settled: 0, penalized: 0, skipped: 0, banned: 0, delayed: 0, delayAborted: 0, undelayed: 0, waitExpired: 0, held: 0, waiting: 0 },
    holds: new Holds(options.maxDelayed, () => waiters.size),
    waiters,
    pendingWork: new PendingWork(),
    timeout: options.timeout,
    failures: new BurstLogger(elapsed),
    badInput: new BurstLogger(elapsed),
    telemetry: new BurstLogger(elapsed),
    // The memory store answers locally anyway: the deny cache would only duplicate its state.
    denyCache: options.denyCacheMax > 0 && options.store === 'redis' ? new DenyCache(options.denyCacheMax) : undefined,
    rejections: new OncePerWindow(),
    clock: elapsed,
    tier: options.tier,
    metrics: undefined,
    tracing: undefined,
    localStore: () => (local ??= new MemoryStore(clock, options.maxKeys)),
    slots: new SlotKeeper(options.lease, (log, error, message) => { runtime.failures.report(log, { err: error }, message) }),
    closeLocal: () => { local?.close() },
    overrides: new Overrides(store.records(overridesKey(options.prefix)), fastify.log, audit),
    bans: new Bans(store.records(bansKey(options.prefix)), fastify.log, identityContext(fastify, options, elapsed), audit),
    audit,
    board: store.board(pictureKeys(options.prefix)),
    picture: options.picture === undefined ? undefined : new PictureCounters(options.picture.top, PICTURE_SERIES),
    identityTimeout: options.identityTimeout
  }
  return runtime
}

/** What compiling a block needs from the plugin options and the store. */
export function compileContext (
  fastify: FastifyInstance,
  options: ResolvedOptions,
  runtime: PluginRuntime
): CompileContext {
  return {
    ...identityContext(fastify, options, runtime.clock),
    prefix: options.prefix,
    onRedisError: options.onRedisError,
    mode: options.mode,
    cluster: runtime.store.cluster,
    fleetSize: options.fleetSize,
    hook: options.hook,
    periodNow: options.periodClock ?? options.clock ?? options.hostClock,
    lease: options.lease
  }
}

/**
 * A guard, not a budget: each close-time call ends within the timeout rule
 * (dispatcher.ts), but a call node-redis still holds may wait up to 20
 * timeouts, and a slot release takes one more try at close.
 */
const CLOSE_GUARD_TIMEOUTS = 30

/**
 * Answers every held and waiting request (503) and awaits the Redis work the
 * plugin started (give-backs, queue leaves, end-of-request calls: each
 * bounded by `timeout`), so that none of it is pending when the client
 * closes. preClose runs it as close begins, onClose again (`serverClosed`)
 * for the requests that ended while the server closed and the slots of those
 * still running.
 */
export async function settleAtClose (runtime: PluginRuntime, log: FastifyBaseLogger, serverClosed = false): Promise<void> {
  runtime.holds.closeAll()
  runtime.pendingWork.add(runtime.waiters.closeAll())
  // The server has closed: a request still running lost its connection (its response's 'close' may
  // come after the client closes), so its slots are released now, not at its end.
  if (serverClosed) runtime.pendingWork.add(runtime.slots.releaseAll())
  const guardMs = Math.max(1000, CLOSE_GUARD_TIMEOUTS * runtime.timeout)
  const { pendingWork, store } = runtime
  const outcome = await awaitWithin((async () => {
    // drain() first: it ends the pauses before slot retries at once. Work may start from a store
    // answer (a waiter's leave after its poll): until both are quiet.
    do {
      const drained = store.drain()
      await pendingWork.settled()
      await drained
    } while (pendingWork.size > 0)
  })(), guardMs, 'the plugin\'s close')
  if (!outcome.ok) log.warn({ err: new FST_RRL_REDIS_UNAVAILABLE(`Redis work still pending ${guardMs} ms into close`) }, 'rate limit close: not every give-back, queue leave or slot release was answered; leases reclaim what is left')
}

/** Stops what the runtime started, once settleAtClose has run: the store, the override and ban polls, the local limiter, metrics. */
export function closeRuntime (runtime: PluginRuntime): void {
  runtime.slots.close()
  runtime.store.close()
  runtime.overrides.close()
  runtime.bans.close()
  runtime.closeLocal()
  runtime.metrics?.close()
}
