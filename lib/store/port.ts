import type { BlockParams, RawDecision, RunAlgorithm } from './algorithms.js'
import type { PeriodBoundaries } from '../kinds/period/calendar.js'
import type { BlockKind } from '../kinds/contract.js'
import type { NodeHealth } from '../types/api.js'

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
  /** What the block counts over, and what the engine, headers and stores ask of it (lib/kinds/). */
  kind: BlockKind
  /** Decided and recorded, never blocks the request. */
  shadow: boolean
  /** The tier this run applies to, or undefined when the block has no tiers. */
  tier: string | undefined
  /** Escalation for repeat offenders, when the block declares `penalty`. */
  penalty?: Penalty
  /** This instance's share while Redis is unavailable (onRedisError 'local'), when known. */
  local?: BlockParams
  /** A calendar period's boundaries (fixed-window over the period holding now), when the block declares `period`. */
  period?: PeriodBoundaries | undefined
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

/** The logger methods a store uses from startup on (Fastify's logger fits). */
export interface StartupLog {
  debug: (object: object, message: string) => void
  warn: (object: object, message: string) => void
}

/** One block of one request: its run, decided on `key` at `cost`. */
export interface StoreBlock {
  run: BlockRun
  key: string
  cost: number
}

/**
 * One request's blocks as a store call takes them, one record per block, in
 * the policy's order (the order of the decisions answered). The engine's
 * DecisionInput is one, passed as is.
 */
export interface StoreRequest {
  blocks: readonly StoreBlock[]
  /** The request's slot id (its sorted-set member) for its concurrency runs; none without them. */
  slot?: string
}

/**
 * A signed change of one block's usage, made after the decision that charged
 * it. `units` < 0 gives back (never below zero), to the window the charge was
 * made in, as docs/quotas.md's table says per algorithm: fixed-window and
 * periods only while that window is current, sliding-window the current or
 * the previous one; a charge whose window is older gives nothing back.
 * `units` > 0 charges without deciding (never refused: usage may go over the
 * limit, an overdraft the next decisions wait out), to the current window.
 */
export interface UnitsAdjustment {
  kind: 'units'
  run: BlockRun
  key: string
  /** A nonzero integer: positive charges, negative gives back. */
  units: number
  /**
   * When the units were charged, on the store's clock (Decided.at: Redis
   * TIME, or the test clock the call sent; the memory store's clock), which
   * the store compares with its own clock now: never an instance's clock.
   * Undefined: a change outside a request (adjust()), made now.
   */
  chargedAt?: number | undefined
}

/**
 * A concurrency slot's release (ZREM, idempotent) or renewal (its lease
 * starts again from now, if it is still held): `slot` is the request's slot
 * id, its sorted-set member (scripts/concurrency.lua).
 */
export interface SlotAdjustment {
  kind: 'release' | 'renew'
  run: BlockRun
  key: string
  slot: string
}

/**
 * One entry of `Store.adjust`. A new kind joins
 * this union, with its encoding in redis/protocol.ts (adjustCall), its branch
 * in scripts/batch.lua (adjustOne) and in the memory store (adjustOne).
 */
export type Adjustment = UnitsAdjustment | SlotAdjustment

/** The releases of the slots a request takes, one per run that holds one (none without a slot id). */
export function slotReleases ({ blocks, slot }: StoreRequest): SlotAdjustment[] {
  const out: SlotAdjustment[] = []
  if (slot === undefined) return out
  for (const { run, key } of blocks) if (run.kind.holdsSlot) out.push({ kind: 'release', run, key, slot })
  return out
}

/** Whether every entry is a slot's release or renewal (an idempotent call). */
export function onlySlots (entries: readonly Adjustment[]): entries is readonly SlotAdjustment[] {
  return entries.every((entry) => entry.kind !== 'units')
}

/** A decision call's answer: one decision per block, in the request's order, and the store's clock (ms) when it decided. */
export interface Decided {
  decisions: RawDecision[]
  /** Redis TIME as the script read it (or the test clock it was sent), the memory store's clock: a charge's time for its give-backs. */
  at: number
  /** The script call that carried it: its decisions and ms from write to reply (Redis only; for traces). */
  call?: StoreCallMeasure
}

/** One store call as traces show it: how many decisions it carried, and its ms from write to reply. */
export interface StoreCallMeasure {
  size: number
  latencyMs: number
}

/** One hash's records as read: each id's JSON, and the store's clock (ms) when they were read. */
export interface RecordsRead {
  fields: Map<string, string>
  at: number
}

/**
 * One hash of operator records (bans, overrides: lib/fleet/), one JSON per
 * id. Times are the store's (Redis TIME of the node that holds the hash, or
 * the `clock` option standing in for it; the memory store's clock), never an
 * instance's, and a lapsed record is deleted only by a compare-and-delete
 * that checks the store's own clock.
 */
export interface RecordHash {
  read: () => Promise<RecordsRead>
  /** The store's clock now, without a call: on Redis, TIME at the last read or stamp plus the monotonic time since. */
  now: () => number
  /** The store's clock read now (one round trip on Redis unless the `clock` option stands in for TIME): a new record's time. */
  stamp: () => Promise<number>
  write: (id: string, json: string) => Promise<void>
  /** Whether there was a record to delete. */
  remove: (id: string) => Promise<boolean>
  /** Deletes `id` only if it still holds `json` and `expiresAt` has passed on the store's clock; whether it did. */
  removeLapsed: (id: string, json: string, expiresAt: number) => Promise<boolean>
}

/** The two keys of the fleet's pictures: a hash of JSON by instance id, and a sorted set of their lapse times. */
export interface PictureKeys {
  pictures: string
  lapses: string
}

/**
 * The fleet's pictures (lib/picture/): one JSON per live instance, each
 * lapsing `ttlMs` after it was written by the store's clock, so a dead
 * instance drops out by itself; every write also drops the lapsed ones.
 */
export interface PictureBoard {
  /** Writes this instance's picture; resolves to the store's time of the write. */
  publish: (id: string, json: string, ttlMs: number) => Promise<number>
  /** Removes this instance's picture (at close). */
  withdraw: (id: string) => Promise<void>
  /** Every picture not lapsed, by instance id, and the store's time of the read. */
  read: () => Promise<{ pictures: Map<string, string>, at: number }>
}

/** A bounded log of operator changes (an audit trail): the newest `max` entries are kept, about. */
export interface AuditTrail {
  add: (json: string) => Promise<void>
  /** The newest entries first, at most `count`. */
  recent: (count: number) => Promise<string[]>
}

/** Where decisions are taken: one atomic step per request. */
export interface Store {
  /**
   * Decides every block of one request at once, all-or-nothing: when every
   * enforced (non-shadow) run admits, each enforced run and each admitting
   * shadow run is charged; otherwise nothing is written. With `'peek'`, nothing
   * is written in any case. Returns one decision per run, in order, and the
   * time the store decided at (the charge's time, for give-backs).
   * Rejects on any failure (unavailable, timeout, bad reply, the node's
   * circuit breaker open for a charge); the caller applies onRedisError.
   */
  decide: (request: StoreRequest, mode: DecideMode) => Promise<Decided>
  /** The node that holds `key` (a Cluster master; one name standalone, and for the memory store): the unit that fails alone. */
  nodeOf: (key: string) => string
  /**
   * Changes usage after the decisions that charged it (refundOn, settle,
   * `fastify.rateLimit.adjust`): one store call for every entry, each entry
   * atomic on its own. Every key of one call shares one hash slot (one
   * request's, or one target and identity's, keys). Returns per entry whether
   * it changed anything. Rejects on any failure, like `decide`.
   */
  adjust: (entries: readonly Adjustment[]) => Promise<boolean[]>
  /**
   * adjust() of slot entries alone: idempotent, so the Redis store sends it
   * apart from other calls, never defuses it, and tries it again after a
   * failure (RELEASE_TRIES in all). Rejects when every try failed: the lease
   * reclaims the slots then.
   */
  adjustSlots: (entries: readonly SlotAdjustment[]) => Promise<boolean[]>
  /** Deletes the state of these keys (one request's keys: one slot). */
  reset: (keys: readonly string[]) => Promise<void>
  /** Called at app.ready(): gives a connecting client a bounded moment to become ready; `log` gets debug notes. */
  warmUp: (log?: StartupLog) => Promise<void>
  /** The records hash under `key` (one key: one slot, so a Cluster holds it on one node); each Redis handle carries its own TIME estimate. */
  records: (key: string) => RecordHash
  /** The fleet's pictures under `key` (keys/layout.ts pictureKeys: two keys of one hash tag). */
  board: (keys: PictureKeys) => PictureBoard
  /** The audit trail under `key` (a stream on Redis), keeping about `max` entries. */
  audit: (key: string, max: number) => AuditTrail
  /** Every node's breaker now (empty without a circuit breaker and before the first decision). */
  health: () => NodeHealth[]
  /** Whether every key of one call must share a hash slot (a Redis Cluster). */
  readonly cluster: boolean
  /**
   * Slot wake-ups (a concurrency block's `wait`): `onWake(key)` when a slot of
   * `key` may be free for its queue (scripts/concurrency.lua publishes it),
   * `onGap()` when wake-ups may have been missed (a subscriber reconnected).
   * Returns the unsubscribe; undefined when the store has none (waiters poll).
   */
  watchSlots: (onWake: (key: string) => void, onGap: () => void) => (() => Promise<void>) | undefined
  /**
   * The plugin is closing: what is queued is sent now, and the promise
   * resolves once every call asked of the store so far has been answered or
   * given up on (each bounded by `timeout`), its own releases of abandoned
   * decisions included. From now on a failed slot call is tried once more at
   * most (a pause before a retry ends at once): the lease reclaims the rest.
   */
  drain: () => Promise<void>
  close: () => void
}
