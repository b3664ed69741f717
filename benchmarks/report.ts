import type { BenchConfig } from './configs.js'
import { median } from './common.js'
import type { RunResult } from './http.js'

/*
 * The HTTP tables of a run's markdown: medians over rounds per configuration
 * (ratios taken within a round, then the median), the overload counts per
 * round, batch sizes, maxBatch, and the conditions of every run (the load
 * average at its start and end, other CPU, whether it may be quoted).
 */

export const fmt = (value: number, digits = 0): string => Number.isFinite(value) ? value.toFixed(digits) : '–'
export const ratio = (value: number): string => Number.isFinite(value) ? value.toFixed(2) + '×' : '–'

export interface Row {
  config: BenchConfig
  runs: RunResult[]
  unsupported: string | undefined
  rps: number
  vsBare: number
  vsFrl: number
  p50: number
  p99: number
  nodeUs: number
  nodeOverUs: number
  nodeOverFrlUs: number
  redisUs: number
  /** Redis CPU per decision ÷ @fastify/rate-limit's, within a round. */
  redisVsFrl: number
  evalUs: number
  perCall: number
  calls: number
  cmdsPerReq: number
  non2xx: number
  serverCpu: number
  genCpu: number
  otherCpu: number
  /** Runs with figures, and how many of them may be quoted (quiet gate passed, other CPU within --max-other). */
  measured: number
  quotable: number
}

interface Distribution { count: number, mean: number, p50: number, p90: number, p99: number, max: number }
interface OverloadStats { allowed?: number, limited?: number, degraded?: number, batchSize?: Distribution, storeLatencyMs?: Distribution }

export const statsOf = (run: RunResult): OverloadStats => (run.pluginStats ?? {}) as OverloadStats
export const okRuns = (row: Row): RunResult[] => row.runs.filter((r) => r.unsupported === undefined)
export const isOverload = (row: Row): boolean => row.config.load === 'overload'

/** Every round's value, comma-separated (the overload counts are shown per round, not as a median). */
export const eachRound = (row: Row, pick: (run: RunResult) => number | undefined): string => okRuns(row).map((run) => { const v = pick(run); return v === undefined ? '?' : fmt(v) }).join(', ')

export function summarise (configs: BenchConfig[], results: RunResult[]): Row[] {
  const inRound = (id: string, round: number): RunResult | undefined => results.find((r) => r.id === id && r.round === round && r.unsupported === undefined)
  return configs.map((config) => {
    const runs = results.filter((r) => r.id === config.id)
    const ok = runs.filter((r) => r.unsupported === undefined)
    const per = (pick: (r: RunResult) => number): number => median(ok.map(pick))
    const against = (baseId: string, pick: (r: RunResult, base: RunResult) => number): number =>
      median(ok.map((r) => { const base = inRound(baseId, r.round); return base === undefined ? Number.NaN : pick(r, base) }))
    return {
      config,
      runs,
      unsupported: ok.length === 0 ? runs[0]?.unsupported : undefined,
      rps: per((r) => r.rps),
      vsBare: against('bare', (r, b) => r.rps / b.rps),
      vsFrl: against('frl', (r, b) => r.rps / b.rps),
      p50: per((r) => r.p50),
      p99: per((r) => r.p99),
      nodeUs: per((r) => r.nodeCpuUsPerReq),
      nodeOverUs: against('bare', (r, b) => r.nodeCpuUsPerReq - b.nodeCpuUsPerReq),
      nodeOverFrlUs: against('frl', (r, b) => r.nodeCpuUsPerReq - b.nodeCpuUsPerReq),
      redisUs: per((r) => r.redisCpuUsPerDecision),
      redisVsFrl: against('frl', (r, b) => r.redisCpuUsPerDecision / b.redisCpuUsPerDecision),
      evalUs: per((r) => r.evalUsecPerDecision),
      perCall: per((r) => r.decisionsPerCall),
      calls: per((r) => r.callsPerDecision),
      cmdsPerReq: per((r) => r.redisCommands / r.responses),
      non2xx: ok.reduce((sum, r) => sum + r.non2xx + r.errors, 0),
      serverCpu: per((r) => r.serverCpuPercent),
      genCpu: per((r) => r.generatorCpuPercent),
      otherCpu: per((r) => r.otherCpuPercent),
      measured: ok.length,
      quotable: ok.filter((r) => r.notQuotable === undefined).length
    }
  })
}

/** Load averages of a row's runs at their start, e.g. `0.8–1.3`. */
function loadRange (row: Row, pick: (run: RunResult) => number): string {
  const values = okRuns(row).map(pick).filter(Number.isFinite).sort((a, b) => a - b)
  if (values.length === 0) return '–'
  const [low, high] = [values[0] as number, values.at(-1) as number]
  return low === high ? low.toFixed(2) : `${low.toFixed(2)}–${high.toFixed(2)}`
}

/** `3/3`, or `**1/3**` when some runs may not be quoted. */
const quotableCell = (row: Row): string => row.quotable === row.measured ? `${row.quotable}/${row.measured}` : `**${row.quotable}/${row.measured}**`

export function httpTable (rows: Row[]): string {
  const lines = [
    '| configuration | req/s | × bare | × @fastify/rate-limit | p50 ms | p99 ms | Node CPU µs/req | Node µs over bare | Redis CPU µs/decision | script µs/decision (FCALL, EVALSHA: cmdstat) | decisions/script call | redis.call/decision | Redis cmds/req | non-2xx+errors | server CPU % | load-gen CPU % | other CPU % | load 1m at start | load 1m at end | quotable runs |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows) {
    if (row.unsupported !== undefined) {
      lines.push(`| ${row.config.label} | n/a | n/a | n/a | | | | | | | | | | | | | | | | |`)
      continue
    }
    lines.push(`| ${row.config.label} | ${fmt(row.rps)} | ${ratio(row.vsBare)} | ${ratio(row.vsFrl)} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.nodeUs, 1)} | ${row.config.id === 'bare' ? '–' : fmt(row.nodeOverUs, 1)} | ${fmt(row.redisUs, 1)} | ${fmt(row.evalUs, 1)} | ${fmt(row.perCall, 1)} | ${fmt(row.calls, 2)} | ${fmt(row.cmdsPerReq, 2)} | ${row.non2xx} | ${fmt(row.serverCpu)} | ${fmt(row.genCpu)} | ${fmt(row.otherCpu)} | ${loadRange(row, (r) => r.loadStart)} | ${loadRange(row, (r) => r.loadEnd)} | ${quotableCell(row)} |`)
  }
  return lines.join('\n')
}

/** The overload cases: what was admitted, refused and degraded, per round. */
export function overloadTable (rows: Row[]): string {
  const lines = [
    '| configuration | responses | req/s | 200 | 429 | other status / errors | allowed (stats) | limited (stats) | degraded (stats) | store errors by cause | p50 ms | p99 ms | Node CPU µs/req | decisions/script call | server CPU % | other CPU % |',
    '| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows.filter(isOverload)) {
    if (row.unsupported !== undefined) continue
    const others = eachRound(row, (r) => Object.entries(r.statusCodes).filter(([code]) => code !== '200' && code !== '429').reduce((sum, [, n]) => sum + n, 0) + r.errors)
    const causes = okRuns(row).map((r) => Object.entries((r.pluginStats ?? {}) as Record<string, unknown>).filter(([name, n]) => name.startsWith('storeError_') && typeof n === 'number' && n > 0).map(([name, n]) => `${name.slice(11)} ${String(n)}`).join(' + ') || '0').join(', ')
    lines.push(`| ${row.config.label} | ${eachRound(row, (r) => r.responses)} | ${fmt(row.rps)} | ${eachRound(row, (r) => r.statusCodes['200'] ?? 0)} | ${eachRound(row, (r) => r.statusCodes['429'] ?? 0)} | ${others} | ` +
      `${eachRound(row, (r) => statsOf(r).allowed)} | ${eachRound(row, (r) => statsOf(r).limited)} | ${eachRound(row, (r) => statsOf(r).degraded)} | ${causes} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.nodeUs, 1)} | ${fmt(row.perCall, 1)} | ${fmt(row.serverCpu)} | ${fmt(row.otherCpu)} |`)
  }
  return lines.join('\n')
}

/** rate_limit.store.batch.size and rate_limit.store.latency as the plugin recorded them (configurations with batchMetrics). */
export function batchTable (rows: Row[]): string {
  const lines = [
    '| configuration | round | script calls | batch mean | p50 | p90 | p99 | max | store latency p50 ms | p99 ms | max ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows) {
    for (const run of okRuns(row)) {
      const batch = statsOf(run).batchSize
      if (batch === undefined) continue
      const latency = statsOf(run).storeLatencyMs
      lines.push(`| ${row.config.label} | ${run.round} | ${batch.count} | ${fmt(batch.mean, 1)} | ${fmt(batch.p50)} | ${fmt(batch.p90)} | ${fmt(batch.p99)} | ${fmt(batch.max)} | ${fmt(latency?.p50 ?? Number.NaN, 2)} | ${fmt(latency?.p99 ?? Number.NaN, 2)} | ${fmt(latency?.max ?? Number.NaN, 2)} |`)
    }
  }
  return lines.length > 2 ? lines.join('\n') : ''
}

/** maxBatch 64 / 128 (default) / 256, at 50 connections and under the 3,000-connection overload. */
export function maxBatchTable (rows: Row[]): string {
  const byId = new Map(rows.map((row) => [row.config.id, row]))
  const lines = [
    '| maxBatch | 50 conn.: req/s | × bare | Node CPU µs/req | Redis CPU µs/decision | decisions/call | p99 ms | 3,000 conn. overload: req/s | Node CPU µs/req | decisions/call | p99 ms | admitted | degraded |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  let any = false
  for (const [cap, normal, flood] of [[64, 'sliding-window-10k-mb64', 'overload-mb64'], [128, 'sliding-window-10k', 'overload'], [256, 'sliding-window-10k-mb256', 'overload-mb256']] as const) {
    const a = byId.get(normal)
    const b = byId.get(flood)
    if (a === undefined && b === undefined) continue
    any = true
    const cells = a === undefined || a.unsupported !== undefined ? ['–', '–', '–', '–', '–', '–'] : [fmt(a.rps), ratio(a.vsBare), fmt(a.nodeUs, 1), fmt(a.redisUs, 1), fmt(a.perCall, 1), fmt(a.p99, 2)]
    const over = b === undefined || b.unsupported !== undefined ? ['–', '–', '–', '–', '–', '–'] : [fmt(b.rps), fmt(b.nodeUs, 1), fmt(b.perCall, 1), fmt(b.p99, 2), eachRound(b, (r) => statsOf(r).allowed), eachRound(b, (r) => statsOf(r).degraded)]
    lines.push(`| ${cap}${cap === 128 ? ' (default)' : ''} | ${cells.join(' | ')} | ${over.join(' | ')} |`)
  }
  return any ? lines.join('\n') : ''
}

export function notes (rows: Row[]): string {
  const out: string[] = []
  for (const row of rows) {
    const note = row.runs.find((r) => r.note !== undefined)?.note
    if (row.unsupported !== undefined) out.push(`- ${row.config.label}: n/a — ${row.unsupported}`)
    else if (note !== undefined) out.push(`- ${row.config.label}: ${note}`)
    const codes = new Map<string, number>()
    for (const run of row.runs) for (const [code, count] of Object.entries(run.statusCodes)) codes.set(code, (codes.get(code) ?? 0) + count)
    const unexpected = [...codes].filter(([code]) => code !== '200')
    if (unexpected.length > 0) out.push(`- ${row.config.label}: status codes ${[...codes].map(([c, n]) => `${c}×${n}`).join(', ')}`)
  }
  return out.join('\n')
}

/** Every run's conditions: how the quiet gate found the machine, the load at its start and end, other CPU, and why it may not be quoted. */
export function runsTable (results: RunResult[]): string {
  const lines = [
    '| round | configuration | load | gate | waited s | load 1m at start | load 1m at end | other CPU % | quotable |',
    '| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | --- |'
  ]
  for (const run of results) {
    if (run.unsupported !== undefined) continue
    lines.push(`| ${run.round} | ${run.id} | ${run.loadTool} | ${run.gate} | ${fmt(run.waitedS)} | ${fmt(run.loadStart, 2)} | ${fmt(run.loadEnd, 2)} | ${fmt(run.otherCpuPercent)} | ${run.notQuotable === undefined ? 'yes' : `**no**: ${run.notQuotable}`} |`)
  }
  return lines.join('\n')
}

/** How the HTTP part ran, for the prose above its tables. */
export interface HttpRunInfo {
  rounds: number
  warmup: number
  duration: number
  overloadSeconds: number
  connections: number
  ts: boolean
  /** e.g. "autocannon in the harness process (no workers), prebuilt requests". */
  loadGenerator: string
  tool: string
  maxOther: number
  retries: number
  maxLoad: number
  loadWait: number
}

/** The HTTP part of the markdown: the main table, overload, batch sizes, maxBatch, notes, run conditions. */
export function httpSections (rows: Row[], results: RunResult[], info: HttpRunInfo): string[] {
  const sections = [
    '## HTTP: req/s and CPU per request',
    '',
    `${info.rounds} round(s), configurations interleaved (order rotated each round); each run: fresh server process, ${info.warmup} s warm-up, ${info.duration} s measured, ` +
      `the plugin ${info.ts ? 'from lib/*.ts through tsx' : 'compiled by tsc and run by plain node (no tsx)'}, ` +
      `${info.connections} connections, ${info.loadGenerator}. Medians over rounds; ratios are taken within a round, then the median. ` +
      `Before each run the harness waited (at most ${info.loadWait} s) for the 1-minute load average to fall below ${info.maxLoad}; "load 1m" shows it at the start and end of the runs. ` +
      `A run during which other processes used more than ${info.maxOther} % CPU was repeated (at most ${info.retries} times, quietest kept): "other CPU %" shows what competed. ` +
      'A run that started above the load threshold, or stayed noisy, is not quotable ("quotable runs"; see Run conditions). ' +
      'Client keys are X-Forwarded-For addresses (trustProxy: 127.0.0.1): "10k keys" rotates 10,000 of them, "1 hot key" sends one. ' +
      'Node CPU is the server process\'s utime+stime (/proc) ÷ responses; Redis CPU is INFO cpu (sys+user) ÷ decisions (the plugin\'s allowed + limited counters; ' +
      '@fastify/rate-limit: its EVALSHA calls); decisions/script call is decisions ÷ script calls (the plugin\'s FCALLs, the peer\'s EVALSHAs: the mean batch); redis.call/decision is the other commandstats calls ÷ decisions.',
    '',
    httpTable(rows.filter((row) => !isOverload(row))),
    ''
  ]
  if (rows.some(isOverload)) {
    sections.push('### Overload: 3,000 connections, one identity, limit 25 per hour', '',
      'The plugin\'s default options except `denyCache: false` (every request is a Redis decision), sliding window, no warm-up, ' +
        `${info.overloadSeconds} s measured, one value per round. allowed/limited/degraded are the plugin's stats() over the window; 200/429 are the responses ${info.tool} counted.`,
      '', overloadTable(rows), '')
  }
  const batches = batchTable(rows)
  if (batches !== '') {
    sections.push('### Batch sizes (rate_limit.store.batch.size) and store latency (rate_limit.store.latency)', '',
      'Recorded by the plugin through a recording OpenTelemetry MeterProvider the server registers before ready() (configurations marked so; the per-decision ' +
        'metric calls cost some Node CPU, so throughput rows run without it), over the measured window of each round.',
      '', batches, '')
  }
  const caps = maxBatchTable(rows)
  if (caps !== '') sections.push('### maxBatch', '', caps, '')
  const extra = notes(rows)
  if (extra !== '') sections.push('### Notes', '', extra, '')
  sections.push('### Run conditions', '', runsTable(results), '')
  return sections
}

/** The warning at the top when any figure of the run may not be quoted. */
export function quotableBanner (limits: { maxLoad: number, maxOther: number }, http: RunResult[], scriptsReason: string | undefined): string[] {
  const open = http.filter((run) => run.unsupported === undefined && run.notQuotable !== undefined).length
  const measured = http.filter((run) => run.unsupported === undefined).length
  const parts: string[] = []
  if (open > 0) parts.push(`${open} of ${measured} HTTP runs started at a 1-minute load average ≥ ${limits.maxLoad} or stayed above ${limits.maxOther} % other CPU`)
  if (scriptsReason !== undefined) parts.push(`the script benchmark ${scriptsReason}`)
  if (parts.length === 0) return []
  return [`**Not quotable:** ${parts.join('; ')}. Their figures are not for quoting, and no target verdict is stated from them (see Run conditions).`, '']
}
