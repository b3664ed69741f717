import { performance } from 'node:perf_hooks'
import type { ScriptCall, ScriptOp } from './client/port.js'
import type { EncodedCall, Settlement } from './protocol.js'
import type { Lane } from './lanes.js'

/*
 * What the dispatcher's timeout rule judges (dispatcher.ts): a script call in
 * flight, and per connection when Redis last answered this store and which of
 * its calls it still owes.
 *
 * The timeout measures Redis, not Node. A saturated process reaches its
 * expired timers before the poll phase that would read replies already
 * waiting in the socket, so a plain timer fails decisions Redis answered in
 * microseconds. Here a call is abandoned only when, after one more poll phase
 * (setImmediate), it is still unanswered AND Redis has answered nothing of
 * this store's on that connection for `timeout` ms since the call was written
 * (a call behind a long pipeline waits while the calls ahead of it are being
 * answered; one the client still holds, waiting for the socket to drain, waits
 * unless Redis has left a written call unanswered for `timeout`). A hung or
 * unreachable Redis answers nothing, so its decisions end within `timeout`
 * plus one event-loop turn.
 */

/** One decision (or peek, or adjustment call) waiting for its batch: its call as protocol.ts encodes it. */
export type BatchJob = EncodedCall & Settlement

/** A call of slot releases or renewals alone (protocol.ts AdjustCall.idempotent). */
export function isIdempotent (job: BatchJob): boolean {
  return job.kind === 'adjust' && job.idempotent
}

/** When this store last had a reply from one connection: Redis is alive and working through the pipeline. */
export interface Progress {
  lastAt: number
  /** This store's unanswered calls on the connection. */
  open: Set<InFlight>
}

/** A call the client still holds after this many timeouts is abandoned even if Redis owes nothing (another user filled the socket). */
export const UNWRITTEN_TIMEOUTS = 20

/**
 * Whether Redis has owed one of this store's calls on the connection (other
 * than `call`) for at least `timeout` ms at `at`: written that long ago and
 * still unanswered. A call written a moment ago (node-redis writes a flood's
 * calls as its socket drains) does not make Redis late.
 */
export function owedFor (call: InFlight, timeout: number, at: number): boolean {
  for (const other of call.progress.open) {
    if (other !== call && other.current.written && at - other.current.writtenAt >= timeout) return true
  }
  return false
}

/** One script call in flight: its jobs and what the timeout rule judges it by. */
export interface InFlight {
  jobs: readonly BatchJob[]
  /** Its framed arguments after the name (or SHA), kept for the EVAL after "Function not found" or NOSCRIPT. */
  args: ReadonlyArray<string | number>
  /** The call first written (FCALL or EVALSHA): the timeout rule measures from its write. */
  first: ScriptCall
  /** The call last written: the first, or the EVAL that answers its "Function not found" or NOSCRIPT. */
  current: ScriptCall
  op: ScriptOp
  /** Every job is idempotent (slot releases, renewals): a resend is harmless, so it is never defused. */
  idempotent: boolean
  settled: boolean
  timedOut: boolean
  progress: Progress
  /** The lane it counts in (dispatcher.ts group commit); none for slot releases and renewals, or without coalescing. */
  lane: Lane<BatchJob> | undefined
  firedAt: number
  timer: NodeJS.Timeout | undefined
}

/**
 * The timeout rule, judged when a call's timer fired (`call.firedAt`): the ms
 * to wait again, or undefined when the call is abandoned (dispatcher.ts).
 */
export function waitMore (call: InFlight, timeout: number): number | undefined {
  // Redis answered this store on this connection in the poll phase just passed (after the timer
  // fired), or within `timeout` before it: it is alive and working through the pipeline ahead of
  // this call, and a saturated process only read it late. Give it another `timeout`.
  const last = call.progress.lastAt
  if (last > call.firedAt || (last > call.first.writtenAt && call.firedAt - last < timeout)) return timeout
  // Still held by the client (node-redis waits for the socket to drain) while Redis has owed this
  // store nothing for `timeout`: the wait is Node's, not Redis's. Bounded, for a socket filled by others.
  if (!call.current.written && !owedFor(call, timeout, call.firedAt) && call.firedAt - call.current.writtenAt < timeout * UNWRITTEN_TIMEOUTS) return timeout
  // Written later than it was handed over (node-redis writes one turn after, or at drain): Redis has had less
  // than `timeout` since the write. The rest of it; a client that writes at once never gets here.
  const left = timeout - (call.firedAt - call.first.writtenAt)
  return left > 1 ? left : undefined
}

/*
 * The timers of the calls in flight and the progress record of each
 * connection (waitMore, above, is the timeout rule they apply). A call's timer
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
