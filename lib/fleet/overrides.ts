import type { FastifyBaseLogger } from 'fastify'
import { blockId } from '../keys/layout.js'
import type { CompiledBlock, CompiledPolicy } from '../policy/policy.js'
import { runAtLimit } from '../policy/run.js'
import type { AuditTrail, BlockRun, RecordHash } from '../store/port.js'
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
  constructor (records: RecordHash, log: FastifyBaseLogger, audit?: AuditTrail) {
    super(records, log, { noun: 'override', parse, entry: (record, json) => ({ record, json, runs: new WeakMap() }) }, audit)
  }

  /**
   * The blocks a request decides with: `blocks` itself while no override
   * matches (so the precompiled header strings apply), else a copy whose
   * overridden blocks are copies with the overridden run. A caller's own
   * override wins over the block's.
   */
  apply<B extends { compiled: CompiledBlock, run: BlockRun, key: string }> (policy: CompiledPolicy, blocks: readonly B[]): readonly B[] {
    const entries = this.entries
    if (entries.size === 0) return blocks
    let out: B[] | undefined
    const ids = idsOf(policy)
    for (const [i, block] of blocks.entries()) {
      const entry = entries.get(block.key) ?? entries.get(ids[i] ?? '')
      if (entry === undefined) continue
      const { expiresAt } = entry.record
      if (expiresAt !== null && expiresAt <= this.now()) continue
      const base = block.run
      let run = entry.runs.get(base)
      if (run === undefined) {
        run = runAtLimit(block.compiled.runSpec, base, entry.record.limit, 'equal-follows')
        entry.runs.set(base, run)
      }
      out ??= [...blocks]
      out[i] = { ...block, run }
    }
    return out ?? blocks
  }
}
