import type { FastifyBaseLogger } from 'fastify'
import type { DecisionInput, Runtime } from './contract.js'
import type { RawDecision } from '../store/algorithms.js'
import type { Adjustment, BlockRun } from '../store/port.js'
import type { DenyCache } from './deny-cache.js'
import type { UsageChangeSource } from '../diagnostics.js'

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

/** What changed usage after the fact: a request's refundOn or settle, an adjust() call, or a held request whose client left. */
export type UsageSource = UsageChangeSource

/** One store call that changes usage: its entries, the sources they came from, the route (or `api <target>`) for metrics, and where a failing meter is logged. */
export interface UsageChange {
  route: string
  log: FastifyBaseLogger
  sources: readonly UsageSource[]
  entries: readonly Adjustment[]
}

/** The time a units change of a block's run sends with: its kind's mark of the charge at `chargedAt` (a delay's gcra turn), on the store's clock. */
export function chargeTimeOf (run: BlockRun, decision: RawDecision | undefined, chargedAt: number | undefined): number | undefined {
  return chargedAt === undefined || decision === undefined ? chargedAt : run.kind.chargeMark(run, decision, chargedAt)
}

/**
 * A held request (or schedule() call) that ended before its turn: every block
 * that charged it gives the units back (docs/shaping.md: a gcra turn only
 * while it is the latest reserved, a token bucket's always).
 */
export function unitsBack (input: DecisionInput, decisions: ReadonlyArray<RawDecision | undefined>, chargedAt: number | undefined): Adjustment[] {
  const out: Adjustment[] = []
  for (const [i, { run, key, cost }] of input.blocks.entries()) {
    const decision = decisions[i]
    if (decision?.allowed !== true || cost <= 0) continue
    out.push({ kind: 'units', run, key, units: -cost, chargedAt: chargeTimeOf(run, decision, chargedAt) })
  }
  return out
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
    else if (source === 'abort') runtime.stats.delayAborted++
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
