import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import type { Charge } from './decision-math.js'
import type { DenyCache } from './deny-cache.js'
import type { SlotKeeper } from '../kinds/concurrency/slot-keeper.js'
import type { Holds, Place } from '../kinds/delay/holds.js'
import type { Waiters } from '../kinds/concurrency/waiters.js'
import type { DecisionSource, Metrics, Tracing } from '../diagnostics.js'
import type { BurstLogger, OncePerWindow } from '../util/log-throttle.js'
import type { PendingWork } from '../util/pending-work.js'
import type { MemoryStore } from '../store/memory/store.js'
import type { CompiledPolicy, RouteBlock } from '../policy/policy.js'
import type { Store, StoreBlock, StoreCallMeasure } from '../store/port.js'
import type { RateLimitDecision, RateLimitStats } from '../types/index.js'
import type { PictureCounters } from '../picture/counters.js'

/*
 * What the engine takes (a Runtime, a DecisionInput, a DecisionOrigin) and
 * gives (an Evaluation). A request's blocks travel as one record each
 * (RequestBlock: the compiled block, its run, key and cost), in the policy's
 * order; the store's decisions come back in that order (decisions[i] is
 * blocks[i]'s).
 */

/** What deciding needs: the store and this instance's own defences in front of it. */
export interface Engine {
  store: Store
  /** The local deny cache, or undefined when `denyCache: false`. */
  denyCache: DenyCache | undefined
  /** This instance's clock for its own durations (deny cache, log throttles): the injected test clock, else monotonic ms. */
  clock: () => number
  /** onRedisError 'local': this instance's own limiter, created at its first call and the same after. */
  localStore: () => MemoryStore
  /** The concurrency slots this instance holds: renewed every lease / 3, each released once. */
  slots: SlotKeeper
  /** Requests held for a reserved turn (a block's `delay`), bounded by maxDelayed with the waiters. */
  holds: Holds
  /** Requests waiting for a concurrency slot (a block's `wait`). */
  waiters: Waiters
  /** Redis work this instance started that its close awaits (give-backs, queue leaves, end-of-request calls: util/pending-work.ts). */
  pendingWork: PendingWork
}

/** Where outcomes are told: counters, metrics and logs throttled per burst. */
export interface Reporter {
  stats: RateLimitStats
  /** Logs store failures at most once per burst (see BurstLogger). */
  failures: BurstLogger
  /** Logs bad cost results at most once per burst. */
  badInput: BurstLogger
  /** Logs a throwing metrics instrument or logger at most once per burst (TELEMETRY_THREW). */
  telemetry: BurstLogger
  /** Rejections are logged once per identity per window. */
  rejections: OncePerWindow
  /** OpenTelemetry instruments, once loaded at ready(). */
  metrics: Metrics | undefined
  /** Decision events on the request's span, once a TracerProvider is registered (diagnostics.ts loadTracing). */
  tracing: Tracing | undefined
  /** The counts of this instance's published picture (lib/picture/); undefined with `picture: false`. */
  picture: PictureCounters | undefined
}

/** What every decision shares, built once per plugin instance: the engine, the reporter and the plugin's `tier`. */
export interface Runtime extends Engine, Reporter {
  /** The plugin option `tier`, if any. */
  tier: ((request: FastifyRequest) => unknown) | undefined
}

/** One block of one request: its route block (the compiled block, the run for the caller's tier) with the request's key and cost, what the store takes. */
export interface RequestBlock extends RouteBlock, StoreBlock {}

/** One decision to take: the policy and one record per block (the run for the caller's tier, its key and cost). */
export interface DecisionInput {
  policy: CompiledPolicy
  blocks: readonly RequestBlock[]
  /**
   * The compiled list (policy.routeBlocks or a tierBlocks entry) the blocks
   * were made from, when no run was made for this request (requestLimit, an
   * override, a turn left out): the key of the cached RateLimit-Policy value.
   */
  compiledBlocks?: readonly RouteBlock[] | undefined
  /** This request's slot id, when some block is a concurrency block (see kinds/concurrency/decide.ts newSlotId). */
  slot?: string
  /** Ms this request has waited for a slot so far (a block's `wait`: kinds/concurrency/slot-wait.ts); absent: it has not. */
  waitedMs?: number
  /** performance.now() when a policy with `delay` or `wait` sent its last decision. */
  sentAt?: number
}

/** Where a decision is reported: the request's logger and the name logs and metrics use. */
export interface DecisionOrigin {
  log: FastifyBaseLogger
  /** `GET /orders/:id`, or `api GET /orders/:id` for consume(). */
  route: string
  source: DecisionSource
  /** The caller holds a request admitted at a later turn (a route, the API's schedule()); absent: only what fits now is admitted (consume()). */
  holds?: boolean
  /** The caller waits for a concurrency slot (a route, acquire()); absent: a block's `wait` is not used. */
  waits?: boolean
  /** A waiter's poll (kinds/concurrency/slot-wait.ts): it keeps its place in the queue whatever the maxDelayed bound. */
  inQueue?: boolean
}

/** The result of one decision, for the hook (headers, reply) and the API. */
export interface Evaluation {
  /** What was decided: the policy and the request's blocks; a local decision's own runs. */
  input: DecisionInput
  decision: RateLimitDecision
  /** Per block, in input.blocks' order, undefined where unknown (a deny-cache answer) or on a store failure. */
  decisions: ReadonlyArray<RawDecision | undefined>
  rejected: boolean
  /** What admitting blocks' `remaining` means (see shownRemaining). */
  charge: Charge
  /** Block the legacy headers and the top-level decision report. */
  binding: number
  violated: string[]
  shadowViolated: string[]
  retrySeconds: number
  source: DecisionSource
  /** When the store charged this decision, on its clock (store/port.ts Decided.at): what a give-back sends. Undefined unless the store decided. */
  chargedAt: number | undefined
  /** Admitted at a reserved turn this many ms away (a block's `delay`): how long the request is held; 0: it goes on now. */
  turnMs: number
  /** No slot yet, but the request joined the slot's queue and waits (a block's `wait`): not an answer, never reported. */
  queued: boolean
  /**
   * Its place under maxDelayed (kinds/delay/holds.ts), when it holds (turnMs > 0)
   * or queued: whoever holds it or makes it wait passes the place on, and
   * returns it on every other path (returning it again does nothing).
   */
  place?: Place
  /** The store call that decided it (its size and latency), for traces; absent unless Redis decided. */
  storeCall?: StoreCallMeasure | undefined
}
