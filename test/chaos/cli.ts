/**
 * npm run chaos -- --seed S [--seed S2 …]   replays seeds (the same schedules)
 * npm run chaos -- --minutes M              runs new seeds for M minutes
 * npm run chaos -- … --slack MS             time-bound slack (default: strict, 150 ms)
 * Run it alone on the machine: its time bounds are strict. Exit code 1 on any violation.
 */
import { randomInt } from 'node:crypto'
import { runSeed, SLACK } from './report.js'

const args = process.argv.slice(2)
const seeds: number[] = []
let minutes = 0
let slack: number = SLACK.alone
for (let i = 0; i < args.length; i++) {
  const arg = args[i]
  const value = args[i + 1]
  if (arg === '--seed' && value !== undefined) { seeds.push(...value.split(',').map(Number)); i++ } else if (arg === '--minutes' && value !== undefined) { minutes = Number(value); i++ } else if (arg === '--slack' && value !== undefined) { slack = Number(value); i++ } else {
    process.stderr.write(`unknown argument ${arg ?? ''}\nusage: npm run chaos -- (--seed S | --minutes M) [--slack MS]\n`)
    process.exit(2)
  }
}
if (seeds.length === 0 && minutes <= 0) minutes = 1

const deadline = Date.now() + minutes * 60_000
let failed = 0
let ran = 0
const next = (): number | undefined => seeds.length > 0 ? seeds.shift() : Date.now() < deadline ? randomInt(1, 2 ** 31) : undefined
for (let seed = next(); seed !== undefined; seed = next()) {
  const result = await runSeed(seed, slack)
  ran++
  const counts = result.run.clients.length
  if (result.violations.length === 0) process.stdout.write(`seed ${seed}: ok (${counts} requests, ${result.run.faults.map((f) => f.fault.kind).join(', ')})\n`)
  else {
    failed++
    process.stdout.write(result.report + '\n')
  }
}
process.stdout.write(`${ran} schedules, ${failed} with violations\n`)
process.exit(failed > 0 ? 1 : 0)
