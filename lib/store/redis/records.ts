import { performance } from 'node:perf_hooks'
import type { RecordHash, RecordsRead } from '../port.js'
import type { ClientPort, TimedHash } from './client/port.js'

/*
 * A records hash in Redis (port.ts RecordHash). Reads are a pipeline of
 * HGETALL and TIME (client/port.ts timedHash), not a script, so polls never
 * show in script counts. Between reads the hash node's TIME is carried by the
 * monotonic clock. With the `clock` option that clock stands in for TIME, as
 * in the decision scripts.
 */

/**
 * Deletes a record only if nobody replaced it since it was read and it has
 * lapsed (ARGV[4]: its expiresAt) by this node's `TIME`, or by ARGV[1] when
 * the `clock` option stands in for it.
 */
const DELETE_LAPSED = "local now = tonumber(ARGV[1]) if now == nil then local t = redis.call('TIME') now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end " +
  "if redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[3] and tonumber(ARGV[4]) <= now then return redis.call('HDEL', KEYS[1], ARGV[2]) end return 0"

export class RedisRecords implements RecordHash {
  readonly #client: ClientPort
  readonly #key: string
  readonly #clock: (() => number) | undefined
  /** Redis time at the last read of it, and the monotonic time its reply came (so the estimate lags Redis by at most a round trip). */
  #redisMs = 0
  #readAt = 0

  /** `clock`: the plugin's `clock` option, which stands in for TIME. */
  constructor (client: ClientPort, key: string, clock: (() => number) | undefined) {
    this.#client = client
    this.#key = key
    this.#clock = clock
  }

  #observe (read: TimedHash): RecordsRead {
    this.#redisMs = read.timeMs
    this.#readAt = performance.now()
    return { fields: read.fields, at: this.#clock === undefined ? read.timeMs : this.#clock() }
  }

  async read (): Promise<RecordsRead> {
    return this.#observe(await this.#client.timedHash(this.#key))
  }

  now (): number {
    return this.#clock === undefined ? this.#redisMs + (performance.now() - this.#readAt) : this.#clock()
  }

  async stamp (): Promise<number> {
    return this.#clock === undefined ? (await this.read()).at : this.#clock()
  }

  async write (id: string, json: string): Promise<void> {
    await this.#client.hset(this.#key, id, json)
  }

  async remove (id: string): Promise<boolean> {
    return await this.#client.hdel(this.#key, id) === 1
  }

  async removeLapsed (id: string, json: string, expiresAt: number): Promise<boolean> {
    // ARGV[1] empty: the script reads TIME.
    const now = this.#clock === undefined ? '' : String(this.#clock())
    return await this.#client.eval(DELETE_LAPSED, [this.#key], [now, id, json, String(expiresAt)]) === 1
  }
}
