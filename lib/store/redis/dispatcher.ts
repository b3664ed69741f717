import { performance } from 'node:perf_hooks'
import { Command, type Cluster, type Redis } from 'ioredis'
import { FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE, FST_RRL_SCRIPT_ERROR, FST_RRL_STORE_OVERLOADED } from '../../errors.js'
import type { LoadedScript } from './scripts.js'

/*
 * Coalesced decisions. Every decision started in one event-loop turn leaves
 * in one call of the batch script (lib/scripts.ts, buildBatchScript): one
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

/** One decision (or peek, or refund) waiting for its batch. */
export interface BatchJob {
  keys: readonly string[]
  /** The decision's ARGV segment: block count, mode, then 6 values per block (see buildBatchScript). */
  args: ReadonlyArray<string | number>
  /** Integers in this job's reply: 4 per block for a decision or peek, 1 per block for a refund. */
  replyLength: number
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

/** The Cluster hash tag of a key (`{...}`), which decides its slot; the key itself when it has none. */
function hashTag (key: string): string {
  const open = key.indexOf('{')
  if (open !== -1) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) return key.slice(open + 1, close)
  }
  return key
}

/** When this store last had a reply from one connection: Redis is alive and working through the pipeline. */
interface Progress { lastAt: number }

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
  #fired: Array<() => void> = []
  readonly #judgeFired = (): void => {
    const verdicts = this.#fired
    this.#fired = []
    for (const verdict of verdicts) verdict()
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
    if (!this.#cluster) {
      for (let i = 0; i < jobs.length; i += max) this.#send(jobs.length <= max ? jobs : jobs.slice(i, i + max))
      return
    }
    const bySlot = new Map<string, BatchJob[]>()
    for (const job of jobs) {
      const tag = hashTag(job.keys[0] as string)
      const group = bySlot.get(tag)
      if (group === undefined) bySlot.set(tag, [job])
      else group.push(job)
    }
    for (const group of bySlot.values()) {
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
  #judge (verdict: () => void): void {
    this.#fired.push(verdict)
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

  /** One script call for these jobs, bounded as the module comment says. */
  #send (jobs: readonly BatchJob[]): void {
    const client = this.#client
    const { timeout, clock, onBatch } = this.#options
    const keys: string[] = []
    const argv: Array<string | number> = [clock === undefined ? '' : String(clock())]
    for (const job of jobs) {
      for (const key of job.keys) keys.push(key)
      for (const value of job.args) argv.push(value)
    }
    const args: Array<string | number> = [keys.length, ...keys, ...argv]
    const keyPrefix = (client.options as { keyPrefix?: string }).keyPrefix
    const send = (name: 'evalsha' | 'eval', first: string): Command => {
      const command = new Command(name, [first, ...args], { replyEncoding: 'utf8', keyPrefix })
      client.sendCommand(command)
      return command
    }

    let settled = false
    let timedOut = false
    let command = send('evalsha', this.#script.sha)
    let inert = INERT_SHA
    const progress = this.#progressOf(command)
    const writtenAt = performance.now()
    let timer: NodeJS.Timeout | undefined

    const finish = (): void => {
      settled = true
      if (timer !== undefined) clearTimeout(timer)
      onBatch?.(jobs.length, performance.now() - writtenAt)
    }
    const failAll = (error: unknown): void => {
      finish()
      // Whatever copy of this call the client writes from now on runs nothing.
      command.args[0] = inert
      for (const job of jobs) this.#fail(job, error)
    }
    let firedAt = 0
    const verdict = (): void => {
      if (settled) return
      // Redis answered this store on this connection in the poll phase just passed (after the timer
      // fired), or within `timeout` before it: it is alive and working through the pipeline ahead of
      // this call, and a saturated process only read it late. Give it another `timeout`.
      const last = progress.lastAt
      if (last > firedAt || (last > writtenAt && firedAt - last < timeout)) {
        timer = setTimeout(onTimer, timeout)
        return
      }
      timedOut = true
      failAll(new FST_RRL_REDIS_TIMEOUT(timeout))
    }
    // Expired timers run before the poll phase: let it read replies that have already arrived.
    const onTimer = (): void => {
      firedAt = performance.now()
      this.#judge(verdict)
    }
    timer = setTimeout(onTimer, timeout)

    // Any answer shows Redis is alive, also one to a call already abandoned (or its inert resend).
    const onReply = (reply: unknown): void => {
      progress.lastAt = performance.now()
      if (settled) return
      finish()
      this.#deliver(jobs, reply)
    }
    const onError = (error: unknown): void => {
      // An error reply came from Redis; a connection error (closed, timed out by the client) did not.
      if ((error as { name?: unknown } | null)?.name === 'ReplyError') progress.lastAt = performance.now()
      if (settled) return
      // An abandoned call is never retried: its decisions were already answered.
      if (isNoScript(error) && !timedOut && inert === INERT_SHA) {
        command = send('eval', this.#script.source)
        inert = INERT_SCRIPT
        ;(command.promise as Promise<unknown>).then(onReply, onError)
        return
      }
      failAll(new FST_RRL_REDIS_UNAVAILABLE(error instanceof Error ? error.message : String(error)))
    }
    ;(command.promise as Promise<unknown>).then(onReply, onError)
  }

  /** Splits a batch reply among its jobs: `1, values...` or `0, error text` each. */
  #deliver (jobs: readonly BatchJob[], reply: unknown): void {
    let at = 0
    const list = Array.isArray(reply) ? reply as unknown[] : []
    for (let j = 0; j < jobs.length; j++) {
      const job = jobs[j] as BatchJob
      const status = list[at]
      if (status === 0 && typeof list[at + 1] === 'string') {
        this.#fail(job, new FST_RRL_SCRIPT_ERROR(list[at + 1] as string))
        at += 2
        continue
      }
      const values = status === 1 ? list.slice(at + 1, at + 1 + job.replyLength) : []
      if (values.length !== job.replyLength || !values.every((value) => typeof value === 'number')) {
        // The rest cannot be located either.
        for (let k = j; k < jobs.length; k++) this.#fail(jobs[k] as BatchJob, new FST_RRL_BAD_SCRIPT_REPLY())
        return
      }
      this.#pending--
      job.resolve(values as number[])
      at += 1 + job.replyLength
    }
  }
}
