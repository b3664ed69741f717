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
