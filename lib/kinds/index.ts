import type { BlockKind, KindName } from './contract.js'
import type { PolicyBlockSummary } from '../types/index.js'
import { concurrencyKind } from './concurrency/kind.js'
import { periodKind } from './period/kind.js'
import { windowKind } from './window/kind.js'
import { BLOCK_DEFAULTS } from '../limits.js'

export { BLOCK_KINDS, type BlockKind, type KindName } from './contract.js'

/** Every kind by its field: a new kind joins here, and the compiler (kinds/policy.ts) reads it. */
export const KINDS: Readonly<Record<KindName, BlockKind>> = {
  window: windowKind,
  period: periodKind,
  concurrency: concurrencyKind
}

/** The startup table's window and burst cells for a policies() row (read back by its public fields): a slot's lease and no burst, a period's unit and zone. */
export function tableCells (row: PolicyBlockSummary): { window: string, burst: string } {
  if (row.period !== undefined) return { window: `${row.period} (${row.timeZone ?? BLOCK_DEFAULTS.timeZone})`, burst: String(row.burst) }
  if (row.algorithm === 'concurrency') return { window: `lease ${row.windowMs}ms${row.waitMs === undefined ? '' : ` wait ${row.waitMs}ms`}`, burst: '' }
  return { window: `${row.windowMs}ms${row.delayMs === undefined ? '' : ` delay ${row.delayMs}ms`}`, burst: String(row.burst) }
}

/** A count or a tier map of counts, as a block declares it, from a row's `limit` and `tiers`. */
function declaredCount (row: PolicyBlockSummary, field: 'limit' | 'burst'): number | Record<string, number> {
  return row.tiers === undefined ? row[field] : Object.fromEntries(Object.entries(row.tiers).map(([tier, counts]) => [tier, counts[field]]))
}

/**
 * The fields of the block a policies() row declares, read back by its public
 * fields (the CLI rebuilds an instance's routes from its published rows,
 * lib/console/cli/): everything its key and its decision depend on, but `by`
 * (the caller reads it) and what a row does not carry (`cost`, `penalty`,
 * `refundOn`, `settle`). `inexact` says why the block's keys may differ from
 * the instance's (none today: every field a key depends on is in the row).
 */
export function declaredBlock (row: PolicyBlockSummary): { fields: Record<string, unknown>, inexact?: string } {
  const common = { name: row.name, mode: row.mode }
  if (row.algorithm === 'concurrency') {
    return { fields: { ...common, concurrency: declaredCount(row, 'limit'), ...(row.waitMs === undefined ? {} : { wait: row.waitMs }) } }
  }
  if (row.period !== undefined) {
    const fields = { ...common, limit: declaredCount(row, 'limit'), period: row.period, timeZone: row.timeZone ?? BLOCK_DEFAULTS.timeZone, ...(row.weekStart === undefined ? {} : { weekStart: row.weekStart }) }
    return { fields }
  }
  const burst = declaredCount(row, 'burst')
  const bursty = JSON.stringify(burst) !== JSON.stringify(declaredCount(row, 'limit'))
  return {
    fields: {
      ...common,
      algorithm: row.algorithm,
      limit: declaredCount(row, 'limit'),
      window: row.windowMs,
      ...(bursty ? { burst } : {}),
      ...(row.delayMs === undefined ? {} : { delay: row.delayMs })
    }
  }
}

/** A concurrency row's lease (ms): the plugin's `lease` its instance runs with; undefined for other kinds. */
export function declaredLease (row: PolicyBlockSummary): number | undefined {
  return row.algorithm === 'concurrency' ? row.windowMs : undefined
}
