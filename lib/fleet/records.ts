import type { FastifyBaseLogger } from 'fastify'
import type { AuditTrail, RecordHash } from '../store/port.js'
import type { AuditEntry } from '../types/index.js'
import { FLEET_POLL_MS } from '../limits.js'

/*
 * Operator records shared by the fleet (runtime overrides, bans): one hash
 * per prefix and kind (one key, so a Cluster works too) holds one JSON record
 * per id, through the store's records capability (store/port.ts RecordHash).
 * Every instance reads the whole hash every FLEET_POLL_MS into a local map
 * the request path reads (never the store); the instance that makes a change
 * applies it at once. Every change is logged with who made it and why.
 *
 * Time is the store's, never an instance's: a record's `setAt`/`expiresAt`
 * come from the store's clock (Redis TIME of the node that holds the hash,
 * or the `clock` option standing in for it; the memory store's clock), and a
 * lapsed record is deleted only by the store's compare-and-delete, which
 * checks the expiry against that clock.
 */

/** What every record carries. */
export interface FleetRecord {
  id: string
  /** Store-time ms when it lapses; null when permanent. */
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

/** Writes an entry to the audit trail; a failed write is logged (the change itself stands). */
export async function audited (audit: AuditTrail | undefined, log: FastifyBaseLogger, entry: AuditEntry): Promise<void> {
  if (audit === undefined) return
  try {
    await audit.add(JSON.stringify(entry))
  } catch (error) {
    log.warn({ cause: (error as Error).message, change: entry }, 'rate limit audit trail not written; the change was made and logged')
  }
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
  readonly #records: RecordHash
  readonly #log: FastifyBaseLogger
  readonly #kind: RecordKind<R, E>
  readonly #audit: AuditTrail | undefined
  #timer: NodeJS.Timeout | undefined
  /** Local changes so far: a read that started before one is stale and dropped. */
  #changes = 0

  /** `records`: the store's hash of this kind (Store.records). */
  constructor (records: RecordHash, log: FastifyBaseLogger, kind: RecordKind<R, E>, audit?: AuditTrail) {
    this.#records = records
    this.#log = log
    this.#kind = kind
    this.#audit = audit
  }

  /** Called after every change of `entries`. */
  protected changed (): void {}

  /** How many records this instance holds (lapsed ones until the next read included). */
  get size (): number {
    return this.entries.size
  }

  /** The time records are judged by now: the store's clock (see the file comment). */
  now (): number {
    return this.#records.now()
  }

  /** The time a record about to be set is stamped with: read from the store (one round trip on Redis). */
  async stamp (): Promise<number> {
    return await this.#records.stamp()
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

  /** Reads the hash and the store's clock and replaces this instance's records; lapsed ones go to the store's compare-and-delete. */
  async refresh (): Promise<void> {
    const changes = this.#changes
    const { fields } = await this.#records.read()
    if (changes !== this.#changes) return
    const now = this.now()
    const next = new Map<string, E>()
    for (const [id, json] of fields) {
      const record = this.#kind.parse(json)
      if (record === undefined) continue
      const { expiresAt } = record
      if (expiresAt !== null && expiresAt <= now) {
        this.#records.removeLapsed(id, json, expiresAt).catch(() => {})
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
    await this.#records.write(record.id, json)
    this.#changes++
    this.#replace(new Map(this.entries).set(record.id, this.#kind.entry(record, json)))
    const noun = this.#kind.noun
    const at = new Date(record.setAt).toISOString()
    this.#log.info({ [noun]: record, change: 'set', actor: record.actor, reason: record.reason, at }, `rate limit ${noun} set`)
    await audited(this.#audit, this.#log, { at, change: 'set', noun, id: record.id, actor: record.actor, reason: record.reason, record })
  }

  /** Removes a record by id everywhere; false when there was none. Logs the change. */
  async clear (id: string, actor: string, reason: string): Promise<boolean> {
    const removed = await this.#records.remove(id)
    this.#changes++
    const next = new Map(this.entries)
    next.delete(id)
    this.#replace(next)
    if (removed) {
      const noun = this.#kind.noun
      const at = new Date(this.now()).toISOString()
      this.#log.info({ [noun]: { id }, change: 'clear', actor, reason, at }, `rate limit ${noun} cleared`)
      await audited(this.#audit, this.#log, { at, change: 'clear', noun, id, actor, reason })
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
