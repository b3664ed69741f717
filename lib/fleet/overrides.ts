import type { FastifyBaseLogger } from 'fastify'
import { blockId } from '../keys/layout.js'
import type { CompiledBlock, CompiledPolicy } from '../policy/policy.js'
import { runAtLimit } from '../policy/run.js'
import type { BlockRun, RecordHash } from '../store/port.js'
import type { RateLimitOverride } from '../types/index.js'
import { FleetRecords, parseJson, type FleetEntry } from './records.js'
import { FLEET_POLL_MS } from '../limits.js'

/*
 * Runtime overrides of a block's `limit`, fleet-wide, as fleet records
 * (records.ts: one hash per prefix, keys/layout.ts overridesKey, read
 * by every instance every OVERRIDE_POLL_MS). One record per override, under
 * its id: the caller's key for one caller, the block's id for every caller.
 * Keys carry the window, never the limit, so a caller keeps its count.
 */

export const OVERRIDE_POLL_MS = FLEET_POLL_MS

interface Entry extends FleetEntry<RateLimitOverride> {
  /**
   * Base run → the same run at the override's limit, built once. Weak: a base
   * run may be a requestLimit result, built per request.
   */
  runs: WeakMap<BlockRun, BlockRun>
}

function parse (json: string): RateLimitOverride | undefined {
  const record = parseJson(json)
  return typeof record?.limit === 'number' && typeof record.blockId === 'string' ? record as unknown as RateLimitOverride : undefined
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

export class Overrides extends FleetRecords<RateLimitOverride, Entry> {
  constructor (records: RecordHash, log: FastifyBaseLogger) {
    super(records, log, { noun: 'override', parse, entry: (record, json) => ({ record, json, runs: new WeakMap() }) })
  }

  /**
   * The runs a request decides with: `runs` itself while no override matches
   * (so the precompiled header strings apply), else a copy with the
   * overridden runs. A caller's own override wins over the block's.
   */
  apply (policy: CompiledPolicy, runs: readonly BlockRun[], keys: readonly string[]): readonly BlockRun[] {
    const entries = this.entries
    if (entries.size === 0) return runs
    let out: BlockRun[] | undefined
    const ids = idsOf(policy)
    for (let i = 0; i < runs.length; i++) {
      const entry = entries.get(keys[i] as string) ?? entries.get(ids[i] as string)
      if (entry === undefined) continue
      const { expiresAt } = entry.record
      if (expiresAt !== null && expiresAt <= this.now()) continue
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
}
