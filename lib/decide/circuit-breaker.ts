/*
 * A circuit breaker in front of the store. After `failures` store failures in
 * a row (timeouts and an unreachable Redis, not a bad key), decisions stop
 * asking Redis for `cooldownMs`: each answers at once by its route's
 * onRedisError instead of waiting out `timeout`. When the cooldown ends, one
 * decision is let through as a probe (the others keep answering at once): its
 * success closes the breaker, its failure opens it for another cooldown. It
 * runs on the plugin clock, so tests drive it with the injected clock.
 */

export interface BreakerOptions {
  /** Failures in a row that open the breaker. */
  failures: number
  /** How long it stays open before a probe. */
  cooldownMs: number
}

export class CircuitBreaker {
  readonly #options: BreakerOptions
  readonly #clock: () => number
  #failures = 0
  #openUntil = 0
  #probing = false

  constructor (options: BreakerOptions, clock: () => number) {
    this.#options = options
    this.#clock = clock
  }

  /**
   * Whether this decision may ask the store. False while open; after the
   * cooldown, true for exactly one probe until it reports back.
   */
  allow (): boolean {
    if (this.#failures < this.#options.failures) return true
    if (this.#probing || this.#clock() < this.#openUntil) return false
    this.#probing = true
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

  success (): void {
    this.#failures = 0
    this.#probing = false
  }

  failure (): void {
    this.#failures++
    this.#probing = false
    if (this.#failures >= this.#options.failures) this.#openUntil = this.#clock() + this.#options.cooldownMs
  }
}
