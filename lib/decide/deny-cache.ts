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
 */

export interface DenyEntry {
  /** Local ms (the plugin clock) until which the key is refused. */
  until: number
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
    if (entry.until <= now) {
      this.#entries.delete(key)
      return undefined
    }
    if (cost < entry.cost || run !== entry.run) return undefined
    return this.#entries.get(key)
  }

  set (key: string, until: number, cost: number, remaining: number, run: object, penalized = false, nextAt = until): void {
    this.#entries.set(key, { until, cost, remaining, run, penalized, nextAt: Math.min(nextAt, until) })
  }

  delete (key: string): void {
    this.#entries.delete(key)
  }

  clear (): void {
    this.#entries.clear()
  }
}
