/*
 * Work the plugin started and its close must see finish: the Redis calls of
 * requests it answers at close (give-backs of held turns, queue leaves) and of
 * requests that end while the server closes (slot releases, settles,
 * refunds). Each promise leaves the set when it settles; `settled()` waits
 * until the set is empty, also for work added while it waits (a waiter's
 * leave sent once its poll in flight answered). Each piece bounds itself
 * (the store's `timeout`, identityTimeout for a settle), so the wait does too.
 */

export class PendingWork {
  readonly #open = new Set<Promise<unknown>>()

  /** Promises not settled yet. */
  get size (): number {
    return this.#open.size
  }

  /** Tracks `work` until it settles; a rejection is the caller's to handle (it is only observed here). */
  add (work: Promise<unknown>): void {
    this.#open.add(work)
    const done = (): void => { this.#open.delete(work) }
    work.then(done, done)
  }

  /** Resolves once nothing tracked is pending, work added meanwhile included. */
  async settled (): Promise<void> {
    while (this.#open.size > 0) await Promise.allSettled([...this.#open])
  }
}
