/**
 * A Map bounded to `max` entries that evicts the least recently used one.
 * Map iteration order is insertion order, so "recently used" is "re-inserted".
 */
export class LruMap<K, V> {
  readonly #max: number
  readonly #entries = new Map<K, V>()

  constructor (max: number) {
    this.#max = max
  }

  get size (): number {
    return this.#entries.size
  }

  /** The value, without marking it as used. */
  peek (key: K): V | undefined {
    return this.#entries.get(key)
  }

  /** The value, marked as the most recently used. */
  get (key: K): V | undefined {
    const value = this.#entries.get(key)
    if (value === undefined) return undefined
    this.#entries.delete(key)
    this.#entries.set(key, value)
    return value
  }

  /** Stores the value as the most recently used; the oldest entry goes beyond `max`. */
  set (key: K, value: V): void {
    const entries = this.#entries
    entries.delete(key)
    entries.set(key, value)
    if (entries.size > this.#max) {
      const oldest = entries.keys().next()
      if (oldest.done !== true) entries.delete(oldest.value)
    }
  }

  delete (key: K): boolean {
    return this.#entries.delete(key)
  }

  clear (): void {
    this.#entries.clear()
  }

  entries (): IterableIterator<[K, V]> {
    return this.#entries.entries()
  }
}
