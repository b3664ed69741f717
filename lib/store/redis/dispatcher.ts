import type { StoreCallMeasure } from '../port.js'
import { performance } from 'node:perf_hooks'
import { FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE, FST_RRL_STORE_OVERLOADED } from '../../errors.js'
import { frameBatch, splitBatchReply } from './protocol.js'
import { releasesOf, type ReleaseSlots } from './abandoned.js'
import type { ScriptRoute } from './script-route.js'
import { isFcallRefused, isFunctionMissing, isNoScript, isTransientRefusal, type ClientPort } from './client/port.js'
import { bySlot } from './cluster-slots.js'
import { CallTimers, isIdempotent, type BatchJob, type InFlight } from './in-flight.js'
import { Lanes, type Lane } from './lanes.js'

/*
 * Coalesced decisions. Every decision started in one event-loop turn leaves
 * in one call of the batch script (scripts/batch.lua; its wire format is
 * protocol.ts's, of which this module knows nothing more): one
 * FCALL (or EVALSHA: script-route.ts), one Redis TIME, one reply to parse,
 * instead of one command each.
 * The queue is flushed in setImmediate, after the poll phase that read the
 * requests, so a turn that parsed 500 requests sends one call (or a few, at
 * most `maxBatch` decisions each). On a Cluster the decisions are grouped by
 * hash tag: every key of one call must live in one slot.
 *
 * Group commit (lanes.ts): at most `maxInFlight` calls in flight per lane;
 * what arrives meanwhile waits for a reply and leaves in the next call, or
 * fails with the call ahead of it when that call meets Redis's silence.
 *
 * The timeout rule (in-flight.ts waitMore) measures Redis, not Node; the
 * number of decisions queued or in flight is capped (`maxPending`): beyond it
 * the route's onRedisError answers at once instead of growing the backlog.
 *
 * A call abandoned at the timeout is defused (client/port.ts ScriptCall
 * says how): a decision answered by onRedisError is counted at most once.
 * Slot releases and renewals are idempotent (a ZREM, a ZADD of a live member): they travel in
 * calls of their own, are never defused, and a release is retried by the
 * store after a timeout. "Function not found" (a restart without persistence,
 * FUNCTION FLUSH) and NOSCRIPT are answered by one EVAL of the same script,
 * which also fills the script cache; the library is loaded again behind it. A decision given up on may have taken
 * slots: abandoned.ts releases them.
 */

export interface DispatchOptions {
  timeout: number
  /** Decisions per script call, at most. */
  maxBatch: number
  /** Decisions queued or in flight, at most; beyond it enqueue() fails at once. */
  maxPending: number
  /** false: every decision is its own call, sent at once (no coalescing). */
  coalesce: boolean
  /** Script calls in flight per lane (connection, or hash tag on a Cluster), at most; later decisions join the next call. */
  maxInFlight: number
  /** The injected test clock (ms), passed to the script instead of Redis TIME. */
  clock: (() => number) | undefined
  /** Called per script call with its size and the ms from write to reply (or failure), after its jobs are answered; a throw is dropped. */
  onBatch: ((size: number, latencyMs: number) => void) | undefined
}

export class Dispatcher {
  readonly #client: ClientPort
  readonly #route: ScriptRoute
  readonly #options: DispatchOptions
  readonly #releaseSlots: ReleaseSlots
  #queue: BatchJob[] = []
  readonly #lanes: Lanes<BatchJob>
  readonly #timers: CallTimers
  #scheduled = false
  #pending = 0
  /** Resolved when #pending next reaches 0 (the plugin's close: whenIdle). */
  #idle: Array<() => void> = []
  readonly #flush = (): void => { this.#flushQueue() }

  constructor (client: ClientPort, route: ScriptRoute, options: DispatchOptions, releaseSlots: ReleaseSlots) {
    this.#client = client
    this.#route = route
    this.#options = options
    this.#releaseSlots = releaseSlots
    this.#lanes = new Lanes(client.cluster, options.maxInFlight)
    this.#timers = new CallTimers(options.timeout, (call) => { this.#failAll(call, new FST_RRL_REDIS_TIMEOUT(options.timeout)) })
  }

  /** Decisions queued or waiting on Redis now. */
  get pending (): number {
    return this.#pending
  }

  /** Resolves once nothing is queued or waiting on Redis (each call ends within the timeout rule). */
  whenIdle (): Promise<void> {
    if (this.#pending === 0) return Promise.resolve()
    return new Promise((resolve) => { this.#idle.push(resolve) })
  }

  /** Sends what is queued now instead of on the next setImmediate (the plugin's close). */
  flushNow (): void {
    if (this.#scheduled) this.#flushQueue()
  }

  #answered (): void {
    if (--this.#pending === 0 && this.#idle.length > 0) for (const resolve of this.#idle.splice(0)) resolve()
  }

  enqueue (job: BatchJob): void {
    const client = this.#client
    if (!client.isReady()) {
      job.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.state()}`))
      return
    }
    if (this.#pending >= this.#options.maxPending) {
      job.reject(new FST_RRL_STORE_OVERLOADED(this.#options.maxPending))
      return
    }
    this.#pending++
    if (!this.#options.coalesce) {
      this.#send([job], undefined)
      return
    }
    this.#queue.push(job)
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#flush)
    }
  }

  #flushQueue (): void {
    this.#scheduled = false
    const jobs = this.#queue
    this.#queue = []
    if (!this.#client.isReady()) {
      for (const job of jobs) this.#fail(job, new FST_RRL_REDIS_UNAVAILABLE(`client is ${this.#client.state()}`))
      return
    }
    // Idempotent calls (slot releases, renewals) travel apart: they are never defused at a timeout.
    // They go first, so a slot released in this turn is free for the decisions of the same turn.
    if (jobs.some(isIdempotent)) {
      this.#sendGroups(jobs.filter(isIdempotent))
      this.#sendToLanes(jobs.filter((job) => !isIdempotent(job)))
      return
    }
    this.#sendToLanes(jobs)
  }

  /** Each hash tag's jobs (all of them standalone) leave now if their lane has room, else wait in it for the next call. */
  #sendToLanes (jobs: readonly BatchJob[]): void {
    if (jobs.length === 0) return
    for (const group of this.#client.cluster ? bySlot(jobs) : [jobs]) {
      // A group is never empty (jobs is not, and bySlot makes none).
      const [first] = group
      if (first === undefined) continue
      const lane = this.#lanes.of(first)
      if (this.#lanes.open(lane)) this.#sendChunks(group, lane)
      else lane.wait(group)
    }
  }

  /** Slot releases and renewals: every hash tag's at once, in no lane. */
  #sendGroups (jobs: readonly BatchJob[]): void {
    if (jobs.length === 0) return
    for (const group of this.#client.cluster ? bySlot(jobs) : [jobs]) this.#sendChunks(group, undefined)
  }

  /** One call per `maxBatch` jobs of one hash tag, counted in `lane`. */
  #sendChunks (group: readonly BatchJob[], lane: Lane<BatchJob> | undefined): void {
    const max = this.#options.maxBatch
    for (let i = 0; i < group.length; i += max) this.#send(group.length <= max ? group : group.slice(i, i + max), lane)
  }

  /** A call of `lane` ended: its waiting jobs go first in the next flush, or fail with the call's silence (`silent`). */
  #freed (lane: Lane<BatchJob> | undefined, silent: unknown): void {
    if (lane === undefined) return
    const waiting = this.#lanes.release(lane, silent !== undefined)
    if (waiting === undefined) return
    if (silent !== undefined) {
      for (const job of waiting) this.#fail(job, silent)
      return
    }
    this.#queue = this.#queue.length === 0 ? waiting : waiting.concat(this.#queue)
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#flush)
    }
  }

  #fail (job: BatchJob, error: unknown): void {
    this.#answered()
    job.reject(error)
  }

  /** Waits for the reply of the call's current command (the first, or the EVAL that answers it). */
  #listen (call: InFlight): void {
    call.current.reply.then((reply) => { this.#onReply(call, reply) }, (error: unknown) => { this.#onError(call, error) })
  }

  /** One script call for these jobs, bounded as the module comment says. */
  #send (jobs: readonly BatchJob[], lane: Lane<BatchJob> | undefined): void {
    const now = this.#options.clock?.()
    const args = frameBatch(jobs, now)
    const op = this.#route.functions ? 'fcall' : 'evalsha'
    const first = this.#client.script(op, this.#route.first(), args)
    const call: InFlight = {
      jobs,
      args,
      first,
      current: first,
      op,
      idempotent: jobs.every(isIdempotent),
      settled: false,
      timedOut: false,
      progress: this.#timers.progressOf(first.node),
      lane,
      firedAt: 0,
      timer: undefined
    }
    lane?.sent()
    this.#timers.arm(call)
    this.#listen(call)
  }

  /** The call's end: its ms from write to reply, for onBatch once its jobs are answered. */
  #finish (call: InFlight): number {
    call.settled = true
    this.#timers.disarm(call)
    return performance.now() - call.first.writtenAt
  }

  /** Telemetry after delivery: a throw must not reach the reply's promise (an unhandled rejection); the runtime logs its own. */
  #measured (call: InFlight, latencyMs: number): void {
    try {
      this.#options.onBatch?.(call.jobs.length, latencyMs)
    } catch {}
  }

  /** Releases the slots these failed jobs may have taken, when a copy of their call may have run or may still run. */
  #releaseTaken (call: InFlight, jobs: readonly BatchJob[]): void {
    if (call.idempotent || !call.current.written) return
    const entries = releasesOf(jobs)
    if (entries.length > 0) this.#releaseSlots(entries)
  }

  /** `ran`: false when Redis refused the call before running it (nothing to release). */
  #failAll (call: InFlight, error: unknown, ran = true): void {
    const latencyMs = this.#finish(call)
    // Whatever copy of this call the client writes from now on runs nothing (unless running it twice is harmless).
    if (!call.idempotent) call.current.defuse()
    for (const job of call.jobs) this.#fail(job, error)
    if (ran) this.#releaseTaken(call, call.jobs)
    this.#freed(call.lane, call.timedOut ? error : undefined)
    this.#measured(call, latencyMs)
  }

  // Any answer shows Redis is alive, also one to a call already abandoned (or its inert resend).
  #onReply (call: InFlight, reply: unknown): void {
    call.progress.lastAt = performance.now()
    if (this.#late(call, true)) return
    const latencyMs = this.#finish(call)
    this.#deliver(call, reply, { size: call.jobs.length, latencyMs })
    this.#freed(call.lane, undefined)
    this.#measured(call, latencyMs)
  }

  /** After the call was given up on: an answer from Redis (`answered`) releases again the slots it may have taken (see the module comment). */
  #late (call: InFlight, answered: boolean): boolean {
    if (!call.settled) return false
    if (answered && call.timedOut) this.#releaseTaken(call, call.jobs)
    return true
  }

  #onError (call: InFlight, error: unknown): void {
    // An error reply came from Redis; a connection error (closed, timed out by the client) did not.
    const answered = this.#client.isServerError(error)
    if (answered) call.progress.lastAt = performance.now()
    if (this.#late(call, answered)) return
    // An abandoned call is never retried: its decisions were already answered.
    if (!call.timedOut && call.op !== 'eval' && (isFunctionMissing(error) || isNoScript(error) || isFcallRefused(error))) {
      if (isFcallRefused(error)) this.#route.refuse(error)
      else if (call.op === 'fcall') this.#route.reload()
      call.current = this.#client.script('eval', this.#route.script.source, call.args)
      call.op = 'eval'
      this.#listen(call)
      return
    }
    // Refused before it ran (busy, out of memory, a replica, …): it took nothing.
    const refused = answered && (isTransientRefusal(error) || isFunctionMissing(error) || isNoScript(error) || isFcallRefused(error))
    this.#failAll(call, new FST_RRL_REDIS_UNAVAILABLE(error instanceof Error ? error.message : String(error)), !refused)
  }

  /** Gives each job its share of a batch reply (protocol.ts splits it) and the script's `now`, or the error it failed with (then its slots are released). */
  #deliver (call: InFlight, reply: unknown, measured: StoreCallMeasure): void {
    const { jobs } = call
    const { at, results } = splitBatchReply(jobs, reply)
    let failed: BatchJob[] | undefined
    for (const [j, job] of jobs.entries()) {
      // splitBatchReply answers every call, in order.
      const result = results[j] ?? new FST_RRL_BAD_SCRIPT_REPLY()
      if (result instanceof Error) {
        this.#fail(job, result)
        ;(failed ??= []).push(job)
      } else {
        this.#answered()
        job.resolve(result, at, measured)
      }
    }
    if (failed !== undefined) this.#releaseTaken(call, failed)
  }
}
