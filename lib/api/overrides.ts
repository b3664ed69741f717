import type { FastifyBaseLogger } from 'fastify'
import { blockId } from '../keys/layout.js'
import type { CompiledBlock, CompiledPolicy } from '../policy/policy.js'
import { runAtLimit } from '../policy/run.js'
import type { BlockRun } from '../store/port.js'
import type { ClientPort } from '../store/redis/client/port.js'
import type { RateLimitOverride } from '../types.js'

/*
 * Runtime overrides of a block's `limit`, fleet-wide. One Redis hash per
 * prefix (keys/layout.ts overridesKey, one slot, so a Cluster works too) holds
 * one JSON record per override, under its id: the caller's key for one caller,
 * the block's id for every caller. Every instance reads the whole hash every
 * OVERRIDE_POLL_MS; the instance that makes a change applies it at once.
 * Keys carry the window, never the limit, so a caller keeps its count.
 */

export const OVERRIDE_POLL_MS = 1000

/** Deletes an expired record only if nobody replaced it since it was read. */
const DELETE_IF_SAME = "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0"

interface Entry {
  record: RateLimitOverride
  /** The stored JSON, so an unchanged record keeps its built runs across polls. */
  json: string
  /**
   * Base run → the same run at the override's limit, built once. Weak: a base
   * run may be a requestLimit result, built per request.
   */
  runs: WeakMap<BlockRun, BlockRun>
}

function parse (json: string): RateLimitOverride | undefined {
  try {
    const record = JSON.parse(json) as RateLimitOverride
    return typeof record.limit === 'number' && typeof record.blockId === 'string' ? record : undefined
  } catch {
    return undefined
  }
}

/** Each policy's block ids, built once (a string built per request would be hashed per request). */
const blockIds = new WeakMap<CompiledPolicy, string[]>()

function idsOf (policy: CompiledPolicy): string[] {
  let ids = blockIds.get(policy)
  if (ids === undefined) {
    ids = policy.blocks.map((_, index) => blockId(policy, index))
    blockIds.set(policy, ids)
  }
  return ids
}

export class Overrides {
  #entries = new Map<string, Entry>()
  readonly #client: ClientPort | undefined
  readonly #key: string
  readonly #clock: () => number
  readonly #log: FastifyBaseLogger
  #timer: NodeJS.Timeout | undefined
  /** Local changes so far: a read that started before one is stale and dropped. */
  #changes = 0

  /** `client` undefined (the memory store): overrides live in this process only. */
  constructor (client: ClientPort | undefined, key: string, clock: () => number, log: FastifyBaseLogger) {
    this.#client = client
    this.#key = key
    this.#clock = clock
    this.#log = log
  }

  /**
   * The runs a request decides with: `runs` itself while no override matches
   * (so the precompiled header strings apply), else a copy with the
   * overridden runs. A caller's own override wins over the block's.
   */
  apply (policy: CompiledPolicy, runs: readonly BlockRun[], keys: readonly string[]): readonly BlockRun[] {
    const entries = this.#entries
    if (entries.size === 0) return runs
    let out: BlockRun[] | undefined
    const ids = idsOf(policy)
    for (let i = 0; i < runs.length; i++) {
      const entry = entries.get(keys[i] as string) ?? entries.get(ids[i] as string)
      if (entry === undefined) continue
      const { expiresAt } = entry.record
      if (expiresAt !== null && expiresAt <= this.#clock()) continue
      const base = runs[i] as BlockRun
      let run = entry.runs.get(base)
      if (run === undefined) {
        run = runAtLimit((policy.blocks[i] as CompiledBlock).runSpec, base, entry.record.limit, 'equal-follows')
        entry.runs.set(base, run)
      }
      out ??= [...runs]
      out[i] = run
    }
    return out ?? runs
  }

  /** The overrides in force on this instance now. */
  current (): RateLimitOverride[] {
    const now = this.#clock()
    const out: RateLimitOverride[] = []
    for (const { record } of this.#entries.values()) if (record.expiresAt === null || record.expiresAt > now) out.push({ ...record })
    return out
  }

  /** Reads the hash (Redis store) and replaces this instance's overrides; expired records are deleted. */
  async refresh (): Promise<void> {
    const client = this.#client
    const now = this.#clock()
    if (client === undefined) {
      for (const [id, { record }] of this.#entries) if (record.expiresAt !== null && record.expiresAt <= now) this.#entries.delete(id)
      return
    }
    const changes = this.#changes
    const stored = await client.hgetall(this.#key)
    if (changes !== this.#changes) return
    const next = new Map<string, Entry>()
    for (const [id, json] of Object.entries(stored)) {
      const record = parse(json)
      if (record === undefined) continue
      if (record.expiresAt !== null && record.expiresAt <= now) {
        client.eval(DELETE_IF_SAME, [this.#key], [id, json]).catch(() => {})
        continue
      }
      const known = this.#entries.get(id)
      next.set(id, known?.json === json ? known : { record, json, runs: new WeakMap() })
    }
    this.#entries = next
  }

  /** Stores an override (replacing one with the same id), applies it here at once, logs the change. */
  async set (record: RateLimitOverride): Promise<void> {
    const json = JSON.stringify(record)
    if (this.#client !== undefined) await this.#client.hset(this.#key, record.id, json)
    this.#changes++
    this.#entries = new Map(this.#entries).set(record.id, { record, json, runs: new WeakMap() })
    this.#log.info({ override: record, change: 'set', actor: record.actor, reason: record.reason, at: new Date(record.setAt).toISOString() }, 'rate limit override set')
  }

  /** Removes an override by id everywhere; false when there was none. Logs the change. */
  async clear (id: string, actor: string, reason: string): Promise<boolean> {
    const removed = this.#client === undefined ? this.#entries.has(id) : await this.#client.hdel(this.#key, id) === 1
    this.#changes++
    const next = new Map(this.#entries)
    next.delete(id)
    this.#entries = next
    if (removed) {
      this.#log.info({ override: { id }, change: 'clear', actor, reason, at: new Date(this.#clock()).toISOString() }, 'rate limit override cleared')
    }
    return removed
  }

  /** Reads now, then every OVERRIDE_POLL_MS (never keeping the process alive); a failed read keeps the last known overrides. */
  start (): void {
    const poll = (): void => {
      this.refresh().catch((error: unknown) => { this.#log.debug({ cause: (error as Error).message }, 'rate limit overrides not read; keeping the last known') })
    }
    poll()
    this.#timer = setInterval(poll, OVERRIDE_POLL_MS)
    this.#timer.unref()
  }

  close (): void {
    clearInterval(this.#timer)
  }
}
