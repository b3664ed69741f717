import type { AuditTrail, PictureBoard, PictureKeys } from '../port.js'
import type { ClientPort } from './client/port.js'

/*
 * The fleet's pictures (port.ts PictureBoard) and the audit trail in Redis:
 * small admin scripts by plain EVAL, once per interval or per operator
 * change, never on the request path. The pictures are a hash of JSON by
 * instance id and a sorted set of lapse times, under one hash tag so one call
 * writes both on a Cluster; both keys expire with the last writer, so a fleet
 * that is gone leaves nothing behind.
 */

/** The store's time: ARGV[1], or this node's TIME when it is empty (the `clock` option stands in for TIME). */
const NOW = "local now = tonumber(ARGV[1]) if now == nil then local t = redis.call('TIME') now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end "

/** Lapsed pictures dropped per write, at most: a write stays short however many instances died at once. */
const SWEEP = 64

/**
 * Both keys live until the last picture in them lapses: set from the latest
 * lapse time after every change, so an instance with a short interval that
 * stops (or closes) never takes the pictures of instances with longer ones with it.
 */
const EXPIRE = "local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES') " +
  "if last[2] then local ms = math.max(1, tonumber(last[2]) - now) redis.call('PEXPIRE', KEYS[1], ms) redis.call('PEXPIRE', KEYS[2], ms) end "

/** KEYS: pictures, lapses. ARGV: now, id, json, ttl ms. Writes one picture, drops lapsed ones, returns the time. */
const PUBLISH = NOW +
  "local ttl = tonumber(ARGV[4]) redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) redis.call('ZADD', KEYS[2], now + ttl, ARGV[2]) " +
  `local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, ${SWEEP}) ` +
  "for _, id in ipairs(lapsed) do redis.call('HDEL', KEYS[1], id) redis.call('ZREM', KEYS[2], id) end " +
  EXPIRE + 'return now'

/** KEYS: pictures, lapses. ARGV: now. The time, then id and JSON of every picture whose lapse time is still ahead. */
const READ = NOW +
  "local out = { now } local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf') " +
  "for _, id in ipairs(live) do local json = redis.call('HGET', KEYS[1], id) if json then out[#out + 1] = id out[#out + 1] = json end end return out"

/** KEYS: pictures, lapses. ARGV: now, id. */
const WITHDRAW = NOW + "redis.call('HDEL', KEYS[1], ARGV[2]) redis.call('ZREM', KEYS[2], ARGV[2]) " + EXPIRE + 'return 1'

export class RedisBoard implements PictureBoard {
  readonly #client: ClientPort
  readonly #keys: readonly [string, string]
  readonly #clock: (() => number) | undefined

  constructor (client: ClientPort, keys: PictureKeys, clock: (() => number) | undefined) {
    this.#client = client
    this.#keys = [keys.pictures, keys.lapses]
    this.#clock = clock
  }

  #now (): string {
    return this.#clock === undefined ? '' : String(this.#clock())
  }

  async publish (id: string, json: string, ttlMs: number): Promise<number> {
    return Number(await this.#client.eval(PUBLISH, this.#keys, [this.#now(), id, json, String(ttlMs)]))
  }

  async withdraw (id: string): Promise<void> {
    await this.#client.eval(WITHDRAW, this.#keys, [this.#now(), id])
  }

  async read (): Promise<{ pictures: Map<string, string>, at: number }> {
    const reply = await this.#client.eval(READ, this.#keys, [this.#now()]) as unknown[]
    const pictures = new Map<string, string>()
    for (let i = 1; i + 1 < reply.length; i += 2) pictures.set(String(reply[i]), String(reply[i + 1]))
    return { pictures, at: Number(reply[0]) }
  }
}

/** KEYS: the stream. ARGV: max, json. */
const ADD = "redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'entry', ARGV[2]) return 1"
/** KEYS: the stream. ARGV: count. The entries' JSON, newest first. */
const RECENT = "local out = {} for _, e in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])) do out[#out + 1] = e[2][2] end return out"

export class RedisAudit implements AuditTrail {
  readonly #client: ClientPort
  readonly #key: string
  readonly #max: number

  constructor (client: ClientPort, key: string, max: number) {
    this.#client = client
    this.#key = key
    this.#max = max
  }

  async add (json: string): Promise<void> {
    await this.#client.eval(ADD, [this.#key], [String(this.#max), json])
  }

  async recent (count: number): Promise<string[]> {
    const reply = await this.#client.eval(RECENT, [this.#key], [String(count)]) as unknown[]
    return reply.map(String)
  }
}
