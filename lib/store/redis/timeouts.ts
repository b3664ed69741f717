import { performance } from 'node:perf_hooks'
import { waitMore, type InFlight, type Progress } from './in-flight.js'

/*
 * The timers of the calls in flight and the progress record of each
 * connection (in-flight.ts has the timeout rule they apply). A call's timer
 * is judged after the next poll phase, so replies already waiting in the
 * socket are read first; `abandon` is called for a call the rule gives up on.
 */
export class CallTimers {
  readonly #timeout: number
  readonly #abandon: (call: InFlight) => void
  readonly #progress = new Map<string, Progress>()
  /** Calls whose timer fired, judged together after the next poll phase (see #judge). */
  #fired: InFlight[] = []
  readonly #judgeFired = (): void => {
    const calls = this.#fired
    this.#fired = []
    for (const call of calls) this.#verdict(call)
  }

  // Expired timers run before the poll phase: let it read replies that have already arrived.
  readonly #onTimer = (call: InFlight): void => {
    call.firedAt = performance.now()
    this.#judge(call)
  }

  constructor (timeout: number, abandon: (call: InFlight) => void) {
    this.#timeout = timeout
    this.#abandon = abandon
  }

  /** The progress record of the connection a call went to: the only one standalone, its slot's master on a Cluster. */
  progressOf (node: string): Progress {
    let progress = this.#progress.get(node)
    if (progress === undefined) {
      progress = { lastAt: 0, open: new Set() }
      this.#progress.set(node, progress)
    }
    return progress
  }

  /** Starts the call's timer and counts it open on its connection. */
  arm (call: InFlight): void {
    call.progress.open.add(call)
    call.timer = setTimeout(this.#onTimer, this.#timeout, call)
  }

  /** The call ended (answered, failed or abandoned). */
  disarm (call: InFlight): void {
    call.progress.open.delete(call)
    if (call.timer !== undefined) clearTimeout(call.timer)
  }

  /**
   * Judges a call whose timer fired after the next poll phase (setImmediate),
   * together with every other call whose timer fired in the same turn: one
   * callback abandons them all before any of their requests go on, so the
   * last call of a hung flood is not answered only after the requests of all
   * the calls before it have been served.
   */
  #judge (call: InFlight): void {
    this.#fired.push(call)
    if (this.#fired.length === 1) setImmediate(this.#judgeFired)
  }

  #verdict (call: InFlight): void {
    if (call.settled) return
    const waitMs = waitMore(call, this.#timeout)
    if (waitMs !== undefined) {
      call.timer = setTimeout(this.#onTimer, waitMs, call)
      return
    }
    call.timedOut = true
    this.#abandon(call)
  }
}
