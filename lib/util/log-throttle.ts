import type { FastifyBaseLogger } from 'fastify'
import { LruMap } from './lru-map.js'

/*
 * Log throttling: a flood (a Redis outage, a scraper over its limit) must
 * produce a few log lines, not one per request. Both classes read the plugin
 * clock (the injected test clock, else Date.now), so tests can step them.
 */

/**
 * Logs the first event of a burst and counts the rest, so a Redis outage at
 * thousands of requests per second produces one line per second, not one per
 * request. The next line carries how many were suppressed.
 */
export class BurstLogger {
  readonly #intervalMs: number
  readonly #clock: () => number
  #lastAt = -Infinity
  #suppressed = 0

  constructor (clock: () => number = Date.now, intervalMs = 1000) {
    this.#clock = clock
    this.#intervalMs = intervalMs
  }

  report (log: FastifyBaseLogger, fields: Record<string, unknown>, message: string): void {
    const now = this.#clock()
    if (now - this.#lastAt < this.#intervalMs) {
      this.#suppressed++
      return
    }
    this.#lastAt = now
    // Reporting never throws into the path that reports: a logger that throws loses this line, not the request.
    try {
      log.warn({ ...fields, suppressed: this.#suppressed }, message)
    } catch {}
    this.#suppressed = 0
  }
}

/**
 * Remembers, per key, until when an event has been reported: rejections log
 * once per identity per window, not once per request under a flood. Bounded
 * like the deny cache (an evicted key may log once more, never less).
 */
export class OncePerWindow {
  readonly #until: LruMap<string, number>

  constructor (max = 10_000) {
    this.#until = new LruMap(max)
  }

  /** True the first time for `key` until `until`; false while that window lasts. */
  first (key: string, now: number, until: number): boolean {
    const known = this.#until.peek(key)
    if (known !== undefined && known > now) return false
    this.#until.set(key, until)
    return true
  }
}
