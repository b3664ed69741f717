import type { AlgorithmName } from '../lib/index.js'
import { EVALSHA_TARGET_US, FULL_BATCH, type BatchBench } from './batches.js'
import { OVERLOAD_LIMIT } from './configs.js'
import type { LoadTool } from './load.js'
import { eachRound, fmt, isOverload, okRuns, ratio, statsOf, type Row } from './report.js'

/*
 * Issue 17's targets with what this run measured, and a verdict only where
 * the run may be quoted: a full run (not --quick) of at least 3 rounds at 50
 * connections whose every contributing run passed the quiet gate and stayed
 * within --max-other. Anything else shows the figure and says why no verdict.
 */

export interface TargetInput {
  /** The HTTP rows, or undefined when the run had no HTTP part. */
  rows: Row[] | undefined
  /** The full-batch script figures, or undefined when the run had no script part. */
  batches: BatchBench | undefined
  /** Why the script benchmark may not be quoted, or undefined. */
  batchesNotQuotable: string | undefined
  tool: LoadTool
  rounds: number
  connections: number
  quick: boolean
}

const DEFAULT_ID = 'sliding-window-10k'
const TARGET_ROUNDS = 3
const TARGET_CONNECTIONS = 50

function verdict (value: number, ok: (value: number) => boolean, blocker: string | undefined): string {
  if (!Number.isFinite(value)) return 'n/a (not measured)'
  if (blocker !== undefined) return `not stated: ${blocker}`
  return ok(value) ? 'yes' : '**no**'
}

/** Why the HTTP rows `ids` give no verdict (every reason), or undefined when they may. */
function httpBlocker (input: TargetInput, ids: string[]): string | undefined {
  const reasons: string[] = []
  if (input.quick) reasons.push('--quick smoke run')
  if (input.rounds < TARGET_ROUNDS) reasons.push(`${input.rounds} round(s), the targets are medians of ${TARGET_ROUNDS}`)
  const rows = (input.rows ?? []).filter((row) => ids.includes(row.config.id))
  const open = rows.reduce((sum, row) => sum + row.measured - row.quotable, 0)
  if (open > 0) reasons.push(`${open} of ${rows.reduce((sum, row) => sum + row.measured, 0)} runs not quotable (see Run conditions)`)
  return reasons.length === 0 ? undefined : reasons.join('; ')
}

function batchBlocker (input: TargetInput, algorithm: AlgorithmName): string | undefined {
  const reasons: string[] = []
  if (input.quick) reasons.push('--quick smoke run')
  if (input.batchesNotQuotable !== undefined) reasons.push(`the script benchmark ${input.batchesNotQuotable}`)
  const row = input.batches?.algorithms.find((candidate) => candidate.algorithm === algorithm)
  if (row !== undefined && (row.decisionsPerCall < FULL_BATCH - 0.5 || row.degraded > 0 || row.allowed !== row.decisions)) reasons.push('batches not full, or decisions refused or degraded')
  return reasons.length === 0 ? undefined : reasons.join('; ')
}

function httpTargets (input: TargetInput): string[] {
  const byId = new Map((input.rows ?? []).map((row) => [row.config.id, row]))
  const sw = byId.get(DEFAULT_ID)
  const frl = byId.get('frl')
  const nan = Number.NaN
  // The connection count is part of the target; another one measures something else.
  const wrongConnections = input.connections !== TARGET_CONNECTIONS ? `${input.connections} connections, the targets are for ${TARGET_CONNECTIONS}` : undefined
  const block = (ids: string[]): string | undefined => [wrongConnections, httpBlocker(input, ids)].filter((reason) => reason !== undefined).join('; ') || undefined
  const lines = [
    `| Redis CPU per decision ≤ 0.5× @fastify/rate-limit's | ${ratio(sw?.redisVsFrl ?? nan)} (${fmt(sw?.redisUs ?? nan, 2)} against ${fmt(frl?.redisUs ?? nan, 2)} µs) | ${verdict(sw?.redisVsFrl ?? nan, (v) => v <= 0.5, block([DEFAULT_ID, 'frl']))} |`,
    `| Node CPU over bare ≤ 3 µs per request | ${fmt(sw?.nodeOverUs ?? nan, 1)} µs (@fastify/rate-limit: ${fmt(frl?.nodeOverUs ?? nan, 1)}) | ${verdict(sw?.nodeOverUs ?? nan, (v) => v <= 3, block([DEFAULT_ID, 'bare']))} |`,
    `| Throughput ≥ 0.75× bare Fastify (${input.tool}) | ${ratio(sw?.vsBare ?? nan)} | ${verdict(sw?.vsBare ?? nan, (v) => v >= 0.75, block([DEFAULT_ID, 'bare']))} |`
  ]
  for (const [tool, min] of [['wrk', 1.25], ['autocannon', 1.15]] as const) {
    const value = input.tool === tool ? sw?.vsFrl ?? nan : nan
    const measured = input.tool === tool ? ratio(value) : `not measured (this run used ${input.tool}; run again with \`--load ${tool}\`)`
    lines.push(`| Throughput ≥ ${min.toFixed(2)}× @fastify/rate-limit with ${tool} | ${measured} | ${verdict(value, (v) => v >= min, block([DEFAULT_ID, 'frl']))} |`)
  }
  return lines
}

function batchTargets (input: TargetInput): string[] {
  return (Object.keys(EVALSHA_TARGET_US) as AlgorithmName[]).map((algorithm) => {
    const max = EVALSHA_TARGET_US[algorithm]
    const value = input.batches?.algorithms.find((row) => row.algorithm === algorithm)?.evalUsPerDecision ?? Number.NaN
    return `| script call (FCALL) per decision in full batches, ${algorithm} ≤ ${max.toFixed(1)} µs | ${Number.isFinite(value) ? `${value.toFixed(2)} µs` : '–'} | ${verdict(value, (v) => v <= max, batchBlocker(input, algorithm))} |`
  })
}

/** Earlier issues' behaviour checks (overload exactness, the deny cache): still facts of the run, under the same quotability rule. */
function checks (input: TargetInput): string[] {
  const rows = input.rows ?? []
  const lines: string[] = []
  for (const row of rows) {
    if (!isOverload(row) || row.unsupported !== undefined) continue
    const runs = okRuns(row)
    const exact = runs.every((run) => statsOf(run).allowed === OVERLOAD_LIMIT && statsOf(run).degraded === 0 && (run.statusCodes['200'] ?? 0) === OVERLOAD_LIMIT)
    lines.push(`| 11 | ${row.config.label}: exactly ${OVERLOAD_LIMIT} admitted, 0 degraded | admitted ${eachRound(row, (r) => statsOf(r).allowed)}; degraded ${eachRound(row, (r) => statsOf(r).degraded)} | ` +
      `${verdict(runs.length > 0 ? Number(exact) : Number.NaN, (v) => v === 1, httpBlocker(input, [row.config.id]))} |`)
  }
  const flood = rows.find((row) => row.config.id === 'flood-cache')
  if (flood !== undefined) {
    const value = flood.unsupported === undefined ? flood.vsBare : Number.NaN
    lines.push(`| 6 | flood, deny cache on: ≥ 0.95× bare | ${flood.unsupported === undefined ? ratio(flood.vsBare) : 'n/a (no deny cache in the plugin)'} | ${verdict(value, (v) => v >= 0.95, httpBlocker(input, ['flood-cache', 'bare']))} |`)
    const commands = flood.unsupported === undefined ? flood.cmdsPerReq : Number.NaN
    lines.push(`| 6 | flood, deny cache on: zero Redis commands | ${fmt(commands, 4)} per request | ${verdict(commands, (v) => v === 0, httpBlocker(input, ['flood-cache']))} |`)
  }
  return lines
}

/** The Targets section: issue 17's targets, then the earlier issues' checks. */
export function targetsMarkdown (input: TargetInput): string {
  const out = [
    '### Targets (issue 17)',
    '',
    `50 connections, 10k keys, default options (\`${DEFAULT_ID}\`), medians of ${TARGET_ROUNDS} interleaved rounds, quiet machine; the script call's µs (FCALL) from the full-batch script benchmark. ` +
      'A verdict is stated only from a full run whose every contributing run started below the load threshold and stayed within --max-other; otherwise "not stated" says why.',
    '',
    '| target | measured | met |',
    '| --- | --- | --- |',
    ...httpTargets(input),
    ...batchTargets(input),
    ''
  ]
  const earlier = checks(input)
  if (earlier.length > 0) out.push('### Checks from earlier issues', '', '| issue | check | measured | met |', '| --- | --- | --- | --- |', ...earlier, '')
  return out.join('\n')
}
