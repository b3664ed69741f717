import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { chartOf, chartRows } from '../../benchmarks/chart.js'
import type { RunResult } from '../../benchmarks/http.js'

const RUN = '2026-12-06-one-path-after'
const json = fileURLToPath(new URL(`../../benchmarks/results/${RUN}.json`, import.meta.url))

test('the chart in docs/performance.md is the one its results JSON draws', async (t) => {
  const svg = readFileSync(json.replace(/\.json$/, '.svg'), 'utf8')
  t.equal(chartOf(json, RUN), svg, 'regenerate with: npx tsx benchmarks/chart.ts ' + `benchmarks/results/${RUN}.json`)
  t.match(readFileSync(new URL('../../docs/performance.md', import.meta.url), 'utf8'), `](../benchmarks/results/${RUN}.svg)`)
  t.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/)
  const rows = chartRows((JSON.parse(readFileSync(json, 'utf8')) as { http: RunResult[] }).http)
  const bars = rows.flatMap((row) => [row.vsBare, row.redisUs]).filter(Number.isFinite).length
  t.equal(svg.match(/<rect [^>]*><title>[^<]*<\/title><\/rect>/g)?.length, bars, `${bars} bars, each with its value as a tooltip`)
  t.ok(svg.endsWith('</svg>\n'))
})

test('chart rows: medians of within-round ratios to bare, overload cases left out', async (t) => {
  const run = (id: string, round: number, rps: number, redis: number | null): RunResult => ({ id, round, rps, redisCpuUsPerDecision: redis, otherCpuPercent: 10 }) as unknown as RunResult
  const rows = chartRows([
    run('bare', 1, 100, null), run('frl', 1, 50, 30), run('overload', 1, 5, 9),
    run('bare', 2, 200, null), run('frl', 2, 150, 20),
    run('bare', 3, 100, null), run('frl', 3, 90, 40)
  ])
  t.same(rows.map((row) => row.id), ['bare', 'frl'])
  t.equal(rows[1]?.vsBare, 0.75, 'ratios within each round (0.5, 0.75, 0.9), then the median')
  t.equal(rows[1]?.redisUs, 30)
  t.ok(Number.isNaN(rows[0]?.redisUs), 'bare makes no Redis decision')
})
