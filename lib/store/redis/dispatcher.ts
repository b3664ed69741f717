import { performance } from 'node:perf_hooks'
import { Command, type Cluster, type Redis } from 'ioredis'
import { FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE, FST_RRL_STORE_OVERLOADED } from '../../errors.js'
import { frameBatch, splitBatchReply, type EncodedCall } from './protocol.js'
import type { LoadedScript } from './scripts.js'
import { bySlot } from './slots.js'

/*
 * Coalesced decisions. Every decision started in one event-loop turn leaves
 * in one call of the batch script (scripts/batch.lua; its wire format is
 * protocol.ts's, of which this module knows nothing more): one
 * EVALSHA, one Redis TIME, one reply to parse, instead of one command each.
 * The queue is flushed in setImmediate, after the poll phase that read the
 * requests, so a turn that parsed 500 requests sends one call (or a few, at
 * most `maxBatch` decisions each). On a Cluster the decisions are grouped by
 * hash tag: every key of one call must live in one slot.
 *
 * The timeout measures Redis, not Node. A saturated process reaches its
 * expired timers before the poll phase that would read replies already
 * waiting in the socket, so a plain timer fails decisions Redis answered in
 * microseconds. Here a call is abandoned only when, after one more poll phase
 * (setImmediate), it is still unanswered AND Redis has answered nothing of
 * this store's on that connection for `timeout` ms since the call was written
 * (a call behind a long pipeline waits while the calls ahead of it are being
 * answered). A hung or unreachable Redis answers nothing, so its decisions end
 * within `timeout` plus one event-loop turn. The number of decisions queued or
 * in flight is capped (`maxPending`): beyond it the route's onRedisError
 * answers at once instead of growing the backlog.
 *
 * A call abandoned at the timeout may still be sent again by the client:
 * ioredis resends unanswered commands after a reconnect (its default
 * autoResendUnfulfilledCommands) and a Cluster client retries after a
 * redirect. At the timeout the call's first argument is rewritten, so any copy
 * written after that moment runs nothing (EVALSHA of an unknown SHA fails with
 * NOSCRIPT; `return 0` touches no key): a decision answered by onRedisError is
 * counted at most once, whatever the client's settings. NOSCRIPT (restart,
 * failover, SCRIPT FLUSH) is answered by one EVAL of the same source, which
 * also reloads the script cache.
 */

export type Client = Redis | Cluster

/** One decision (or peek, or refund) waiting for its batch: its call as protocol.ts encodes it. */
export interface BatchJob extends EncodedCall {
  resolve: (values: number[]) => void
  reject: (error: unknown) => void
}

export interface DispatchOptions {
  timeout: number
  /** Decisions per script call, at most. */
  maxBatch: number
  /** Decisions queued or in flight, at most; beyond it enqueue() fails at once. */
  maxPending: number
  /** false: every decision is its own call, sent at once (no coalescing). */
  coalesce: boolean
  /** The injected test clock (ms), passed to the script instead of Redis TIME. */
  clock: (() => number) | undefined
  /** Called per script call with its size and the ms from write to reply (or failure). */
  onBatch: ((size: number, latencyMs: number) => void) | undefined
}

const INERT_SHA = '0'.repeat(40)
const INERT_SCRIPT = 'return 0'

function isNoScript (error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT')
}

/** When this store last had a reply from one connection: Redis is alive and working through the pipeline. */
interface Progress { lastAt: number }

/** One script call in flight: its jobs and what the timeout rule judges it by. */
interface InFlight {
  jobs: readonly BatchJob[]
  /** The framed arguments after the SHA (or source), kept for the EVAL after NOSCRIPT. */
  args: ReadonlyArray<string | number>
  /** The command last written: the EVALSHA, or the EVAL that answers its NOSCRIPT. */
  command: Command
  /** What the command's first argument becomes once the call is abandoned: an unknown SHA, or a script that touches nothing. */
  inert: string
  settled: boolean
  timedOut: boolean
  progress: Progress
  writtenAt: number
  firedAt: number
  timer: NodeJS.Timeout | undefined
}

export class Dispatcher {
  readonly #client: Client
  readonly #script: LoadedScript
  readonly #options: DispatchOptions
  readonly #cluster: boolean
  #queue: BatchJob[] = []
  #scheduled = false
  #pending = 0
  readonly #progress = new Map<string, Progress>()
  readonly #flush = (): void => { this.#flushQueue() }
  /** Calls whose timer fired, judged together after the next poll phase (see #judge). */
  #fired: InFlight[] = []
  readonly #judgeFired = (): void => {
    const calls = this.#fired
    this.#fired = []
    for (const call of calls) this.#verdict(call)
  }

  constructor (client: Client, script: LoadedScript, options: DispatchOptions) {
    this.#client = client
    this.#script = script
    this.#options = options
    this.#cluster = (client as { isCluster?: boolean }).isCluster === true
  }

  /** Decisions queued or waiting on Redis now. */
  get pending (): number {
    return this.#pending
  }

  enqueue (job: BatchJob): void {
    const client = this.#client
    if (client.status !== 'ready') {
      job.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`))
      return
    }
    if (this.#pending >= this.#options.maxPending) {
      job.reject(new FST_RRL_STORE_OVERLOADED(this.#options.maxPending))
      return
    }
    this.#pending++
    if (!this.#options.coalesce) {
      this.#send([job])
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
    if (this.#client.status !== 'ready') {
      for (const job of jobs) this.#fail(job, new FST_RRL_REDIS_UNAVAILABLE(`client is ${this.#client.status}`))
      return
    }
    const max = this.#options.maxBatch
    for (const group of this.#cluster ? bySlot(jobs) : [jobs]) {
      for (let i = 0; i < group.length; i += max) this.#send(group.length <= max ? group : group.slice(i, i + max))
    }
  }

  #fail (job: BatchJob, error: unknown): void {
    this.#pending--
    job.reject(error)
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

  /** The progress record of the connection a call went to: the only one standalone, its slot's master on a Cluster. */
  #progressOf (command: Command): Progress {
    let node = 'standalone'
    if (this.#cluster) {
      const slots = (this.#client as Cluster).slots
      node = slots[command.getSlot() ?? -1]?.[0] ?? 'unknown'
    }
    let progress = this.#progress.get(node)
    if (progress === undefined) {
      progress = { lastAt: 0 }
      this.#progress.set(node, progress)
    }
    return progress
  }

  /** Writes one script call (EVALSHA by SHA, or EVAL of the source) with the batch's framed arguments. */
  #write (name: 'evalsha' | 'eval', first: string, args: ReadonlyArray<string | number>): Command {
    const keyPrefix = (this.#client.options as { keyPrefix?: string }).keyPrefix
    const command = new Command(name, [first, ...args], { replyEncoding: 'utf8', keyPrefix })
    this.#client.sendCommand(command)
    return command
  }

  /** Waits for the reply of the call's current command (the EVALSHA, or the EVAL after NOSCRIPT). */
  #listen (call: InFlight): void {
    ;(call.command.promise as Promise<unknown>).then((reply) => { this.#onReply(call, reply) }, (error: unknown) => { this.#onError(call, error) })
  }

  /** One script call for these jobs, bounded as the module comment says. */
  #send (jobs: readonly BatchJob[]): void {
    const args = frameBatch(jobs, this.#options.clock?.())
    const command = this.#write('evalsha', this.#script.sha, args)
    const call: InFlight = {
      jobs,
      args,
      command,
      inert: INERT_SHA,
      settled: false,
      timedOut: false,
      progress: this.#progressOf(command),
      writtenAt: performance.now(),
      firedAt: 0,
      timer: undefined
    }
    call.timer = setTimeout(this.#onTimer, this.#options.timeout, call)
    this.#listen(call)
  }

  #finish (call: InFlight): void {
    call.settled = true
    if (call.timer !== undefined) clearTimeout(call.timer)
    this.#options.onBatch?.(call.jobs.length, performance.now() - call.writtenAt)
  }

  #failAll (call: InFlight, error: unknown): void {
    this.#finish(call)
    // Whatever copy of this call the client writes from now on runs nothing.
    call.command.args[0] = call.inert
    for (const job of call.jobs) this.#fail(job, error)
  }

  // Expired timers run before the poll phase: let it read replies that have already arrived.
  readonly #onTimer = (call: InFlight): void => {
    call.firedAt = performance.now()
    this.#judge(call)
  }

  #verdict (call: InFlight): void {
    if (call.settled) return
    const { timeout } = this.#options
    // Redis answered this store on this connection in the poll phase just passed (after the timer
    // fired), or within `timeout` before it: it is alive and working through the pipeline ahead of
    // this call, and a saturated process only read it late. Give it another `timeout`.
    const last = call.progress.lastAt
    if (last > call.firedAt || (last > call.writtenAt && call.firedAt - last < timeout)) {
      call.timer = setTimeout(this.#onTimer, timeout, call)
      return
    }
    call.timedOut = true
    this.#failAll(call, new FST_RRL_REDIS_TIMEOUT(timeout))
  }

  // Any answer shows Redis is alive, also one to a call already abandoned (or its inert resend).
  #onReply (call: InFlight, reply: unknown): void {
    call.progress.lastAt = performance.now()
    if (call.settled) return
    this.#finish(call)
    this.#deliver(call.jobs, reply)
  }

  #onError (call: InFlight, error: unknown): void {
    // An error reply came from Redis; a connection error (closed, timed out by the client) did not.
    if ((error as { name?: unknown } | null)?.name === 'ReplyError') call.progress.lastAt = performance.now()
    if (call.settled) return
    // An abandoned call is never retried: its decisions were already answered.
    if (isNoScript(error) && !call.timedOut && call.inert === INERT_SHA) {
      call.command = this.#write('eval', this.#script.source, call.args)
      call.inert = INERT_SCRIPT
      this.#listen(call)
      return
    }
    this.#failAll(call, new FST_RRL_REDIS_UNAVAILABLE(error instanceof Error ? error.message : String(error)))
  }

  /** Gives each job its share of a batch reply (protocol.ts splits it), or the error it failed with. */
  #deliver (jobs: readonly BatchJob[], reply: unknown): void {
    const results = splitBatchReply(jobs, reply)
    for (let j = 0; j < jobs.length; j++) {
      const job = jobs[j] as BatchJob
      const result = results[j] as number[] | Error
      if (result instanceof Error) this.#fail(job, result)
      else {
        this.#pending--
        job.resolve(result)
      }
    }
  }
}
