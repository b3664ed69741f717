import type { FastifyBaseLogger } from 'fastify'
import type { Runtime } from './contract.js'
import type { Adjustment } from '../store/port.js'
import type { DenyCache } from './deny-cache.js'

/*
 * The one path for usage changed after the fact, units given back among it:
 * refundOn and settle when a request ends (request/end-of-request.ts), the
 * API's adjust (api/api.ts), and whatever gives units back next (shaping's
 * aborts). Everything such a change implies on this instance happens here:
 *
 * - This instance's deny-cache entry of every key units are given back to is
 *   dropped, before the store call (the caller's next request asks the store,
 *   which holds the units again once the call has run) and again after it (a
 *   refusal the store answered before the give-back ran may have been
 *   remembered meanwhile). Other instances' entries run out by themselves
 *   (deny-cache.ts: about a second for quotas).
 * - Counted once per request (or adjust call) and source, when the call
 *   succeeded: `stats()` (`refunded`, `settled`; an adjust call is no
 *   request) and the `rate_limit.usage.changes` counter.
 */

/** What changed usage after the fact: a request's refundOn or settle, or an adjust() call. */
export type UsageSource = 'refund' | 'settle' | 'adjust'

/** One store call that changes usage: its entries, the sources they came from, the route (or `api <target>`) for metrics, and where a failing meter is logged. */
export interface UsageChange {
  route: string
  log: FastifyBaseLogger
  sources: readonly UsageSource[]
  entries: readonly Adjustment[]
}

/** Drops the deny-cache entry of every key that units are given back to. */
function forgetRefusals (denyCache: DenyCache | undefined, entries: readonly Adjustment[]): void {
  if (denyCache === undefined) return
  for (const entry of entries) if (entry.kind === 'units' && entry.units < 0) denyCache.delete(entry.key)
}

/** Sends the change in one store call (rejects when it fails), clears the deny cache of what it gives back, and counts it. */
export async function changeUsage (runtime: Runtime, change: UsageChange): Promise<boolean[]> {
  const { entries } = change
  forgetRefusals(runtime.denyCache, entries)
  const changed = await runtime.store.adjust(entries)
  forgetRefusals(runtime.denyCache, entries)
  for (const source of change.sources) {
    if (source === 'refund') runtime.stats.refunded++
    else if (source === 'settle') runtime.stats.settled++
  }
  count(runtime, change)
  return changed
}

/** The metric, after the change was made (instruments are isolated where loadMetrics makes them). */
function count (runtime: Runtime, change: UsageChange): void {
  const metrics = runtime.metrics
  if (metrics === undefined) return
  for (const source of change.sources) metrics.usageChange(change.route, source)
}
