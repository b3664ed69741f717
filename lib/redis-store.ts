import type { Cluster, Redis } from 'ioredis'
import type { AlgorithmName, RawDecision } from './algorithm-types.js'
import { FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE } from './errors.js'
import type { CompiledPolicy } from './policy.js'
import { loadScripts, type LoadedScript } from './scripts.js'
import type { Store } from './store.js'

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

export class RedisStore implements Store {
  readonly #client: Client
  readonly #timeout: number
  readonly #clock: (() => number) | undefined
  readonly #scripts: Record<AlgorithmName, LoadedScript>

  constructor (client: Client, timeout: number, clock?: () => number) {
    this.#client = client
    this.#timeout = timeout
    this.#clock = clock
    this.#scripts = loadScripts()
  }

  consume (policy: CompiledPolicy, key: string, cost: number): Promise<RawDecision> {
    const client = this.#client
    if (client.status !== 'ready') return Promise.reject(new FST_RRL_REDIS_UNAVAILABLE(`client is ${client.status}`))
    const script = this.#scripts[policy.algorithm]
    const [limit, windowMs, burst] = policy.scriptArgs
    const now = this.#clock === undefined ? '' : String(this.#clock())
    const timeout = this.#timeout
    return new Promise<RawDecision>((resolve, reject) => {
      let timedOut = false
      const timer = setTimeout(() => {
        timedOut = true
        reject(new FST_RRL_REDIS_TIMEOUT(timeout))
      }, timeout)
      const settle = (reply: unknown): void => {
        clearTimeout(timer)
        try {
          resolve(toDecision(reply))
        } catch (error) {
          reject(error)
        }
      }
      const fail = (error: unknown): void => {
        clearTimeout(timer)
        reject(new FST_RRL_REDIS_UNAVAILABLE(error instanceof Error ? error.message : String(error)))
      }
      client.evalsha(script.sha, 1, key, limit, windowMs, burst, cost, now).then(settle, (error: unknown) => {
        // An abandoned decision is never retried: the request was already answered.
        if (!isNoScript(error) || timedOut) return fail(error)
        client.eval(script.source, 1, key, limit, windowMs, burst, cost, now).then(settle, fail)
      })
    })
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
