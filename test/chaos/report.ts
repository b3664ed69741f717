/** One seed end to end: generate, run, check, and the report a violation prints. */
import { check, type Violation } from './checker.js'
import { runSchedule, type Run } from './runner.js'
import { describe, generate } from './schedule.js'

export interface SeedResult {
  seed: number
  run: Run
  violations: Violation[]
  /** The seed, its schedule, the replay command and every violation (empty when none). */
  report: string
}

/** Slack added to every request's time bound: generous beside other work (npm test), small when the suite runs alone. */
export const SLACK = { shared: 1500, alone: 150 } as const

export async function runSeed (seed: number, timeSlackMs: number): Promise<SeedResult> {
  const schedule = generate(seed)
  const run = await runSchedule(schedule)
  const violations = check(run, { timeSlackMs })
  const lines: string[] = []
  if (violations.length > 0) {
    lines.push(`chaos: ${violations.length} violation(s)`, describe(schedule))
    for (const fault of run.faults) if (fault.note !== undefined) lines.push(`  note: ${fault.fault.kind} at +${fault.fault.at}: ${fault.note}`)
    for (const line of storeErrorLines(run)) lines.push(line)
    const shown = new Map<string, number>()
    for (const v of violations) {
      const n = (shown.get(v.invariant) ?? 0) + 1
      shown.set(v.invariant, n)
      if (n <= 5) lines.push(`  VIOLATION ${v.invariant}${v.kind === 'time' ? ' (time)' : ''}: ${v.detail}`)
    }
    for (const [invariant, n] of shown) if (n > 5) lines.push(`  … ${n - 5} more ${invariant}`)
    lines.push(`  replay: npm run chaos -- --seed ${seed}`)
  }
  return { seed, run, violations, report: lines.join('\n') }
}

/** The store errors the instances saw, with times relative to the schedule's start. */
function storeErrorLines (run: Run): string[] {
  return run.storeErrors.map((line) => '  store error: ' + line.replace(/ at (\d+):/, (_m, at: string) => ` at +${Number(at) - run.start} ms:`))
}

/** The tap tests of a list of fixed seeds: any state violation fails its seed, with the report as the message. */
export function testSeeds (t: { test: (name: string, fn: (t: SeedTest) => Promise<void>) => unknown }, seeds: readonly number[]): void {
  for (const seed of seeds) {
    t.test(`chaos seed ${seed}`, async (t) => {
      const result = await runSeed(seed, SLACK.shared)
      const state = result.violations.filter((v) => v.kind === 'state')
      t.ok(result.run.clients.length > 100, `${result.run.clients.length} requests sent`)
      t.equal(state.length, 0, state.length === 0 ? 'no state violation' : result.report)
    })
  }
}

interface SeedTest {
  ok: (value: unknown, message: string) => void
  equal: (a: unknown, b: unknown, message: string) => void
}
