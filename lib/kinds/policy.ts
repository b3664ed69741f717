import { DEFAULT_LEASE_MS } from '../limits.js'
import { concurrencyShape } from './concurrency/policy.js'
import { BLOCK_KINDS, type KindName } from './contract.js'
import { KINDS } from './index.js'
import { readPeriodCounting } from './period/policy.js'
import { readWindowCounting } from './window/policy.js'
import { delayedWindowKind } from './window/kind.js'
import type { Fail } from '../policy/block-fields.js'
import { rateShape, type Shape } from '../policy/shape.js'
import { item } from '../util/item.js'

/*
 * The compiler's side of the kinds: which kind a block declares, and each
 * kind's reader of its fields. A new kind joins BLOCK_KINDS, KINDS and SHAPES.
 */

/** The block's kind; a block with none is a window block (whose own error says what is missing). */
export function readKind (input: Record<string, unknown>, fail: Fail): KindName {
  const given = BLOCK_KINDS.filter((field) => input[field] !== undefined)
  if (given.length > 1) {
    fail(item(given, 1), `cannot be combined with ${item(given, 0)}: a block has exactly one of ${BLOCK_KINDS.join(', ')}`)
  }
  if (given[0] !== undefined && given[0] !== 'window' && input.delay !== undefined) {
    const instead = given[0] === 'concurrency' ? '; a concurrency block waits for a free slot with `wait`' : ''
    fail('delay', `only applies to a gcra or token-bucket block with window (this block has ${given[0]})${instead}`)
  }
  if (given[0] !== 'concurrency' && input.wait !== undefined) {
    fail('wait', 'only applies to a concurrency block (a request waits for a free slot); a gcra or token-bucket block waits for its turn with `delay`')
  }
  if (given[0] !== 'period') {
    for (const field of ['timeZone', 'weekStart']) {
      if (input[field] !== undefined) fail(field, 'only applies to a block with period (a window is a duration aligned to the epoch)')
    }
  }
  return given[0] ?? 'window'
}

interface ShapeContext { periodNow: () => number, leaseMs: number }

const SHAPES: Readonly<Record<KindName, (input: Record<string, unknown>, fail: Fail, context: ShapeContext) => Shape>> = {
  window: (input, fail) => {
    const counting = readWindowCounting(input, fail)
    return rateShape(counting.delayMs === undefined ? KINDS.window : delayedWindowKind, counting, input, fail)
  },
  period: (input, fail, { periodNow }) => rateShape(KINDS.period, readPeriodCounting(input, fail, periodNow), input, fail),
  concurrency: (input, fail, { leaseMs }) => concurrencyShape(KINDS.concurrency, input, leaseMs, fail)
}

/** A block's numbers, read by its kind. `periodNow` is the clock Node computes calendar boundaries with. */
export function readShape (input: Record<string, unknown>, fail: Fail, periodNow: () => number = Date.now, leaseMs = DEFAULT_LEASE_MS): Shape {
  return SHAPES[readKind(input, fail)](input, fail, { periodNow, leaseMs })
}
