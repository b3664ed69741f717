/*
 * A circuit breaker per node: the unit that fails. Standalone and Sentinel
 * have one (the master of the moment); a Cluster has one per master, so one
 * hung master degrades only the decisions whose keys it holds, and every
 * other key is decided as usual. The node of a decision is its first key's
 * master (ClientPort.nodeOf), the connection the call is written to.
 *
 * Each breaker: after `failures` store failures in
 * a row (timeouts and an unreachable Redis, not a bad key), decisions stop
 * asking Redis for `cooldownMs`: each answers at once by its route's
 * onRedisError instead of waiting out `timeout`. When the cooldown ends, one
 * decision is let through as a probe (the others keep answering at once).
 * The probe is released on every outcome (see `report`): Redis answering
 * closes the breaker, Redis silent or unreachable opens it for another
 * cooldown, a call that never reached Redis lets the next decision probe, and
 * a probe that reports nothing within `timeout` plus one cooldown is released
 * here. It runs on the plugin clock, so tests drive it with the injected clock.
 */

export interface BreakerOptions {
  /** Failures in a row that open the breaker. */
  failures: number
  /** How long it stays open before a probe. */
  cooldownMs: number
}

/** What a failed store call says of Redis. */
export type StoreHealth = 'answered' | 'unhealthy' | 'not-asked'

/**
 * Redis answered when it replied with an error for one decision's key
 * (WRONGTYPE, a period error) or a reply this instance could not read; it is
 * unhealthy when the call timed out or Redis was unreachable (or refused the
 * whole call); anything else (the store overloaded, a local error) never
 * reached it and says nothing about its health.
 */
export function storeHealth (error: unknown): StoreHealth {
  const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined
  if (code === 'FST_RRL_REDIS_TIMEOUT' || code === 'FST_RRL_REDIS_UNAVAILABLE') return 'unhealthy'
  if (code === 'FST_RRL_SCRIPT_ERROR' || code === 'FST_RRL_BAD_SCRIPT_REPLY') return 'answered'
  return 'not-asked'
}

export class CircuitBreaker {
  readonly #options: BreakerOptions
  /** A probe silent for this long is released (the store's `timeout` plus one cooldown). */
  readonly #probeMs: number
  readonly #clock: () => number
  #failures = 0
  #openUntil = 0
  /** When the pending probe was let through, or undefined when none is. */
  #probeAt: number | undefined

  constructor (options: BreakerOptions, timeoutMs: number, clock: () => number) {
    this.#options = options
    this.#probeMs = timeoutMs + options.cooldownMs
    this.#clock = clock
  }

  /**
   * Whether this decision may ask the store. False while open; after the
   * cooldown, true for exactly one probe until it reports back (or has been
   * silent for `timeout` plus one cooldown).
   */
  allow (): boolean {
    if (this.#failures < this.#options.failures) return true
    const now = this.#clock()
    if (now < this.#openUntil) return false
    if (this.#probeAt !== undefined && now < this.#probeAt + this.#probeMs) return false
    this.#probeAt = now
    return true
  }

  /** Ms until the next probe, for the error a skipped decision reports. */
  get retryInMs (): number {
    return Math.max(0, this.#openUntil - this.#clock())
  }

  get failures (): number {
    return this.#failures
  }

  get open (): boolean {
    return this.#failures >= this.#options.failures
  }

  /** What an operator sees (the console): closed, open until its cooldown ends, or a probe out. */
  get state (): 'closed' | 'open' | 'probing' {
    if (!this.open) return 'closed'
    return this.#probeAt !== undefined && this.#clock() < this.#probeAt + this.#probeMs ? 'probing' : 'open'
  }

  /** Redis decided: closed. */
  success (): void {
    this.#failures = 0
    this.#probeAt = undefined
  }

  /** A store call that was allowed failed: each outcome releases the probe, as storeHealth classifies it. */
  report (error: unknown): void {
    const health = storeHealth(error)
    if (health === 'answered') this.success()
    else if (health === 'unhealthy') this.#failure()
    else this.#probeAt = undefined
  }

  #failure (): void {
    this.#failures++
    this.#probeAt = undefined
    if (this.#failures >= this.#options.failures) this.#openUntil = this.#clock() + this.#options.cooldownMs
  }
}

/** One breaker per node, made on a node's first decision; a node the topology no longer names keeps its (closed, small) breaker. */
export class NodeBreakers {
  readonly #options: BreakerOptions
  readonly #timeoutMs: number
  readonly #clock: () => number
  readonly #byNode = new Map<string, CircuitBreaker>()

  constructor (options: BreakerOptions, timeoutMs: number, clock: () => number) {
    this.#options = options
    this.#timeoutMs = timeoutMs
    this.#clock = clock
  }

  /** Every node's breaker, by node name. */
  entries (): IterableIterator<[string, CircuitBreaker]> {
    return this.#byNode.entries()
  }

  of (node: string): CircuitBreaker {
    let breaker = this.#byNode.get(node)
    if (breaker === undefined) {
      breaker = new CircuitBreaker(this.#options, this.#timeoutMs, this.#clock)
      this.#byNode.set(node, breaker)
    }
    return breaker
  }
}
