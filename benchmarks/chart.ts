/*
 * The HTTP figures of one benchmark run as an SVG bar chart: req/s as a
 * multiple of bare Fastify, and Redis CPU µs per decision, per configuration.
 * No dependencies: it writes the SVG text itself. run.ts calls it after every
 * full run (`<out>.svg` next to the markdown); by hand:
 *
 *   npx tsx benchmarks/chart.ts benchmarks/results/<run>.json [out.svg]
 *
 * Medians over rounds, the ratio taken within each round as run.ts does; the
 * overload cases (one identity, 3,000 connections) are left out, their figures
 * are counts, not throughput. The subtitle states how busy the machine was.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { basename } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CONFIGS } from './configs.js'
import { median } from './common.js'
import type { RunResult } from './http.js'

export interface ChartRow { id: string, label: string, vsBare: number, redisUs: number }

const DEFAULT_ID = 'sliding-window-10k'
const ROW = 22
const BAR = 14
const WIDTH = 1200
const TOP = 92
const CHAR = 6.4 // average width of a 12 px sans-serif character, for the label column

/** One row per steady configuration, in the run's order. */
export function chartRows (results: RunResult[]): ChartRow[] {
  const ok = results.filter((run) => run.unsupported === undefined)
  const ids = [...new Set(ok.map((run) => run.id))]
  const bareIn = (round: number): RunResult | undefined => ok.find((run) => run.id === 'bare' && run.round === round)
  return ids.flatMap((id) => {
    const config = CONFIGS.find((candidate) => candidate.id === id)
    if (config?.load === 'overload' || (config === undefined && id.startsWith('overload'))) return []
    const runs = ok.filter((run) => run.id === id)
    return [{
      id,
      label: config?.label ?? id,
      vsBare: median(runs.map((run) => { const bare = bareIn(run.round); return bare === undefined ? Number.NaN : run.rps / bare.rps })),
      redisUs: median(runs.map((run) => run.redisCpuUsPerDecision ?? Number.NaN))
    }]
  })
}

const escape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
const num = (value: number): string => String(Math.round(value * 100) / 100)

/** Round tick steps (1, 2 or 5 × 10^n) covering 0..max in about four steps. */
function ticks (max: number): number[] {
  const raw = max / 4
  const power = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].map((m) => m * power).find((candidate) => candidate >= raw) ?? raw
  const out = [0]
  while ((out.at(-1) as number) < max) out.push(Math.round(out.length * step * 1e6) / 1e6)
  return out
}

function colourOf (id: string): string {
  if (id === 'bare') return '#9e9e9e'
  if (id.startsWith('frl')) return '#e8833a'
  return id === DEFAULT_ID ? '#1f4e8c' : '#6b93c8'
}

interface Panel { x: number, width: number, title: string, unit: string, digits: number, pick: (row: ChartRow) => number, reference?: number }

/** One panel: gridlines with their values, a bar and its value per row. */
function panel (rows: ChartRow[], spec: Panel): string[] {
  const values = rows.map(spec.pick).filter(Number.isFinite)
  const scale = ticks(Math.max(...values, spec.reference ?? 0))
  const top = scale.at(-1) as number
  const x = (value: number): number => spec.x + (value / top) * spec.width
  const bottom = TOP + rows.length * ROW
  const out = [`<text x="${spec.x}" y="${TOP - 26}" class="head">${escape(spec.title)}</text>`]
  for (const tick of scale) {
    out.push(`<line x1="${x(tick)}" y1="${TOP - 6}" x2="${x(tick)}" y2="${bottom}" class="grid"/>`,
      `<text x="${x(tick)}" y="${TOP - 10}" class="tick">${num(tick)}${spec.unit}</text>`)
  }
  if (spec.reference !== undefined) out.push(`<line x1="${x(spec.reference)}" y1="${TOP - 6}" x2="${x(spec.reference)}" y2="${bottom}" class="ref"/>`)
  rows.forEach((row, i) => {
    const value = spec.pick(row)
    const y = TOP + i * ROW + (ROW - BAR) / 2
    if (!Number.isFinite(value)) {
      out.push(`<text x="${spec.x + 4}" y="${y + BAR - 3}" class="value">–</text>`)
      return
    }
    out.push(`<rect x="${spec.x}" y="${y}" width="${Math.max(x(value) - spec.x, 1).toFixed(1)}" height="${BAR}" fill="${colourOf(row.id)}"><title>${escape(row.label)}: ${num(value)}${spec.unit}</title></rect>`,
      `<text x="${(x(value) + 4).toFixed(1)}" y="${y + BAR - 3}" class="value">${value.toFixed(spec.digits)}${spec.unit}</text>`)
  })
  return out
}

/** The whole chart; `note` is a line under the title (date, machine, load). */
export function chartSvg (rows: ChartRow[], title: string, note: string): string {
  const labelWidth = Math.ceil(Math.max(...rows.map((row) => row.label.length)) * CHAR) + 16
  const gap = 64
  const panelWidth = (WIDTH - labelWidth - gap - 56) / 2
  const height = TOP + rows.length * ROW + 34
  const body = [
    `<text x="12" y="24" class="title">${escape(title)}</text>`,
    `<text x="12" y="44" class="note">${escape(note)}</text>`,
    ...rows.map((row, i) => `<text x="${labelWidth - 8}" y="${TOP + i * ROW + ROW / 2 + 4}" class="label${row.id === DEFAULT_ID ? ' default' : ''}">${escape(row.label)}</text>`),
    ...panel(rows, { x: labelWidth, width: panelWidth, title: 'req/s × bare Fastify (higher: faster)', unit: '×', digits: 2, pick: (row) => row.vsBare, reference: 1 }),
    ...panel(rows, { x: labelWidth + panelWidth + gap, width: panelWidth, title: 'Redis CPU µs / decision (lower: cheaper)', unit: '', digits: 1, pick: (row) => row.redisUs }),
    `<text x="12" y="${height - 12}" class="note">Bars: grey bare Fastify, orange @fastify/rate-limit, blue this plugin (dark: the default, sliding window). "–": no Redis decision.</text>`
  ]
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    '<style>.title{font-size:16px;font-weight:bold}.note{font-size:12px;fill:#555}.head{font-size:13px;font-weight:bold}' +
      '.label{font-size:12px;text-anchor:end}.default{font-weight:bold}.tick{font-size:11px;fill:#777;text-anchor:middle}' +
      '.value{font-size:11px;fill:#333}.grid{stroke:#e3e3e3}.ref{stroke:#c0392b;stroke-dasharray:4 3}</style>',
    `<rect width="${WIDTH}" height="${height}" fill="#fff"/>`,
    ...body,
    '</svg>',
    ''
  ].join('\n')
}

/** How busy the machine was: other processes' CPU over the runs (100 % = one core). */
export function loadNote (results: RunResult[]): string {
  const other = results.map((run) => run.otherCpuPercent).filter(Number.isFinite).sort((a, b) => a - b)
  const rounds = new Set(results.map((run) => run.round)).size
  if (other.length === 0) return `${rounds} round(s), medians`
  return `${rounds} round(s), medians. Other processes used ${Math.round(other[0] as number)}–${Math.round(other.at(-1) as number)} % CPU (100 % = one core) during the measured runs: compare bars within this chart, not across machines.`
}

/** The chart of a results JSON as run.ts writes it, titled with the run's name; undefined when it has no HTTP runs. */
export function chartOf (jsonFile: string, name: string): string | undefined {
  const results = (JSON.parse(readFileSync(jsonFile, 'utf8')) as { http?: RunResult[] }).http ?? []
  const rows = chartRows(results)
  if (rows.length === 0) return undefined
  const connections = median(results.filter((run) => rows.some((row) => row.id === run.id)).map((run) => run.connections))
  return chartSvg(rows, `Benchmark ${name}: HTTP, ${connections} connections`, loadNote(results))
}

/** Writes the chart of `jsonFile` to `svgFile`; false when there is nothing to chart. */
export function writeChart (jsonFile: string, svgFile: string, name: string): boolean {
  const svg = chartOf(jsonFile, name)
  if (svg !== undefined) writeFileSync(svgFile, svg)
  return svg !== undefined
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [json, out] = process.argv.slice(2)
  if (json === undefined) throw new Error('usage: tsx benchmarks/chart.ts <results.json> [out.svg]')
  const svg = out ?? json.replace(/\.json$/, '') + '.svg'
  if (!writeChart(json, svg, basename(json, '.json'))) throw new Error(`${json} has no HTTP runs to chart`)
  process.stderr.write(`written ${svg}\n`)
}
