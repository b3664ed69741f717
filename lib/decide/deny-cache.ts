import { LruMap } from '../util/lru-map.js'

/*
 * The local deny cache: after the store rejects a key with retryAfterMs, this
 * instance refuses that key by itself until then, without a store round trip.
 *
 * - Never admits: it only ever answers "rejected", and a miss goes to the store.
 * - Never rejects longer than the store said: an entry ends at
 *   (local time when the request was sent) + retryAfterMs, which is no later
 *   than the store's own moment + retryAfterMs, and it only applies to requests
 *   that cost at least as much as the rejected one (a cheaper request might fit
 *   sooner) under the same limits (a caller who changed tier is asked again).
 * - Bounded: an LruMap; the least recently used entry goes first.
 * - Per instance: reset() (the API) clears it here; other instances' entries
 *   run out by themselves, at most retryAfterMs later.
 * - Short for quotas: the run's kind bounds an entry's life (BlockKind.denyHold):
 *   a window longer than a day or a calendar period keeps it at most a second
 *   (it still answers with the real retry time), so units given back
 *   elsewhere are seen within about a second, not weeks later; a concurrency
 *   refusal is never kept.
 */

export interface DenyEntry {
  /** Local ms (the plugin clock) until which the key is refused: the retry time answered. */
  until: number
  /** Local ms until which the entry is kept (the run's kind.denyHold): `until`, or sooner for quotas. */
  expiresAt: number
  /** Cost of the rejected request: cheaper requests are not answered from here. */
  cost: number
  /** `remaining` as the store reported it. */
  remaining: number
  /** The store refused it with a penalty. */
  penalized: boolean
  /** Local ms at which `remaining` grows by one unit (the RateLimit field's `t`); never after `until`. */
  nextAt: number
  /**
   * The limits the store decided with (a tier's run): a request of another
   * tier may fit sooner, so it is not answered from this entry.
   */
  run: object
}

export class DenyCache {
  readonly #entries: LruMap<string, DenyEntry>

  constructor (max: number) {
    this.#entries = new LruMap(max)
  }

  get size (): number {
    return this.#entries.size
  }

  /** The live entry for `key` that covers a request of `cost` at `now`, if any. */
  get (key: string, cost: number, now: number, run: object): DenyEntry | undefined {
    const entry = this.#entries.peek(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      this.#entries.delete(key)
      return undefined
    }
    if (cost < entry.cost || run !== entry.run) return undefined
    return this.#entries.get(key)
  }

  /** Keeps `entry` (the caller's own object, not copied) for `key`; its nextAt is clamped to its until. */
  set (key: string, entry: DenyEntry): void {
    if (entry.nextAt > entry.until) entry.nextAt = entry.until
    this.#entries.set(key, entry)
  }

  delete (key: string): void {
    this.#entries.delete(key)
  }

  clear (): void {
    this.#entries.clear()
  }
}
