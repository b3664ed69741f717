import { randomBytes } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { DecisionInput, Evaluation, Runtime } from './contract.js'
import { isSlotRun, type BlockRun, type Store, type StoreRequest } from '../store/port.js'

/*
 * The slots this instance holds (concurrency blocks): who took them, their
 * renewal every lease / 3 (one store call per turn: the dispatcher batches
 * every held slot's renewal), and their one release. A slot id is unique per
 * request fleet-wide: this process's random tag and a counter, starting with
 * a letter (the scripts tell it from a cost by that).
 */

const PROCESS_TAG = randomBytes(6).toString('base64url')
let counter = 0

/** A new slot id: `s<process tag><counter>`, never a number. */
export function newSlotId (): string {
  counter++
  return `s${PROCESS_TAG}${counter.toString(36)}`
}

/** Slots taken for one request (or one acquire()): released once, however often release() is called. */
export interface HeldSlots {
  release: () => void
}

interface Held {
  store: Store
  request: StoreRequest
  log: FastifyBaseLogger
}

/** Holds the slots of every request in flight on this instance, renews them, releases each once. */
export class SlotKeeper {
  readonly #held = new Set<Held>()
  readonly #renewEveryMs: number
  readonly #onFailure: (log: FastifyBaseLogger, error: unknown, what: string) => void
  #timer: NodeJS.Timeout | undefined

  constructor (leaseMs: number, onFailure: (log: FastifyBaseLogger, error: unknown, what: string) => void) {
    this.#renewEveryMs = Math.max(1, Math.floor(leaseMs / 3))
    this.#onFailure = onFailure
  }

  get size (): number {
    return this.#held.size
  }

  /** Starts renewing `request`'s slots on `store`; the returned release() gives them back, once. */
  hold (store: Store, request: StoreRequest, log: FastifyBaseLogger): HeldSlots {
    const held: Held = { store, request, log }
    this.#held.add(held)
    // The timer never keeps the process alive: a slot renews itself until released or the process exits.
    this.#timer ??= setInterval(() => { this.#renewAll() }, this.#renewEveryMs).unref()
    let released = false
    return {
      release: () => {
        if (released) return
        released = true
        this.#held.delete(held)
        if (this.#held.size === 0) this.#stop()
        store.release(request).catch((error: unknown) => { this.#onFailure(log, error, 'rate limit slot release failed: the lease reclaims it') })
      }
    }
  }

  #renewAll (): void {
    for (const held of this.#held) {
      held.store.renew(held.request).catch((error: unknown) => { this.#onFailure(held.log, error, 'rate limit slot renewal failed: the slot lapses unless a later one reaches the store') })
    }
  }

  #stop (): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** At close: stops renewing (the slots lapse after their lease unless released). */
  close (): void {
    this.#stop()
    this.#held.clear()
  }
}

/** The request's concurrency runs alone, with their keys and its slot id: what a release or renewal sends. */
function slotRequest (input: DecisionInput): StoreRequest {
  const runs: BlockRun[] = []
  const keys: string[] = []
  for (let i = 0; i < input.runs.length; i++) {
    const run = input.runs[i] as BlockRun
    if (!isSlotRun(run)) continue
    runs.push(run)
    keys.push(input.keys[i] as string)
  }
  return { runs, keys, costs: runs.map(() => 1), slot: input.slot }
}

/**
 * After an admitted decision with slots: holds them where they were taken
 * (the store, or this instance's local limiter for onRedisError 'local').
 * Undefined when none was taken: refused, or the store failed and
 * onRedisError let the request through without one.
 */
export function holdSlots (runtime: Runtime, input: DecisionInput, evaluation: Evaluation, log: FastifyBaseLogger): HeldSlots | undefined {
  if (evaluation.rejected || input.slot === undefined) return undefined
  if (evaluation.decision.outcome === 'degraded') return undefined
  const store = evaluation.source === 'local' ? runtime.localStore() : runtime.store
  return runtime.slots.hold(store, slotRequest(input), log)
}
