import { MAX_CONCURRENCY, MAX_WAIT_MS } from '../../limits.js'
import { parseWindow } from '../../policy/duration.js'
import { readCounts, type Fail } from '../../policy/block-fields.js'
import type { Shape } from '../../policy/shape.js'
import { CONCURRENCY_NUMBER } from '../../store/algorithms.js'
import type { BlockKind } from '../contract.js'

/*
 * Concurrency blocks: `concurrency: N` (or a tier map) in place of
 * `limit`/`window`: at most N requests of one identity in flight across the
 * fleet. A block kind, not an algorithm: its run is a set of leased slots
 * (scripts/concurrency.lua), decided with the route's other blocks in one call.
 */

/** Fields a concurrency block refuses, and why (a slot is one request in flight, for as long as it runs). */
const NOT_FOR_SLOTS: Record<string, string> = {
  limit: 'is not used by a concurrency block (`concurrency` is its number of requests in flight)',
  algorithm: 'is not used by a concurrency block (it counts requests in flight, not a rate)',
  burst: 'is not used by a concurrency block (it counts requests in flight, not a rate)',
  cost: 'is not supported by a concurrency block (each request in flight holds one slot)',
  penalty: 'is not supported by a concurrency block (a refused request took no slot, so there is no offence to count)',
  refundOn: 'is not supported by a concurrency block (its slot is given back when the response closes, whatever the reply)',
  requestLimit: 'is not supported by a concurrency block (declare a tier map in `concurrency` instead)',
  settle: 'is not supported by a concurrency block (a slot is released when the response closes; there is no usage to settle)'
}

/** A concurrency block's fields that only rate blocks take: the first one is a startup error naming it. */
export function checkSlotFields (input: Record<string, unknown>, fail: Fail): void {
  for (const [field, why] of Object.entries(NOT_FOR_SLOTS)) {
    if (input[field] !== undefined) fail(field, why)
  }
}

/** A concurrency block's `wait` (ms), undefined without one: how long a request may wait for a free slot. */
function readWait (input: Record<string, unknown>, fail: Fail): number | undefined {
  if (input.wait === undefined) return undefined
  const waitMs = parseWindow(input.wait, MAX_WAIT_MS)
  if (typeof waitMs === 'string') return fail('wait', waitMs)
  return waitMs
}

/** The shape of a concurrency block: N slots per tier, leased for `leaseMs` (the plugin's `lease`); its `wait` travels as the shape's delayMs. */
export function concurrencyShape (kind: BlockKind, input: Record<string, unknown>, leaseMs: number, fail: Fail): Shape {
  checkSlotFields(input, fail)
  const limits = readCounts(input.concurrency, 'concurrency', MAX_CONCURRENCY, String(MAX_CONCURRENCY), fail)
  const named = limits.map(([tier]) => tier).filter((tier) => tier !== undefined)
  return { kind, algorithm: 'concurrency', algorithmNumber: CONCURRENCY_NUMBER, bursty: false, maxLimit: MAX_CONCURRENCY, windowMs: leaseMs, period: undefined, delayMs: readWait(input, fail), limits, bursts: undefined, tierNames: named.length > 0 ? named : [undefined] }
}
