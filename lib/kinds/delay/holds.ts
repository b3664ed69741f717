/*
 * Requests (and API calls) admitted at a later turn (a block's `delay`) and
 * held on this instance until it: a timer each, no further store call. The
 * number held is bounded (`maxDelayed`, with the waiters for a slot): past it
 * the engine decides without delay or wait (kinds/delay/turns.ts
 * withoutTurns), so no turn is reserved for a request this instance would not
 * hold. The bound counts what may become what it bounds: a decision that may
 * hold or queue takes a place before its store call (a burst's decisions are
 * all in flight before the first reply), and the place becomes its hold or
 * its wait, or is returned on every other outcome. Each held entry ends
 * exactly once: at its turn, when its caller leaves (cancel), or when the
 * plugin closes.
 * One held after the close began (its decision was in flight then) is closed
 * at once: close() must not wait for its turn.
 */

/** A place under the bound, taken before a store call: it becomes a hold (Holds.hold) or a wait (kinds/concurrency/slot-wait.ts), else it is returned. Returning it twice does nothing. */
export interface Place {
  release: () => void
}

/** One held request: `turn` at its time, `close` if the plugin closes first. */
interface Held {
  timer: NodeJS.Timeout | undefined
  turn: () => void
  close: () => void
}

export class Holds {
  readonly #max: number
  readonly #held = new Set<Held>()
  /** The others the bound covers: requests waiting for a slot (kinds/concurrency/waiters.ts). */
  readonly #others: () => number
  /** Places taken by decisions still in flight (or answered, and not yet held or waiting). */
  #taken = 0
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
    return this.#held.size + this.#others() + this.#taken >= this.#max
  }

  /**
   * A place for a decision that may hold or queue, before its store call;
   * undefined when none is free (decide it without delay or wait). `carried`:
   * a place the request has already (a waiter whose slot came with a turn to
   * hold), taken whatever the bound and counted until its hold starts.
   */
  take (carried = false): Place | undefined {
    if (!carried && this.full) return undefined
    this.#taken++
    let taken = true
    return {
      release: () => {
        if (!taken) return
        taken = false
        this.#taken--
      }
    }
  }

  /**
   * Holds for `waitMs`, then `turn()`; `close()` instead if closeAll comes
   * first. `place`: the request's place, returned once the hold counts.
   * Returns the cancel (its caller left): it ends the hold silently.
   */
  hold (waitMs: number, turn: () => void, close: () => void, place?: Place): () => void {
    const held: Held = { timer: undefined, turn, close }
    this.#held.add(held)
    place?.release()
    // After closeAll: answered as the others were, once the caller has its cancel.
    if (this.#closed) queueMicrotask(() => { if (this.#held.delete(held)) close() })
    else held.timer = setTimeout(() => { if (this.#held.delete(held)) turn() }, waitMs)
    return () => {
      if (this.#held.delete(held)) clearTimeout(held.timer)
    }
  }

  /**
   * The plugin closes: every held entry is answered by its `close`, none waits
   * for its turn. Latest first: a gcra turn is given back only while it is the
   * latest (kinds/window/kind.ts chargeMark), so each give-back, sent in this
   * order in one call, makes the one before it the latest.
   */
  closeAll (): void {
    this.#closed = true
    const all = [...this.#held].reverse()
    this.#held.clear()
    for (const held of all) {
      clearTimeout(held.timer)
      held.close()
    }
  }
}
