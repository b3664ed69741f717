import { Command, type Cluster, type Redis } from 'ioredis'
import type { AlgorithmName, RawDecision } from './algorithm-types.js'
import { FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE } from './errors.js'
import { buildMultiScript, loadScripts, type LoadedScript } from './scripts.js'
import { multiRefundMode, SCRIPT_MODE } from './script-modes.js'
import type { BlockRun, DecideMode, Store } from './store.js'
import { WriteBatcher } from './write-batching.js'

/*
 * One EVALSHA per decision, bounded by `timeout` whatever the client's
 * settings: a client that is not ready is not asked (its offline queue would
 * hold the request for seconds), and a slow command is abandoned, so the route's
 * onRedisError decides in time. NOSCRIPT (restart, failover, SCRIPT FLUSH) is
 * answered by one EVAL of the same source, which also reloads the cache.
 */

type Client = Redis | Cluster

/** How long ready() waits for a connecting client; a down Redis must not stall startup. */
const WARM_UP_MS = 500

/*
 * A command abandoned at the timeout may still be sent again by the client:
 * ioredis resends unanswered commands after a reconnect (its default
 * autoResendUnfulfilledCommands) and a Cluster client retries after a redirect.
 * At the timeout the store rewrites the abandoned command's first argument, so
 * any copy written after that moment runs nothing (EVALSHA of an unknown SHA
 * fails with NOSCRIPT; `return 0` touches no key): a request answered by
 * onRedisError is counted at most once, whatever the client's settings.
 */
const INERT_SHA = '0'.repeat(40)
const INERT_SCRIPT = 'return 0'

function send (client: Client, name: 'evalsha' | 'eval', first: string, args: Array<string | number>): Command {
  const command = new Command(name, [first, ...args], { replyEncoding: 'utf8', keyPrefix: (client.options as { keyPrefix?: string }).keyPrefix })
  client.sendCommand(command)
  return command
}

function isNoScript (error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT')
}

function toDecision (reply: unknown): RawDecision {
  if (!Array.isArray(reply) || reply.length !== 4) throw new FST_RRL_BAD_SCRIPT_REPLY()
  const [allowed, remaining, resetMs, retryAfterMs] = reply as unknown[]
  if (typeof allowed !== 'number' || typeof remaining !== 'number' || typeof resetMs !== 'number' || typeof retryAfterMs !== 'number') {
    throw new FST_RRL_BAD_SCRIPT_REPLY()
  }
  return { allowed: allowed === 1, remaining, resetMs, retryAfterMs }
}

/** The multi script's reply: four integers per block. */
function toDecisions (reply: unknown, count: number): RawDecision[] {
  if (!Array.isArray(reply) || reply.length !== count * 4) throw new FST_RRL_BAD_SCRIPT_REPLY()
  const out: RawDecision[] = []
  for (let i = 0; i < reply.length; i += 4) {
    const allowed = reply[i] as unknown
    const remaining = reply[i + 1] as unknown
    const resetMs = reply[i + 2] as unknown
    const retryAfterMs = reply[i + 3] as unknown
    if (typeof allowed !== 'number' || typeof remaining !== 'number' || typeof resetMs !== 'number' || typeof retryAfterMs !== 'number') {
      throw new FST_RRL_BAD_SCRIPT_REPLY()
    }
    out.push({ allowed: allowed === 1, remaining, resetMs, retryAfterMs })
  }
  return out
}

export class RedisStore implements Store {
  readonly #client: Client
  readonly #timeout: number
  readonly #clock: (() => number) | undefined
  readonly #scripts: Record<AlgorithmName, LoadedScript>
  readonly #multi: LoadedScript

  readonly #batcher: WriteBatcher

  constructor (client: Client, timeout: number, clock?: () => number, batchWrites = true) {
    this.#client = client
    this.#batcher = new WriteBatcher(client, batchWrites)
    this.#timeout = timeout
    this.#clock = clock
    this.#scripts = loadScripts()
    this.#multi = buildMultiScript()
  }

  /** Whether the client is a Redis Cluster (every key of one call must share a slot). */
  get cluster (): boolean {
    return (this.#client as { isCluster?: boolean }).isCluster === true
  }

  /**
   * One block: its own script (EVALSHA, 1 key). Several: the multi script,
   * which decides them all in the same call, all-or-nothing.
   */
  decide (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], decideMode: DecideMode): Promise<RawDecision[]> {
    const client = this.#client
    if (client.status !== 'ready') return Promise.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`))
    const mode = SCRIPT_MODE[decideMode]
    const count = runs.length
    const { script, args } = this.#invocation(runs, keys, costs, [mode], mode, true)
    return this.#run(script, args, (reply) => count === 1 ? [toDecision(reply)] : toDecisions(reply, count))
  }

  /**
   * refundOn: one call gives back every block's units (see the refund modes in
   * script-modes.ts). Bounded by the same timeout.
   */
  refund (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], elapsedMs: number): Promise<boolean[]> {
    const client = this.#client
    if (client.status !== 'ready') return Promise.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`))
    const elapsed = String(Math.max(0, Math.round(elapsedMs)))
    const count = runs.length
    const { script, args } = this.#invocation(runs, keys, costs, [SCRIPT_MODE.refund, elapsed], multiRefundMode(elapsed), false)
    return this.#run(script, args, (reply) => {
      if (!Array.isArray(reply) || reply.length !== count) throw new FST_RRL_BAD_SCRIPT_REPLY()
      return reply.map((given) => given === 1)
    })
  }

  /**
   * The script and its arguments for one call over `runs`: the algorithm's own
   * script for a single block (no dry pass to pay for), else the multi script.
   * `singleMode` follows `now` for one block; `multiMode` (and, per block, the
   * shadow flag when `withShadow`) for several.
   */
  #invocation (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], singleMode: string[], multiMode: string, withShadow: boolean): { script: LoadedScript, args: Array<string | number> } {
    const now = this.#clock === undefined ? '' : String(this.#clock())
    const count = runs.length
    if (count === 1) {
      const run = runs[0] as BlockRun
      return {
        script: this.#scripts[run.algorithm],
        args: [1, keys[0] as string, run.scriptArgs[0], run.scriptArgs[1], run.scriptArgs[2], costs[0] as number, now, ...singleMode]
      }
    }
    const args: Array<string | number> = [count, ...keys, now, multiMode]
    for (let i = 0; i < count; i++) {
      const run = runs[i] as BlockRun
      args.push(run.algorithmNumber, run.scriptArgs[0], run.scriptArgs[1], run.scriptArgs[2], costs[i] as number, withShadow && run.shadow ? '1' : '')
    }
    return { script: this.#multi, args }
  }

  #run<T> (script: LoadedScript, args: Array<string | number>, parse: (reply: unknown) => T): Promise<T> {
    const client = this.#client
    const timeout = this.#timeout
    return new Promise<T>((resolve, reject) => {
      let timedOut = false
      let abandon = (): void => {}
      const timer = setTimeout(() => {
        timedOut = true
        abandon()
        reject(new FST_RRL_REDIS_TIMEOUT(timeout))
      }, timeout)
      const settle = (reply: unknown): void => {
        clearTimeout(timer)
        try {
          resolve(parse(reply))
        } catch (error) {
          reject(error)
        }
      }
      const fail = (error: unknown): void => {
        clearTimeout(timer)
        abandon()
        reject(new FST_RRL_REDIS_UNAVAILABLE(error instanceof Error ? error.message : String(error)))
      }
      this.#batcher.beforeSend()
      let command = send(client, 'evalsha', script.sha, args)
      let inert = INERT_SHA
      // Whatever copy of this command the client writes from now on runs nothing.
      abandon = () => { command.args[0] = inert }
      ;(command.promise as Promise<unknown>).then(settle, (error: unknown) => {
        // An abandoned decision is never retried: the request was already answered.
        if (!isNoScript(error) || timedOut) return fail(error)
        command = send(client, 'eval', script.source, args)
        inert = INERT_SCRIPT
        ;(command.promise as Promise<unknown>).then(settle, fail)
      })
    })
  }

  async reset (keys: readonly string[]): Promise<void> {
    const client = this.#client
    if (client.status !== 'ready') throw new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`)
    if (keys.length > 0) await client.del(...keys)
  }

  /**
   * Lets a client that is still connecting finish, for at most `maxWaitMs`,
   * so the first requests after ready() are enforced. A lazyConnect client is
   * asked to connect: the store never sends to a client that is not ready, so
   * it would otherwise never connect. Redis being absent does not fail ready():
   * requests then follow onRedisError until the client connects by itself.
   */
  async warmUp (maxWaitMs = WARM_UP_MS): Promise<void> {
    const client = this.#client
    if (client.status === 'wait') client.connect().catch(() => {})
    if (client.status === 'ready') return
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        client.off('ready', done)
        resolve()
      }
      const timer = setTimeout(done, maxWaitMs)
      client.once('ready', done)
    })
  }

  close (): void {}
}
