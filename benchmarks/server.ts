/*
 * One benchmark server: `node --import tsx benchmarks/server.ts <config id>`.
 * Env: BENCH_REDIS_URL (required unless bare), BENCH_PREFIX (key prefix).
 * The harness normally runs it compiled by tsc with plain node (see buildServer in run.ts).
 * Prints one line `READY {"port":…,"pid":…,"note":…}` once listening, or
 * `UNSUPPORTED <reason>` and exits 0 when the plugin lacks what the
 * configuration needs (the deny cache, say). GET / is the measured route;
 * GET /__bench/stats (never limited) reports the plugin's counters and is
 * called only outside the measured window.
 */
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { Redis } from 'ioredis'
import rateLimit from '../lib/index.js'
import { blockFor, configById, denyCacheCandidates, STATS_PATH, type BenchConfig } from './configs.js'

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

async function main (): Promise<void> {
  const app = newApp()
  let redis: Redis | undefined
  let note = ''
  let stats: () => unknown = () => ({})

  if (config.kind === 'ours') {
    redis = await connect(config)
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
    await app.register(rateLimit, { redis, prefix, batchWrites: config.batchWrites ?? true, ...extra } as never)
    const block = config.load === 'flood'
      ? { algorithm: config.algorithm, limit: 1, window: '1h' }
      : blockFor(config.algorithm ?? 'sliding-window', config.load)
    app.get('/', { config: { rateLimit: block as never } }, async () => ({ hello: 'world' }))
    app.get(STATS_PATH, { config: { rateLimit: false } }, async () => stats())
    stats = () => ({ ...((app as unknown as { rateLimit?: { stats?: () => object } }).rateLimit?.stats?.() ?? {}) })
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
