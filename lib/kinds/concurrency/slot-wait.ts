import { performance } from 'node:perf_hooks'
import type { DecisionInput, DecisionOrigin, Evaluation, Runtime } from '../../decide/contract.js'
import { evaluateThen, refusedAfterWait } from '../../decide/evaluate.js'
import { slotReleases } from '../../store/port.js'

/*
 * A concurrency block's `wait`, on the engine's side: a decision that found
 * no slot but joined the slot's queue (Evaluation.queued) waits here until
 * one is handed to it. Each poll decides again with the same slot id (the
 * queue keeps its place and renews its lease); the waiter ends exactly once:
 * admitted, refused another way, answered by onRedisError, out of time (a
 * 429 as a slot refusal), its caller gone, or the plugin closing. A waiter
 * that ends without a slot leaves the queue (the release of its slot id),
 * which announces the slot to the next waiter. The leave is tracked in
 * `runtime.pendingWork`, and so is a waiter closed while its poll is in
 * flight, until that poll answers: the plugin's close awaits both, so the
 * leave is sent before the client closes.
 */

/** How a wait ended without an Evaluation: the caller left, or the plugin closed. */
export type WaitEnd = 'left' | 'closed'

/** Registers what to do when the caller goes away; returns its removal. */
export type OnLeave = (left: () => void) => () => void

/** The shortest `wait` over the blocks that queued the request. */
function waitOf (first: Evaluation): number {
  let waitMs = Infinity
  for (const [i, { run }] of first.input.blocks.entries()) {
    if (first.decisions[i]?.queued !== undefined) waitMs = Math.min(waitMs, run.params.delayMs ?? 0)
  }
  return waitMs === Infinity ? 0 : waitMs
}

/** The keys of the blocks that queued the request. */
function queuedKeys (first: Evaluation): string[] {
  const keys: string[] = []
  for (const [i, { key }] of first.input.blocks.entries()) if (first.decisions[i]?.queued !== undefined) keys.push(key)
  return keys
}

/** The request leaves every slot queue it joined (and would free a slot it took): the same release a request's end sends. */
function leaveQueue (runtime: Runtime, input: DecisionInput, origin: DecisionOrigin): void {
  const entries = slotReleases(input)
  if (entries.length === 0) return
  runtime.pendingWork.add(runtime.store.adjustSlots(entries).catch((error: unknown) => {
    runtime.failures.report(origin.log, { err: error }, 'rate limit slot queue leave failed: the waiter lapses after its lease')
  }))
}

/** One waiter: its polls, how it ends, exactly once. */
class SlotWait {
  readonly #input: DecisionInput
  readonly #origin: DecisionOrigin
  readonly #polls: DecisionOrigin
  readonly #runtime: Runtime
  readonly #startedAt = performance.now()
  readonly #settle: (result: Evaluation | WaitEnd) => void
  readonly #reject: (error: Error) => void
  readonly #cleanups: Array<() => void> = []
  #busy = false
  #again = false
  #over: 'time' | WaitEnd | undefined
  #last: Evaluation
  /** Set when closed during a poll: resolves once the wait has ended (its leave sent). */
  #finished: (() => void) | undefined

  constructor (first: Evaluation, origin: DecisionOrigin, runtime: Runtime, settle: (result: Evaluation | WaitEnd) => void, reject: (error: Error) => void) {
    this.#input = first.input
    this.#origin = origin
    this.#polls = { ...origin, inQueue: true }
    this.#runtime = runtime
    this.#settle = settle
    this.#reject = reject
    this.#last = first
  }

  /** Starts waiting: the deadline, the registration, the caller's leaving. */
  start (onLeave: OnLeave): void {
    const sentAt = this.#input.sentAt ?? this.#startedAt
    const deadline = setTimeout(() => { this.#stop('time') }, Math.max(0, waitOf(this.#last) - (this.#startedAt - sentAt)))
    this.#cleanups.push(() => { clearTimeout(deadline) })
    this.#cleanups.push(this.#runtime.waiters.add(queuedKeys(this.#last), sentAt, () => { this.#poll() }, () => { this.#close() }))
    // Counted among the waiters now: the place taken before the decision is returned.
    this.#last.place?.release()
    this.#cleanups.push(onLeave(() => { this.#stop('left') }))
  }

  #poll (): void {
    if (this.#over !== undefined) return
    if (this.#busy) {
      this.#again = true
      return
    }
    this.#busy = true
    this.#again = false
    this.#input.waitedMs = performance.now() - this.#startedAt
    evaluateThen(this.#input, this.#polls, this.#runtime, (evaluation) => { this.#answered(evaluation) }, (error) => {
      this.#busy = false
      this.#finish(true)
      this.#reject(error)
    })
  }

  #answered (evaluation: Evaluation): void {
    this.#busy = false
    // Closed while this poll was on its way: only an admission (its slot taken) goes on; a refusal
    // or onRedisError's answer is the close's 503, as for the waiters that were not polling.
    if (this.#over === 'closed' && !evaluation.queued && (evaluation.rejected || evaluation.decision.degraded)) {
      this.#ended()
      return
    }
    if (!evaluation.queued) {
      // Admitted at a reserved turn: a place carried from the waiters to the hold, counted until the hold starts.
      if (evaluation.turnMs > 0 && !evaluation.rejected) evaluation.place = this.#runtime.holds.take(true)
      // Admitted (its slot taken), refused another way or by onRedisError: only an admission left the queue.
      this.#end(evaluation, evaluation.rejected || evaluation.decision.degraded)
      return
    }
    this.#last = evaluation
    if (this.#over !== undefined) this.#ended()
    else if (this.#again) this.#poll()
  }

  #stop (why: 'time' | WaitEnd): void {
    if (this.#over !== undefined) return
    this.#over = why
    if (!this.#busy) this.#ended()
  }

  /** The plugin closes: ended now, or once the poll in flight answers (tracked, so close waits for that). */
  #close (): void {
    this.#stop('closed')
    if (this.#busy) this.#runtime.pendingWork.add(new Promise<void>((resolve) => { this.#finished = resolve }))
  }

  #ended (): void {
    if (this.#over === 'time') this.#end(refusedAfterWait(this.#last, this.#origin, this.#runtime), true)
    else if (this.#over !== undefined) {
      if (this.#over === 'left') this.#runtime.stats.delayAborted++
      this.#end(this.#over, true)
    }
  }

  #finish (leave: boolean): void {
    for (const cleanup of this.#cleanups.splice(0)) cleanup()
    if (leave) leaveQueue(this.#runtime, this.#input, this.#origin)
    this.#finished?.()
  }

  #end (result: Evaluation | WaitEnd, leave: boolean): void {
    this.#finish(leave)
    this.#settle(result)
  }
}

/** Waits for a slot after `first` (queued): resolves with the decision that ends the wait, or how it ended without one. */
export function waitForSlot (first: Evaluation, origin: DecisionOrigin, runtime: Runtime, onLeave: OnLeave): Promise<Evaluation | WaitEnd> {
  return new Promise((resolve, reject) => { new SlotWait(first, origin, runtime, resolve, reject).start(onLeave) })
}
