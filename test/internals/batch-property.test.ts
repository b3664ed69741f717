/**
 * Property test of the batch script against the memory store (the reference
 * model): random routes of 1 to 3 blocks (any algorithm, shadow or not, with
 * or without a penalty), and random steps, each step sending 1 to 4 decisions
 * (charges, peeks, refunds and signed adjustments that may overdraw a block,
 * on overlapping keys) in one event-loop turn, so
 * they leave as one script call and run in order inside it. Every decision
 * must give the same numbers on both sides, penalties included.
 *
 * Some fixed-window blocks count over periods of uneven lengths whose
 * boundaries Node computes with a clock skewed by up to 2 s (as calendar
 * periods do): both sides must pick the same period by the shared clock.
 *
 * Both stores read the same injected clock. Windows and penalties are at
 * least 5 s, so no key expires by Redis's real clock during a scenario (each
 * takes well under a second), while the injected clock jumps far enough to
 * reach stale state, which every algorithm and the penalty treat as absent.
 */
import { test } from 'tap'
import fc from 'fast-check'
import { ALGORITHMS, type RawDecision } from '../../lib/store/algorithms.js'
import { MemoryStore } from '../../lib/store/memory/store.js'
import type { Adjustment, BlockRun, DecideMode } from '../../lib/store/port.js'
import type { Boundaries, PeriodBoundaries } from '../../lib/kinds/period/calendar.js'
import { setupModelStore, storeRequest, testRun } from '../helpers/app.js'

const NUM_RUNS = Number(process.env.PROPERTY_RUNS ?? 100)

const penalty = fc.option(fc.record({
  after: fc.integer({ min: 1, max: 3 }),
  forMs: fc.integer({ min: 5000, max: 30_000 }),
  backoff: fc.constantFrom(1, 1.5, 2, 3),
  extra: fc.integer({ min: 0, max: 60_000 })
}), { nil: undefined })

const block = fc.record({
  algorithm: fc.constantFrom(...ALGORITHMS),
  limit: fc.integer({ min: 1, max: 5 }),
  windowMs: fc.integer({ min: 5000, max: 20_000 }),
  shadow: fc.boolean(),
  penalty,
  // A fixed-window over periods of uneven lengths, whose boundaries Node computes with a skewed clock.
  periodSkew: fc.option(fc.integer({ min: -2000, max: 2000 }), { nil: undefined })
})

/** Periods of 7, 11 and 13 s in turn from `origin`: boundaries around `now() + skew`, as CalendarPeriod gives them. */
function unevenPeriods (origin: number, now: () => number, skew: number): PeriodBoundaries {
  const lengths = [7000, 11_000, 13_000]
  const startOf = (n: number): number => {
    let at = origin
    for (let i = 0; i < n; i++) at += lengths[i % 3] as number
    return at
  }
  const bounds = (): Boundaries => {
    let n = 1
    while (startOf(n + 1) <= now() + skew) n++
    return [startOf(n - 1), startOf(n), startOf(n + 1), startOf(n + 2)]
  }
  return { bounds, arg: () => bounds().join(':'), lengthMs: () => bounds()[2] - bounds()[1] }
}

const decision = fc.record({
  kind: fc.constantFrom<'charge' | 'peek' | 'refund' | 'adjust'>('charge', 'charge', 'charge', 'peek', 'refund', 'adjust'),
  identity: fc.integer({ min: 0, max: 1 }),
  costs: fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 3, maxLength: 3 }),
  // signed adjustments (settle, adjust): charges past the limit (overdrafts) and give-backs,
  // of units charged `elapsed` ms ago (none: adjust()'s change, made now)
  units: fc.array(fc.integer({ min: -4, max: 6 }), { minLength: 3, maxLength: 3 }),
  elapsed: fc.option(fc.integer({ min: 0, max: 10_000 }), { nil: undefined, freq: 4 })
})

/** Per block a signed change of usage, of units charged at `chargedAt` (refundOn's entries: minus each cost). */
function adjustments (runs: readonly BlockRun[], keys: readonly string[], units: readonly number[], chargedAt: number | undefined): Adjustment[] {
  return runs.map((run, i): Adjustment => ({ kind: 'units', run, key: keys[i] as string, units: units[i] as number, chargedAt }))
}

/** What a refund or adjust step sends at `now`. */
function entriesOf (d: { kind: string, costs: number[], units: number[], elapsed: number | undefined }, runs: readonly BlockRun[], keys: readonly string[], now: number): Adjustment[] {
  const units = d.kind === 'refund' ? d.costs.slice(0, runs.length).map((cost) => -cost) : d.units.slice(0, runs.length)
  return adjustments(runs, keys, units, d.elapsed === undefined ? undefined : now - d.elapsed)
}

const scenario = fc.record({
  blocks: fc.array(block, { minLength: 1, maxLength: 3 }),
  steps: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 25_000 }), decisions: fc.array(decision, { minLength: 1, maxLength: 4 }) }), { minLength: 1, maxLength: 25 })
})

test('property: the batch script decides like the memory store, penalties included', async (t) => {
  const { redisStore, clock, prefix } = await setupModelStore(t, 'bp')

  let run = 0
  let penalized = 0
  let forced = 0
  let batched = 0
  let periods = 0
  await fc.assert(fc.asyncProperty(scenario, async ({ blocks, steps }) => {
    run++
    const model = new MemoryStore(clock.read)
    const origin = clock.now - 20_000
    const runs: BlockRun[] = blocks.map((b) => {
      const built = testRun({
        ...b,
        algorithm: b.periodSkew === undefined ? b.algorithm : 'fixed-window',
        penalty: b.penalty === undefined
          ? undefined
          : { after: b.penalty.after, forMs: b.penalty.forMs, backoff: b.penalty.backoff, maxMs: b.penalty.forMs + b.penalty.extra, arg: `${b.penalty.after}:${b.penalty.forMs}:${b.penalty.backoff}:${b.penalty.forMs + b.penalty.extra}` }
      })
      if (b.periodSkew !== undefined) {
        built.period = unevenPeriods(origin, clock.read, b.periodSkew)
        periods++
      }
      return built
    })
    try {
      for (const [s, step] of steps.entries()) {
        clock.advance(step.dt)
        const keysOf = (identity: number): string[] => runs.map((_, i) => `${prefix}:{r${run}|${identity}}:${i}`)
        // One turn: every decision of the step is enqueued before the batch leaves.
        const pending = step.decisions.map(async (d) => {
          const keys = keysOf(d.identity)
          const costs = d.costs.slice(0, runs.length)
          if (d.kind === 'refund' || d.kind === 'adjust') return await redisStore.adjust(entriesOf(d, runs, keys, clock.now))
          const decided = await redisStore.decide(storeRequest(runs, keys, costs), d.kind as DecideMode)
          // the script's now comes back with its call
          if (decided.at !== clock.now) throw new Error(`run ${run} step ${s}: the call replied now ${decided.at}, sent ${clock.now}`)
          return decided.decisions
        })
        const actual = await Promise.all(pending)
        if (step.decisions.length > 1) batched++
        step.decisions.forEach((d, j) => {
          const keys = keysOf(d.identity)
          const costs = d.costs.slice(0, runs.length)
          const expected = d.kind === 'refund' || d.kind === 'adjust'
            ? model.adjustNow(entriesOf(d, runs, keys, clock.now))
            : model.decideNow(storeRequest(runs, keys, costs), d.kind as DecideMode)
          const got = actual[j]
          const normal = (list: unknown): unknown => Array.isArray(list) ? list.map((x) => typeof x === 'object' && x !== null ? { ...(x as RawDecision), penalized: (x as RawDecision).penalized === true } : x) : list
          if (JSON.stringify(normal(got)) !== JSON.stringify(normal(expected))) {
            throw new Error(`run ${run} step ${s} decision ${j} (${d.kind}): lua ${JSON.stringify(got)} model ${JSON.stringify(expected)}`)
          }
          if (Array.isArray(expected) && expected.some((x) => typeof x === 'object' && x.penalized === true)) penalized++
          if (d.kind === 'adjust') forced += (expected as boolean[]).filter((changed, i) => changed && (d.units[i] as number) > 0).length
        })
      }
    } finally {
      model.close()
    }
  }), { numRuns: NUM_RUNS })
  // A health check of the generator, not a tally to hit: over 100 runs penalties trigger 47–124 times (19 runs
  // counted), so at > 50 one CI run in ten failed by chance; fewer than 25 means the scenarios stopped reaching them.
  t.ok(penalized > 25, `${penalized} penalized decisions agreed`)
  t.ok(forced > 100, `${forced} charges without a decision (overdrafts included) agreed`)
  t.ok(batched > 100, `${batched} steps sent several decisions in one script call`)
  t.ok(periods > 50, `${periods} blocks counted over skewed calendar-like periods`)
})
