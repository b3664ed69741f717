import { performance } from 'node:perf_hooks'

/*
 * Requests (and acquire() calls) waiting for a concurrency slot on this
 * instance (a block's `wait`). The queue itself is in the store, fleet-wide
 * (scripts/concurrency.lua); here each waiter is a poll: it decides again
 * with its slot id when a slot of its key may be free. That is when the
 * store announces it (the plugin's subscriber: Store.watchSlots), when the
 * subscriber may have missed announcements (a reconnect), when a decision
 * on this instance met a store failure (so waiters meet onRedisError at
 * once), and every poll interval in any case: a lost announcement or a
 * holder whose lease lapsed waits at most that long, and the poll renews
 * the waiter's own lease in the queue.
 */

type Watch = (onWake: (key: string) => void, onGap: () => void) => (() => Promise<void>) | undefined

/** One waiter: `poll` decides again, `close` answers it when the plugin closes. */
interface Waiter {
  keys: readonly string[]
  poll: () => void
  close: () => void
}

/** A waiter polls at most this far apart (a lost wake-up, a lapsed holder); lease / 3 when shorter, which also renews its place. */
export const WAITER_POLL_MS = 1000

/** A wake-up for a key with no waiter here is kept this long: its waiter's decision may still be on its way back. */
const RECENT_MS = 1000
const MAX_RECENT = 10_000

export class Waiters {
  readonly #byKey = new Map<string, Set<Waiter>>()
  readonly #all = new Set<Waiter>()
  /** Keys woken with no waiter here, and when (performance.now()). */
  readonly #recent = new Map<string, number>()
  readonly #pollMs: number
  readonly #watch: Watch
  #unwatch: (() => Promise<void>) | undefined
  #watching = false
  #timer: NodeJS.Timeout | undefined
  #closed = false

  /** `leaseMs`: the plugin's lease, which a waiter's place in the queue has too. */
  constructor (leaseMs: number, watch: Watch) {
    this.#pollMs = Math.max(1, Math.min(WAITER_POLL_MS, Math.floor(leaseMs / 3)))
    this.#watch = watch
  }

  /** Waiting now. */
  get size (): number {
    return this.#all.size
  }

  /** How far apart a waiter polls at most. */
  get pollMs (): number {
    return this.#pollMs
  }

  /**
   * Registers a waiter on `keys` whose decision was sent at `since`
   * (performance.now()); it polls at once if one of its keys was woken since.
   * Returns its removal. After closeAll (its decision was in flight then) it
   * is closed at once: close() must not wait for its wait to end.
   */
  add (keys: readonly string[], since: number, poll: () => void, close: () => void): () => void {
    const waiter: Waiter = { keys, poll, close }
    if (this.#closed) {
      let removed = false
      queueMicrotask(() => { if (!removed) close() })
      return () => { removed = true }
    }
    this.#startWatching()
    this.#all.add(waiter)
    for (const key of keys) {
      let set = this.#byKey.get(key)
      if (set === undefined) this.#byKey.set(key, (set = new Set()))
      set.add(waiter)
    }
    this.#timer ??= setInterval(() => { this.wakeAll() }, this.#pollMs).unref()
    if (keys.some((key) => (this.#recent.get(key) ?? -Infinity) >= since)) queueMicrotask(poll)
    return () => { this.#remove(waiter) }
  }

  #remove (waiter: Waiter): void {
    if (!this.#all.delete(waiter)) return
    for (const key of waiter.keys) {
      const set = this.#byKey.get(key)
      set?.delete(waiter)
      if (set?.size === 0) this.#byKey.delete(key)
    }
    if (this.#all.size === 0) this.#stopTimer()
  }

  /** A slot of `key` may be free: its waiters here decide again. */
  wake (key: string): void {
    const set = this.#byKey.get(key)
    if (set === undefined) {
      if (this.#recent.size >= MAX_RECENT) this.#recent.clear()
      this.#recent.set(key, performance.now())
      setTimeout(() => { this.#forget(key) }, RECENT_MS).unref()
      return
    }
    for (const waiter of [...set]) waiter.poll()
  }

  #forget (key: string): void {
    const at = this.#recent.get(key)
    if (at !== undefined && performance.now() - at >= RECENT_MS) this.#recent.delete(key)
  }

  /** Every waiter decides again (the poll interval, a gap in the announcements, a store failure). */
  wakeAll (): void {
    for (const waiter of [...this.#all]) waiter.poll()
  }

  /** The waiters whose slot key `matches` decide again (a store failure on the node that holds them). */
  wakeWhere (matches: (key: string) => boolean): void {
    const woken = new Set<Waiter>()
    for (const [key, set] of this.#byKey) if (matches(key)) for (const waiter of set) woken.add(waiter)
    for (const waiter of woken) waiter.poll()
  }

  #startWatching (): void {
    if (this.#watching) return
    this.#watching = true
    this.#unwatch = this.#watch((key) => { this.wake(key) }, () => { this.wakeAll() })
  }

  #stopTimer (): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** The plugin closes: every waiter is answered by its `close`; the subscriber stops (the promise: its connection closed). */
  closeAll (): Promise<void> {
    this.#closed = true
    const all = [...this.#all]
    this.#all.clear()
    this.#byKey.clear()
    this.#stopTimer()
    for (const waiter of all) waiter.close()
    const unwatched = this.#unwatch?.().catch(() => {})
    this.#unwatch = undefined
    return unwatched ?? Promise.resolve()
  }
}
