/*
 * One benchmark server: `node --import tsx benchmarks/server.ts <config id>`.
 * Env: BENCH_REDIS_URL (required unless bare), BENCH_PREFIX (key prefix).
 * The harness normally runs it compiled by tsc with plain node (see buildServer in run.ts).
 * Prints one line `READY {"port":…,"pid":…,"note":…}` once listening, or
 * `UNSUPPORTED <reason>` and exits 0 when the plugin lacks what the
 * configuration needs (the deny cache, say). GET / is the measured route;
 * GET /__bench/stats (never limited) reports the plugin's counters and is
 * called only outside the measured window. With the configuration's
 * batchMetrics, a recording OpenTelemetry MeterProvider is registered before
 * ready(), and the stats also carry the distributions of the plugin's
 * rate_limit.store.batch.size and rate_limit.store.latency since the previous
 * stats call (each call starts them afresh).
 */
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import diagnostics from 'node:diagnostics_channel'
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks'
import { metrics, type MeterProvider } from '@opentelemetry/api'
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import rateLimit, { CHANNELS, METRICS, type StoreErrorMessage } from '../lib/index.js'
import { blockFor, configById, denyCacheCandidates, OVERLOAD_LIMIT, STATS_PATH, type BenchConfig } from './configs.js'

const config = configById(process.argv[2] ?? '')
const prefix = process.env.BENCH_PREFIX ?? 'bench'
const FRL_MODULE: string = '@fastify/rate-limit'

function newApp (): FastifyInstance {
  // Loopback is the trusted proxy: the load generator sends one client key per X-Forwarded-For.
  return Fastify({ logger: false, trustProxy: '127.0.0.1' })
}

async function connect (config: BenchConfig): Promise<Redis> {
  const url = process.env.BENCH_REDIS_URL
  if (url === undefined || url === '') throw new Error('BENCH_REDIS_URL is not set')
  // The same client options for our plugin and @fastify/rate-limit: ioredis defaults, auto-pipelining as configured.
  const client = new Redis(url, { enableAutoPipelining: config.autoPipelining })
  await new Promise<void>((resolve, reject) => {
    client.once('ready', resolve)
    client.once('error', reject)
  })
  return client
}

function messageOf (error: unknown): string {
  return error instanceof Error ? `${(error as { code?: string }).code ?? error.name}: ${error.message}` : String(error)
}

/** The first candidate option the plugin accepts, or the reasons each was refused. */
async function probeDenyCache (redis: Redis, on: boolean): Promise<{ option: Record<string, unknown> | undefined, refused: string[] }> {
  const refused: string[] = []
  for (const option of denyCacheCandidates(on)) {
    const probe = newApp()
    try {
      await probe.register(rateLimit, { redis, prefix, ...option } as never)
      probe.get('/', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x')
      await probe.ready()
      return { option, refused }
    } catch (error) {
      refused.push(`${JSON.stringify(option)} → ${messageOf(error)}`)
    } finally {
      await probe.close().catch(() => {})
    }
  }
  return { option: undefined, refused }
}

export interface Distribution { count: number, mean: number, p50: number, p90: number, p99: number, max: number }

/** A histogram's summary, then empties it. */
function drain (histogram: RecordableHistogram, scale = 1): Distribution {
  const summary = histogram.count === 0
    ? { count: 0, mean: Number.NaN, p50: Number.NaN, p90: Number.NaN, p99: Number.NaN, max: Number.NaN }
    : { count: histogram.count, mean: histogram.mean / scale, p50: histogram.percentile(50) / scale, p90: histogram.percentile(90) / scale, p99: histogram.percentile(99) / scale, max: histogram.max / scale }
  histogram.reset()
  return summary
}

/**
 * The smallest MeterProvider the plugin records into (it stands in for an SDK): batch sizes
 * and store latencies (kept in µs, integers) go to histograms, every other instrument is a no-op.
 * Its meter is not the API's no-op meter, so the plugin's loadMetrics() accepts it.
 */
class RecordingMeter {
  readonly batchSize = createHistogram()
  readonly latencyUs = createHistogram()
  createCounter (): { add: () => void } { return { add: () => {} } }
  createHistogram (name: string): { record: (value: number) => void } {
    if (name === METRICS.batchSize) return { record: (value) => { this.batchSize.record(Math.max(1, Math.round(value))) } }
    if (name === METRICS.storeLatency) return { record: (value) => { this.latencyUs.record(Math.max(1, Math.round(value * 1000))) } }
    return { record: () => {} }
  }
}

function recordBatchMetrics (): RecordingMeter {
  const meter = new RecordingMeter()
  metrics.setGlobalMeterProvider({ getMeter: () => meter } as unknown as MeterProvider)
  return meter
}

/** A node-redis v6 client with the options docs/clients.md recommends (the node-redis configuration). */
function nodeRedisClient () {
  return createClient({ url: process.env.BENCH_REDIS_URL, disableOfflineQueue: true })
}
type NodeRedisClient = ReturnType<typeof nodeRedisClient>

async function connectNodeRedis (): Promise<NodeRedisClient> {
  const client = nodeRedisClient()
  // node-redis throws on an 'error' event without a listener: the application's job, so the bench's.
  client.on('error', (error: unknown) => { process.stderr.write(`node-redis: ${messageOf(error)}\n`) })
  await client.connect()
  return client
}

async function main (): Promise<void> {
  const app = newApp()
  let redis: Redis | undefined
  let nodeRedis: NodeRedisClient | undefined
  let note = ''
  let stats: () => unknown = () => ({})

  if (config.kind === 'ours') {
    redis = await connect(config)
    const meter = config.batchMetrics === true ? recordBatchMetrics() : undefined
    let extra: Record<string, unknown> = {}
    if (config.denyCache !== undefined) {
      const probe = await probeDenyCache(redis, config.denyCache)
      if (probe.option !== undefined) {
        extra = probe.option
        note = `deny cache option ${JSON.stringify(probe.option)}`
      } else if (config.denyCache) {
        const tried = denyCacheCandidates(true).map((option) => JSON.stringify(option)).join(', ')
        process.stdout.write(`UNSUPPORTED the plugin accepts no deny-cache option (tried ${tried}; first refusal: ${probe.refused[0] ?? '?'})\n`)
        redis.disconnect()
        return
      } else {
        note = 'the plugin has no deny-cache option: every request goes to Redis'
      }
    }
    // The plugin's defaults, except what the configuration sets.
    const tuned: Record<string, unknown> = {}
    if (config.batchWrites !== undefined) tuned.batchWrites = config.batchWrites
    if (config.maxBatch !== undefined) tuned.maxBatch = config.maxBatch
    if (config.client === 'node-redis') nodeRedis = await connectNodeRedis()
    await app.register(rateLimit, { redis: nodeRedis ?? redis, prefix, ...tuned, ...extra } as never)
    const block = config.load === 'flood'
      ? { algorithm: config.algorithm, limit: 1, window: '1h' }
      : config.load === 'overload'
        ? { algorithm: config.algorithm, limit: OVERLOAD_LIMIT, window: '1h' }
        : blockFor(config.algorithm ?? 'sliding-window', config.load)
    app.get('/', { config: { rateLimit: block as never } }, async () => ({ hello: 'world' }))
    app.get(STATS_PATH, { config: { rateLimit: false } }, async () => stats())
    // Why decisions degraded (timeout, overloaded, unavailable…): published only on a store failure, free otherwise.
    const storeErrors: Record<string, number> = {}
    diagnostics.subscribe(CHANNELS.storeError, (message) => {
      const cause = `storeError_${(message as StoreErrorMessage).cause}`
      storeErrors[cause] = (storeErrors[cause] ?? 0) + 1
    })
    stats = () => ({
      ...((app as unknown as { rateLimit?: { stats?: () => object } }).rateLimit?.stats?.() ?? {}),
      ...storeErrors,
      ...(meter === undefined ? {} : { batchSize: drain(meter.batchSize), storeLatencyMs: drain(meter.latencyUs, 1000) })
    })
  } else if (config.kind === 'frl') {
    redis = await connect(config)
    // Fixed window, limit never reached: the cheapest thing @fastify/rate-limit's Redis store does.
    // Loaded by a non-literal specifier: its type declarations also declare `fastify.rateLimit`,
    // which would clash with ours in the project-wide type check.
    const frl = ((await import(FRL_MODULE)) as { default: FastifyPluginAsync<Record<string, unknown>> }).default
    await app.register(frl, { redis, max: 1_000_000_000, timeWindow: 3_600_000, nameSpace: `${prefix}:` })
    app.get('/', async () => ({ hello: 'world' }))
    app.get(STATS_PATH, { config: { rateLimit: false } }, async () => stats())
  } else {
    app.get('/', async () => ({ hello: 'world' }))
    app.get(STATS_PATH, async () => stats())
  }

  // The harness profiles exactly the measured window: start before it, stop (and write) after it.
  const session = new Session()
  app.post('/__bench/profile/start', { config: { rateLimit: false } }, async () => {
    session.connect()
    await session.post('Profiler.enable')
    await session.post('Profiler.setSamplingInterval', { interval: 200 })
    await session.post('Profiler.start')
    return { ok: true }
  })
  app.post('/__bench/profile/stop', { config: { rateLimit: false } }, async (request) => {
    const { profile } = await session.post('Profiler.stop')
    session.disconnect()
    writeFileSync(String((request.query as { file?: string }).file), JSON.stringify(profile))
    return { ok: true }
  })

  const address = await app.listen({ port: 0, host: '127.0.0.1' })
  const port = Number(new URL(address).port)
  process.stdout.write(`READY ${JSON.stringify({ port, pid: process.pid, note })}\n`)

  const stop = (): void => {
    app.close().finally(() => {
      redis?.disconnect()
      nodeRedis?.destroy()
      process.exit(0)
    })
  }
  process.once('SIGTERM', stop)
  process.once('SIGINT', stop)
}

main().catch((error: unknown) => {
  process.stderr.write(`benchmark server ${config.id} failed: ${messageOf(error)}\n${error instanceof Error ? error.stack ?? '' : ''}\n`)
  process.exit(1)
})
