/*
 * Requests (and API calls) admitted at a later turn (a block's `delay`) and
 * held on this instance until it: a timer each, no further store call. The
 * number held is bounded (`maxDelayed`): past it the engine decides without
 * delay (kinds/window/decide.ts withoutTurns), so no turn is reserved for a
 * request this instance would not hold. Each held entry ends exactly once: at
 * its turn, when its caller leaves (cancel), or when the plugin closes. One
 * held after the close began (its decision was in flight then) is closed at
 * once: close() must not wait for its turn.
 */

/** One held request: `turn` at its time, `close` if the plugin closes first. */
interface Held {
  timer: NodeJS.Timeout | undefined
  turn: () => void
  close: () => void
}

export class Holds {
  readonly #max: number
  readonly #held = new Set<Held>()
  /** The others the bound covers: requests waiting for a slot (decide/waiters.ts). */
  readonly #others: () => number
  #closed = false

  constructor (max: number, others: () => number = () => 0) {
    this.#max = max
    this.#others = others
  }

  /** How many are held now. */
  get size (): number {
    return this.#held.size
  }

  /** No more may be held or wait: decide without delay or wait. */
  get full (): boolean {
    return this.#held.size + this.#others() >= this.#max
  }

  /** Holds for `waitMs`, then `turn()`; `close()` instead if closeAll comes first. Returns the cancel (its caller left): it ends the hold silently. */
  hold (waitMs: number, turn: () => void, close: () => void): () => void {
    const held: Held = { timer: undefined, turn, close }
    this.#held.add(held)
    // After closeAll: answered as the others were, once the caller has its cancel.
    if (this.#closed) queueMicrotask(() => { if (this.#held.delete(held)) close() })
    else held.timer = setTimeout(() => { if (this.#held.delete(held)) turn() }, waitMs)
    return () => {
      if (this.#held.delete(held)) clearTimeout(held.timer)
    }
  }

  /** The plugin closes: every held entry is answered by its `close`, none waits for its turn. */
  closeAll (): void {
    this.#closed = true
    const all = [...this.#held]
    this.#held.clear()
    for (const held of all) {
      clearTimeout(held.timer)
      held.close()
    }
  }
}
