import type { BlockParams, RawDecision, RunAlgorithm } from './algorithms.js'

/*
 * The store contract: what every store (Redis, memory) takes and answers.
 * It imports only the algorithm contract, so the stores never import the
 * policy compiler that produces their input.
 */

/** The numbers one block runs with for one tier (or for all, without tiers). */
export interface BlockRun {
  /** 'concurrency': in-flight slots, `limit` of them, leased for `windowMs` (see scripts/concurrency.lua). */
  algorithm: RunAlgorithm
  /** 1-based position in ALGORITHMS (CONCURRENCY_NUMBER for slots): the scripts' algorithm number. */
  algorithmNumber: number
  params: BlockParams
  /** limit, windowMs, burst as script arguments. */
  scriptArgs: readonly [string, string, string]
  /** Decided and recorded, never blocks the request. */
  shadow: boolean
  /** The tier this run applies to, or undefined when the block has no tiers. */
  tier: string | undefined
  /** Escalation for repeat offenders, when the block declares `penalty`. */
  penalty?: Penalty
  /** This instance's share while Redis is unavailable (onRedisError 'local'), when known. */
  local?: BlockParams
}

/** A compiled `penalty`: see docs/algorithms.md, "Penalties", and scripts/penalty.lua. */
export interface Penalty {
  /** Refusals within one window of the block that start a penalty. */
  after: number
  /** The first penalty's length. */
  forMs: number
  /** Each further offence lasts this many times longer (repeated multiplication). */
  backoff: number
  /** No penalty lasts longer. */
  maxMs: number
  /** `after:forMs:backoff:maxMs`, as the batch script reads it. */
  arg: string
}

/** The key that holds a block's penalty state: its own key plus `:p` (same hash tag, so same slot). */
export function penaltyKey (key: string): string {
  return key + ':p'
}

/**
 * How `Store.decide` runs: `'charge'` decides and, when every enforced run
 * admits, charges the request; `'peek'` decides and writes nothing (the API's
 * peek). A name rather than a boolean, so a call site says what it does.
 */
export type DecideMode = 'charge' | 'peek'

/** The one logger method a store uses at startup (Fastify's logger fits). */
export interface DebugLog {
  debug: (object: object, message: string) => void
}

/**
 * One request's blocks as a store call takes them: run i is decided on
 * `keys[i]` at `costs[i]`. The engine's DecisionInput is one, passed as is.
 */
export interface StoreRequest {
  runs: readonly BlockRun[]
  keys: readonly string[]
  costs: readonly number[]
  /** The request's slot id (its sorted-set member) for its concurrency runs; none without them. */
  slot?: string
}

/** Whether a run counts in-flight slots (a concurrency block) rather than units. */
export function isSlotRun (run: BlockRun): boolean {
  return run.algorithm === 'concurrency'
}

/** Where decisions are taken: one atomic step per request. */
export interface Store {
  /**
   * Decides every block of one request at once, all-or-nothing: when every
   * enforced (non-shadow) run admits, each enforced run and each admitting
   * shadow run is charged; otherwise nothing is written. With `'peek'`, nothing
   * is written in any case. Returns one decision per run, in order.
   * Rejects on any failure (unavailable, timeout, bad reply); the caller applies onRedisError.
   */
  decide: (request: StoreRequest, mode: DecideMode) => Promise<RawDecision[]>
  /**
   * Gives back `costs[i]` to each run's key, spent `elapsedMs` ago (refundOn).
   * One atomic call; returns per run whether units were given back.
   */
  refund: (request: StoreRequest, elapsedMs: number) => Promise<boolean[]>
  /**
   * Gives back the slot `request.slot` holds on each (concurrency) run's key.
   * Idempotent (a slot is removed at most once, whatever the retries); the
   * Redis store retries it after a timeout. Rejects when every try failed:
   * the lease reclaims the slot then.
   */
  release: (request: StoreRequest) => Promise<void>
  /** Extends the lease of the slot `request.slot` holds on each run's key; per run whether it was still held. */
  renew: (request: StoreRequest) => Promise<boolean[]>
  /** Deletes the state of these keys (one request's keys: one slot). */
  reset: (keys: readonly string[]) => Promise<void>
  /** Called at app.ready(): gives a connecting client a bounded moment to become ready; `log` gets debug notes. */
  warmUp: (log?: DebugLog) => Promise<void>
  close: () => void
}
