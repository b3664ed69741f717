import { hashTag } from './cluster-slots.js'
import { item } from '../../util/item.js'

/*
 * Group commit's bookkeeping (dispatcher.ts): the calls in flight and the
 * jobs waiting per lane. A lane is what one call may carry: the connection
 * standalone (any decisions share a call), a hash tag on a Cluster (every
 * key of one call in one slot). Lanes of a Cluster are dropped when idle, so
 * a million identities leave no map behind.
 */

interface Keyed { keys: readonly string[] }

export class Lane<T extends Keyed = Keyed> {
  readonly tag: string
  /** Calls of this lane written and not yet ended. */
  inFlight = 0
  /** Jobs that arrived while the lane was full, oldest first. */
  waiting: T[] = []

  constructor (tag: string) {
    this.tag = tag
  }

  sent (): void {
    this.inFlight++
  }

  wait (jobs: readonly T[]): void {
    for (const job of jobs) this.waiting.push(job)
  }
}

export class Lanes<T extends Keyed = Keyed> {
  readonly #cluster: boolean
  readonly #max: number
  readonly #lanes = new Map<string, Lane<T>>()

  constructor (cluster: boolean, maxInFlight: number) {
    this.#cluster = cluster
    this.#max = maxInFlight
  }

  /** The lane of a job: the one lane standalone, its first key's hash tag on a Cluster. */
  of (job: T): Lane<T> {
    const tag = this.#cluster ? hashTag(item(job.keys, 0)) : ''
    let lane = this.#lanes.get(tag)
    if (lane === undefined) {
      lane = new Lane(tag)
      this.#lanes.set(tag, lane)
    }
    return lane
  }

  /** Whether a call may leave now: room in flight, and no job waiting (a new job joins them rather than overtaking). */
  open (lane: Lane<T>): boolean {
    return lane.inFlight < this.#max && lane.waiting.length === 0
  }

  /**
   * A call of the lane ended: the jobs to send next (all that waited) once the
   * lane has room, or every waiting job whatever room when `all` (the call
   * was abandoned to Redis's silence: they wait on the same connection).
   */
  release (lane: Lane<T>, all: boolean): T[] | undefined {
    lane.inFlight--
    let out: T[] | undefined
    if (lane.waiting.length > 0 && (all || lane.inFlight < this.#max)) {
      out = lane.waiting
      lane.waiting = []
    }
    if (this.#cluster && lane.inFlight === 0 && lane.waiting.length === 0) this.#lanes.delete(lane.tag)
    return out
  }

  /** Lanes kept now (idle Cluster lanes are dropped). */
  get size (): number {
    return this.#lanes.size
  }
}
