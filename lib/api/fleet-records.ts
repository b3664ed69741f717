import type { FastifyBaseLogger } from 'fastify'
import type { ClientPort } from '../store/redis/client/port.js'

/*
 * Operator records shared by the fleet (runtime overrides, bans): one Redis
 * hash per prefix and kind (one slot, so a Cluster works too) holds one JSON
 * record per id. Every instance reads the whole hash every FLEET_POLL_MS into
 * a local map the request path reads (never Redis); the instance that makes a
 * change applies it at once. Records lapse at `expiresAt` (plugin clock) and
 * the first instance that reads a lapsed one deletes it. Every change is
 * logged with who made it and why.
 */

export const FLEET_POLL_MS = 1000

/** What every record carries. */
export interface FleetRecord {
  id: string
  /** Plugin-clock ms when it lapses; null when permanent. */
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

/** Deletes an expired record only if nobody replaced it since it was read. */
const DELETE_IF_SAME = "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0"

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
  protected readonly clock: () => number
  readonly #client: ClientPort | undefined
  readonly #key: string
  readonly #log: FastifyBaseLogger
  readonly #kind: RecordKind<R, E>
  #timer: NodeJS.Timeout | undefined
  /** Local changes so far: a read that started before one is stale and dropped. */
  #changes = 0

  /** `client` undefined (the memory store): the records live in this process only. */
  constructor (client: ClientPort | undefined, key: string, clock: () => number, log: FastifyBaseLogger, kind: RecordKind<R, E>) {
    this.#client = client
    this.#key = key
    this.clock = clock
    this.#log = log
    this.#kind = kind
  }

  /** Called after every change of `entries`. */
  protected changed (): void {}

  /** How many records this instance holds (lapsed ones until the next read included). */
  get size (): number {
    return this.entries.size
  }

  /** The records in force on this instance now. */
  current (): R[] {
    const now = this.clock()
    const out: R[] = []
    for (const { record } of this.entries.values()) if (record.expiresAt === null || record.expiresAt > now) out.push({ ...record })
    return out
  }

  #replace (next: Map<string, E>): void {
    this.entries = next
    this.changed()
  }

  /** Reads the hash (Redis store) and replaces this instance's records; lapsed ones are deleted. */
  async refresh (): Promise<void> {
    const client = this.#client
    const now = this.clock()
    if (client === undefined) {
      const kept = [...this.entries].filter(([, { record }]) => record.expiresAt === null || record.expiresAt > now)
      if (kept.length !== this.entries.size) this.#replace(new Map(kept))
      return
    }
    const changes = this.#changes
    const stored = await client.hgetall(this.#key)
    if (changes !== this.#changes) return
    const next = new Map<string, E>()
    for (const [id, json] of Object.entries(stored)) {
      const record = this.#kind.parse(json)
      if (record === undefined) continue
      if (record.expiresAt !== null && record.expiresAt <= now) {
        client.eval(DELETE_IF_SAME, [this.#key], [id, json]).catch(() => {})
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
      this.#log.info({ [noun]: { id }, change: 'clear', actor, reason, at: new Date(this.clock()).toISOString() }, `rate limit ${noun} cleared`)
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
