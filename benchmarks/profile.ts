/*
 * Summarises V8 .cpuprofile files (from `npm run bench -- --cpu-prof --only <id>`):
 * self time per function and per area (lib/, fastify, ioredis, node internals, GC…),
 * in µs per request when the request count is given.
 *
 *   npx tsx benchmarks/profile.ts <file.cpuprofile> [requests] [top]
 */
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string, url: string, lineNumber: number }
  hitCount?: number
  children?: number[]
}
interface Profile { nodes: ProfileNode[], startTime: number, endTime: number, samples: number[], timeDeltas: number[] }

function area (url: string, name: string): string {
  if (url === '') return name.startsWith('(') ? name : '(native/builtin)'
  if ((url.includes('/lib/') || url.includes('/dist/')) && !url.includes('node_modules')) return 'plugin lib/'
  const match = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (match !== null) return match[1] as string
  if (url.startsWith('node:')) return 'node internals'
  return url
}

/**
 * `requests`: responses in the profiled window, to show µs per request. `cpuUsPerReq`: the
 * process's measured CPU per request (/proc), shown beside the profile's own busy time per request.
 */
export function summarise (file: string, requests: number | undefined, top = 30, cpuUsPerReq?: number): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  // Self time per node from the samples and their time deltas (µs).
  const self = new Map<number, number>()
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i] as number
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0))
  }
  const total = profile.endTime - profile.startTime
  const perFunction = new Map<string, number>()
  const perArea = new Map<string, number>()
  for (const [id, us] of self) {
    const node = byId.get(id)
    if (node === undefined) continue
    const { functionName, url, lineNumber } = node.callFrame
    const name = `${functionName === '' ? '(anonymous)' : functionName} ${url.replace(/^.*?\/(node_modules\/|dist\/|lib\/)/, '$1')}:${lineNumber + 1}`
    perFunction.set(name, (perFunction.get(name) ?? 0) + us)
    const where = area(url, functionName)
    perArea.set(where, (perArea.get(where) ?? 0) + us)
  }
  const scale = (us: number): string => requests === undefined ? `${(us / 1000).toFixed(0)} ms` : `${(us / requests).toFixed(2)} µs/req`
  const pct = (us: number): string => `${(us / total * 100).toFixed(1)}%`
  const idle = perArea.get('(idle)') ?? 0
  const busy = total - idle
  const lines = [`\`${file.replace(/^.*\//, '')}\`: ${(total / 1e6).toFixed(1)} s sampled, idle ${pct(idle)}` +
    (requests === undefined ? '' : `, ${requests} requests, main-thread busy ${(busy / requests).toFixed(1)} µs/req`) +
    (cpuUsPerReq === undefined ? '' : ` (process CPU from /proc: ${cpuUsPerReq.toFixed(1)} µs/req, all threads incl. GC helpers and kernel time)`), '', '| area | self | share |', '| --- | ---: | ---: |']
  for (const [name, us] of [...perArea].sort((a, b) => b[1] - a[1]).slice(0, 20)) lines.push(`| ${name} | ${scale(us)} | ${pct(us)} |`)
  lines.push('', '| function | self | share |', '| --- | ---: | ---: |')
  for (const [name, us] of [...perFunction].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`| ${name} | ${scale(us)} | ${pct(us)} |`)
  lines.push('', 'plugin lib/ functions:', '', '| function | self | share |', '| --- | ---: | ---: |')
  for (const [name, us] of [...perFunction].filter(([name]) => / (lib|dist)\//.test(name)).sort((a, b) => b[1] - a[1])) lines.push(`| ${name} | ${scale(us)} | ${pct(us)} |`)
  return lines.join('\n')
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) {
  const [file, requests, top] = process.argv.slice(2)
  if (file === undefined) {
    process.stderr.write('usage: tsx benchmarks/profile.ts <file.cpuprofile> [requests] [top]\n')
    process.exit(2)
  }
  process.stdout.write(summarise(file, requests === undefined || requests === '' ? undefined : Number(requests), top === undefined ? 30 : Number(top)) + '\n')
}
