import type { FastifyBaseLogger } from 'fastify'
import type { SlotAdjustment, Store } from '../../store/port.js'

/*
 * The slots this instance holds (concurrency blocks): who took them, their
 * renewal every lease / 3 (one store call per held request, sent in one turn:
 * the dispatcher batches them), and their one release. The engine's runtime
 * holds one SlotKeeper (decide/contract.ts Engine.slots); decide.ts hands it
 * the slots an admitted decision took.
 */

/** Slots taken for one request (or one acquire()), released once whichever way. */
export interface HeldSlots {
  /** Where they were taken: the store, or this instance's local limiter (onRedisError 'local'). */
  readonly store: Store
  /** Stops renewing and hands over the release entries, once (then []): the end-of-request call sends them. */
  take: () => SlotAdjustment[]
  /** take(), then sends the release itself (retried: Store.adjustSlots). */
  release: () => void
}

type Report = (log: FastifyBaseLogger, error: unknown, message: string) => void

interface Held {
  store: Store
  renewals: SlotAdjustment[]
  log: FastifyBaseLogger
  /** Hands the release entries over once (then []). */
  take: () => SlotAdjustment[]
}

/** Holds the slots of every request in flight on this instance, renews them, releases each once. */
export class SlotKeeper {
  readonly #held = new Set<Held>()
  readonly #renewEveryMs: number
  readonly #report: Report
  #timer: NodeJS.Timeout | undefined

  constructor (leaseMs: number, report: Report) {
    this.#renewEveryMs = Math.max(1, Math.floor(leaseMs / 3))
    this.#report = report
  }

  /** Requests whose slots this instance holds now. */
  get size (): number {
    return this.#held.size
  }

  /** Starts renewing the slots `entries` release; the result hands them over once. */
  hold (store: Store, entries: SlotAdjustment[], log: FastifyBaseLogger): HeldSlots {
    const held: Held = { store, renewals: entries.map((entry) => ({ ...entry, kind: 'renew' })), log, take: () => take() }
    this.#held.add(held)
    // The timer never keeps the process alive: a slot renews itself until released or the process exits.
    this.#timer ??= setInterval(() => { this.#renewAll() }, this.#renewEveryMs).unref()
    let taken = false
    const take = (): SlotAdjustment[] => {
      if (taken) return []
      taken = true
      this.#held.delete(held)
      if (this.#held.size === 0) this.#stop()
      return entries
    }
    return {
      store,
      take,
      release: () => {
        const releases = take()
        if (releases.length === 0) return
        store.adjustSlots(releases).catch((error: unknown) => { this.#report(log, error, 'rate limit slot release failed: the lease reclaims it') })
      }
    }
  }

  #renewAll (): void {
    for (const held of this.#held) {
      held.store.adjust(held.renewals).catch((error: unknown) => {
        this.#report(held.log, error, 'rate limit slot renewal failed: the slot lapses after its lease unless a later renewal reaches the store')
      })
    }
  }

  #stop (): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /**
   * At close, once the server has closed: every slot still held is released
   * now (a request still running has lost its connection; an acquire() ends
   * with the app), each release retried as Store.adjustSlots does. Resolves
   * when every release was answered or given up on (then the lease reclaims it).
   */
  async releaseAll (): Promise<void> {
    await Promise.all([...this.#held].map(async (held) => {
      const entries = held.take()
      if (entries.length === 0) return
      await held.store.adjustSlots(entries).catch((error: unknown) => { this.#report(held.log, error, 'rate limit slot release at close failed: the lease reclaims it') })
    }))
  }

  /** At close: stops renewing (slots still held lapse after their lease). */
  close (): void {
    this.#stop()
    this.#held.clear()
  }
}
