import type { RawDecision } from './algorithm-types.js'
import type { BlockRun } from './policy.js'

/** Where decisions are taken: one atomic step per request. */
export interface Store {
  /**
   * Decides every block of one request at once, all-or-nothing: when every
   * enforced (non-shadow) run admits, each enforced run and each admitting
   * shadow run is charged; otherwise nothing is written. With `dry`, nothing is
   * written in any case (a peek). Returns one decision per run, in order.
   * Rejects on any failure (unavailable, timeout, bad reply); the caller applies onRedisError.
   */
  decide: (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], dry: boolean) => Promise<RawDecision[]>
  /**
   * Gives back `costs[i]` to each run's key, spent `elapsedMs` ago (refundOn).
   * One atomic call; returns per run whether units were given back.
   */
  refund: (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], elapsedMs: number) => Promise<boolean[]>
  /** Deletes the state of these keys (one request's keys: one slot). */
  reset: (keys: readonly string[]) => Promise<void>
  /** Called at app.ready(): gives a connecting client a bounded moment to become ready. */
  warmUp: () => Promise<void>
  close: () => void
}
