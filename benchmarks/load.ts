import { createRequire } from 'node:module'
import { createHistogram } from 'node:perf_hooks'
import { addressesOf, type BenchConfig } from './configs.js'
import { packageVersion } from './common.js'
import { wrkDriver } from './wrk.js'

/*
 * The load generators: autocannon (default, a library in the harness
 * process) and wrk (`--load wrk`, a child process). Both send the same client
 * keys: X-Forwarded-For addresses from clientIp(), 10,000 rotating ones for
 * the "10k" load, clientIp(0) alone otherwise, over keep-alive connections.
 */

export type LoadTool = 'autocannon' | 'wrk'

/** What one drive of the load reported; latencies in ms. */
export interface DriveResult {
  seconds: number
  responses: number
  non2xx: number
  /** Socket errors and timeouts. */
  errors: number
  statusCodes: Record<string, number>
  p50Ms: number
  p99Ms: number
}

export interface DriveOptions { port: number, connections: number, seconds: number }

export interface LoadDriver {
  tool: LoadTool
  version: string
  /** The configuration's load against a listening server; the harness measures CPU around it. */
  drive: (config: BenchConfig, options: DriveOptions) => Promise<DriveResult>
  /** Removes what the driver wrote (wrk's address files). */
  cleanup: () => void
}

interface AutocannonResult {
  duration: number
  errors: number
  timeouts: number
  non2xx: number
  statusCodeStats: Record<string, { count: number }>
  requests: { total: number }
}
interface AutocannonClient {
  requestIterator: { requests: unknown[], currentRequestIndex: number, currentRequest: unknown }
}
interface Tracker { on: (event: 'response', listener: (client: unknown, statusCode: number, bytes: number, ms: number) => void) => void }
type Autocannon = (options: Record<string, unknown>, callback: (error: Error | null, result: AutocannonResult) => void) => Tracker
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon

/** Raw HTTP/1.1 requests, built once per drive: the load generator only writes buffers. */
function buildRequests (config: BenchConfig, port: number): Array<{ requestBuffer: Buffer }> {
  return addressesOf(config).map((ip) => ({ requestBuffer: Buffer.from(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: keep-alive\r\nX-Forwarded-For: ${ip}\r\n\r\n`) }))
}

/** autocannon's own histogram has whole-millisecond resolution: latencies go to a µs histogram instead. */
async function autocannonDrive (config: BenchConfig, { port, connections, seconds }: DriveOptions): Promise<DriveResult> {
  const requests = buildRequests(config, port)
  const latency = createHistogram()
  let nextClient = 0
  const stride = Math.max(1, Math.floor(requests.length / connections))
  const result = await new Promise<AutocannonResult>((resolve, reject) => {
    const tracker = autocannon({
      url: `http://127.0.0.1:${port}/`,
      connections,
      pipelining: 1,
      duration: seconds,
      requests: [{ method: 'GET', path: '/' }],
      // Swap in the prebuilt buffers, each connection starting at its own offset, so
      // 50 connections do not send the same key at the same moment and nothing is rebuilt.
      setupClient: (client: AutocannonClient) => {
        const iterator = client.requestIterator
        const offset = (nextClient++ * stride) % requests.length
        iterator.requests = requests
        iterator.currentRequestIndex = offset
        iterator.currentRequest = requests[offset]
      }
    }, (error, value) => { if (error !== null) reject(error); else resolve(value) })
    tracker.on('response', (_client, _status, _bytes, ms) => { latency.record(Math.max(1, Math.round(ms * 1000))) })
  })
  const statusCodes: Record<string, number> = {}
  for (const [code, stat] of Object.entries(result.statusCodeStats)) statusCodes[code] = stat.count
  return {
    seconds: result.duration,
    responses: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    statusCodes,
    p50Ms: latency.percentile(50) / 1000,
    p99Ms: latency.percentile(99) / 1000
  }
}

const autocannonDriver: LoadDriver = { tool: 'autocannon', version: packageVersion('autocannon'), drive: autocannonDrive, cleanup: () => {} }

/** The driver for `--load`; wrk throws a how-to-install message when it is not on PATH. */
export function loadDriver (tool: LoadTool, wrkThreads: number): LoadDriver {
  return tool === 'wrk' ? wrkDriver(wrkThreads) : autocannonDriver
}
