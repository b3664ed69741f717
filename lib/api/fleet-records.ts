import type { FastifyBaseLogger } from 'fastify'
import type { ClientPort, TimedHash } from '../store/redis/client/port.js'

/*
 * Operator records shared by the fleet (runtime overrides, bans): one Redis
 * hash per prefix and kind (one slot, so a Cluster works too) holds one JSON
 * record per id. Every instance reads the whole hash every FLEET_POLL_MS into
 * a local map the request path reads (never Redis); the instance that makes a
 * change applies it at once. Every change is logged with who made it and why.
 *
 * Time is Redis's (the node that holds the hash), never an instance's: a
 * record's `setAt`/`expiresAt` come from its `TIME`, each read returns `TIME`
 * with the hash, and between reads an instance counts Redis time as of its
 * last read plus the monotonic time since. A lapsed record is deleted only by
 * a script that compares `expiresAt` with its own `TIME`. With the plugin's
 * `clock` option that clock stands in for `TIME`, as in the decision scripts;
 * with the memory store the records and their times are this process's.
 */

export const FLEET_POLL_MS = 1000

/** What every record carries. */
export interface FleetRecord {
  id: string
  /** Redis-time ms when it lapses; null when permanent. */
  expiresAt: number | null
  actor: string
  reason: string
  setAt: number
}

/** One record as held locally: the stored JSON, so an unchanged record keeps what was built for it across polls. */
export interface FleetEntry<R extends FleetRecord> {
  record: R
  json: string
}

/** What differs between kinds of records. */
export interface RecordKind<R extends FleetRecord, E extends FleetEntry<R>> {
  /** `override`, `ban`: the log field and the words of the log lines. */
  noun: string
  /** The record a stored JSON holds, or undefined when it is not one of this kind. */
  parse: (json: string) => R | undefined
  entry: (record: R, json: string) => E
}

/**
 * Deletes a record only if nobody replaced it since it was read and it has
 * lapsed (ARGV[4]: its expiresAt) by this node's `TIME`, or by ARGV[1] when
 * the `clock` option stands in for it.
 */
const DELETE_LAPSED = "local now = tonumber(ARGV[1]) if now == nil then local t = redis.call('TIME') now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end " +
  "if redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[3] and tonumber(ARGV[4]) <= now then return redis.call('HDEL', KEYS[1], ARGV[2]) end return 0"

/**
 * The clocks a record store reads. Redis store: `test` if set (it stands in
 * for Redis TIME), else Redis time as read plus `monotonic` since. Memory
 * store: `test`, else `host`.
 */
export interface FleetClocks {
  /** The plugin's `clock` option. */
  test: (() => number) | undefined
  /** This host's clock (Date.now): the memory store's time. */
  host: () => number
  /** Milliseconds that never go back (performance.now): time elapsed since Redis's clock was read. */
  monotonic: () => number
}

/** Parses JSON, or undefined: a record a later version wrote, or garbage, is skipped rather than thrown on. */
export function parseJson (json: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(json)
    return value !== null && typeof value === 'object' ? value as Record<string, unknown> : undefined
  } catch {
    return undefined
  }
}

export class FleetRecords<R extends FleetRecord, E extends FleetEntry<R>> {
  /** Replaced as a whole on every change (never mutated), so a reader's view stays consistent. */
  protected entries = new Map<string, E>()
  readonly #client: ClientPort | undefined
  readonly #key: string
  readonly #clocks: FleetClocks
  readonly #log: FastifyBaseLogger
  readonly #kind: RecordKind<R, E>
  #timer: NodeJS.Timeout | undefined
  /** Local changes so far: a read that started before one is stale and dropped. */
  #changes = 0
  /** Redis time at the last read of it, and the monotonic time its reply came (so the estimate lags Redis by at most a round trip). */
  #redisMs = 0
  #readAt = 0

  /** `client` undefined (the memory store): the records live in this process only. */
  constructor (client: ClientPort | undefined, key: string, clocks: FleetClocks, log: FastifyBaseLogger, kind: RecordKind<R, E>) {
    this.#client = client
    this.#key = key
    this.#clocks = clocks
    this.#log = log
    this.#kind = kind
  }

  /** Called after every change of `entries`. */
  protected changed (): void {}

  /** How many records this instance holds (lapsed ones until the next read included). */
  get size (): number {
    return this.entries.size
  }

  /** The time records are judged by now: Redis time as of the last read plus the monotonic time since (see the file comment). */
  now (): number {
    const { test, host, monotonic } = this.#clocks
    if (test !== undefined) return test()
    return this.#client === undefined ? host() : this.#redisMs + (monotonic() - this.#readAt)
  }

  /** The time a record about to be set is stamped with: read from Redis (one round trip) on the Redis store. */
  async stamp (): Promise<number> {
    if (this.#client === undefined || this.#clocks.test !== undefined) return this.now()
    return this.#observe(await this.#client.timedHash(this.#key)).timeMs
  }

  #observe (read: TimedHash): TimedHash {
    this.#redisMs = read.timeMs
    this.#readAt = this.#clocks.monotonic()
    return read
  }

  /** The scripts' ARGV[1]: the test clock's time, or empty for Redis TIME. */
  #scriptNow (): string {
    return this.#clocks.test === undefined ? '' : String(this.#clocks.test())
  }

  #lapsed (record: R, now: number): boolean {
    return record.expiresAt !== null && record.expiresAt <= now
  }

  /** The records in force on this instance now. */
  current (): R[] {
    const now = this.now()
    const out: R[] = []
    for (const { record } of this.entries.values()) if (!this.#lapsed(record, now)) out.push({ ...record })
    return out
  }

  #replace (next: Map<string, E>): void {
    this.entries = next
    this.changed()
  }

  /** Reads the hash and Redis time (Redis store) and replaces this instance's records; lapsed ones are deleted by a script that checks. */
  async refresh (): Promise<void> {
    const client = this.#client
    if (client === undefined) {
      const now = this.now()
      const kept = [...this.entries].filter(([, { record }]) => !this.#lapsed(record, now))
      if (kept.length !== this.entries.size) this.#replace(new Map(kept))
      return
    }
    const changes = this.#changes
    const { fields } = this.#observe(await client.timedHash(this.#key))
    if (changes !== this.#changes) return
    const now = this.now()
    const next = new Map<string, E>()
    for (const [id, json] of fields) {
      const record = this.#kind.parse(json)
      if (record === undefined) continue
      if (this.#lapsed(record, now)) {
        client.eval(DELETE_LAPSED, [this.#key], [this.#scriptNow(), id, json, String(record.expiresAt)]).catch(() => {})
        continue
      }
      const known = this.entries.get(id)
      next.set(id, known?.json === json ? known : this.#kind.entry(record, json))
    }
    this.#replace(next)
  }

  /** Stores a record (replacing one with the same id), applies it here at once, logs the change. */
  async set (record: R): Promise<void> {
    const json = JSON.stringify(record)
    if (this.#client !== undefined) await this.#client.hset(this.#key, record.id, json)
    this.#changes++
    this.#replace(new Map(this.entries).set(record.id, this.#kind.entry(record, json)))
    const noun = this.#kind.noun
    this.#log.info({ [noun]: record, change: 'set', actor: record.actor, reason: record.reason, at: new Date(record.setAt).toISOString() }, `rate limit ${noun} set`)
  }

  /** Removes a record by id everywhere; false when there was none. Logs the change. */
  async clear (id: string, actor: string, reason: string): Promise<boolean> {
    const removed = this.#client === undefined ? this.entries.has(id) : await this.#client.hdel(this.#key, id) === 1
    this.#changes++
    const next = new Map(this.entries)
    next.delete(id)
    this.#replace(next)
    if (removed) {
      const noun = this.#kind.noun
      this.#log.info({ [noun]: { id }, change: 'clear', actor, reason, at: new Date(this.now()).toISOString() }, `rate limit ${noun} cleared`)
    }
    return removed
  }

  /** Reads now, then every FLEET_POLL_MS (never keeping the process alive); a failed read keeps the last known records. */
  start (): void {
    const poll = (): void => {
      this.refresh().catch((error: unknown) => { this.#log.debug({ cause: (error as Error).message }, `rate limit ${this.#kind.noun}s not read; keeping the last known`) })
    }
    poll()
    this.#timer = setInterval(poll, FLEET_POLL_MS)
    this.#timer.unref()
  }

  close (): void {
    clearInterval(this.#timer)
  }
}
