/**
 * One chaos instance: a child process serving ROUTES on a real socket with
 * the plugin's default options (only `redis`, `prefix` and `user` are set),
 * an OpenTelemetry MeterProvider whose instruments can be told to throw
 * (the "throwing metrics exporter" fault), and a host clock the parent can
 * skew (Date.now is the host's clock to the plugin, runtime.ts).
 *
 * argv[2]: JSON { inst, port, prefix, nodes: [{ host, port }], cluster, wiring, maxDelayed }.
 * `wiring` is one of the documented ones: the app's own client, closed with
 * quit() in an onClose hook registered before the plugin ('own'), or
 * @fastify/redis given that client, which quits it in its own onClose.
 * It reports to the parent over IPC: `ready`, one `record` per request when
 * its response closes (times from the unskewed clock), `unhandled` for an
 * unhandled rejection or uncaught exception, and replies to commands.
 */
import diagnostics from 'node:diagnostics_channel'
import { metrics, type MeterProvider } from '@opentelemetry/api'
import Fastify from 'fastify'
import fastifyRedis from '@fastify/redis'
import { Cluster, Redis } from 'ioredis'
import { RECOMMENDED_OPTIONS } from '../helpers/ioredis-clients.js'
import { ROUTES, OVERRIDE } from './routes.js'

interface Config { inst: number, port: number, prefix: string, nodes: Array<{ host: string, port: number }>, cluster: boolean, wiring?: 'own' | 'fastify-redis', maxDelayed?: number }
const config = JSON.parse(process.argv[2] as string) as Config
const send = (message: unknown): void => { process.send?.(message) }

const realNow = Date.now.bind(Date)
let skewMs = 0
Date.now = () => realNow() + skewMs

process.on('unhandledRejection', (reason) => { send({ type: 'unhandled', message: `unhandledRejection: ${String((reason as Error)?.stack ?? reason)}` }) })
process.on('uncaughtException', (error) => { send({ type: 'unhandled', message: `uncaughtException: ${String(error.stack ?? error)}` }) })

// The first few store errors of each cause, so a report can say why decisions degraded.
const seenCauses = new Map<string, number>()
diagnostics.subscribe('fastify-redis-rate-limit:store-error', (message) => {
  const { cause, error, route } = message as { cause: string, error: unknown, route: string }
  const n = (seenCauses.get(cause) ?? 0) + 1
  seenCauses.set(cause, n)
  if (n <= 2) send({ type: 'store-error', message: `instance ${config.inst} at ${realNow()}: ${cause} on ${route}: ${String((error as Error)?.message ?? error)}` })
})

let metricsThrow = false
const fail = (): void => { if (metricsThrow) throw new Error('chaos: metrics exporter failed') }
metrics.setGlobalMeterProvider({
  getMeter: () => ({
    createCounter: () => ({ add: fail }),
    createHistogram: () => ({ record: fail })
  })
} as unknown as MeterProvider)

// Event-loop lag, sampled every 10 ms, so the checker can add what this process measured to a request's bound.
const lags: Array<[number, number]> = []
let expected = realNow() + 10
setInterval(() => {
  const now = realNow()
  lags.push([now, Math.max(0, now - expected)])
  if (lags.length > 1000) lags.shift()
  expected = now + 10
}, 10).unref()
function lagBetween (from: number, to: number): number {
  // A stall that ends in the turn that records a request has no sample yet: the tick it delays is still due.
  let max = Math.max(0, realNow() - expected)
  for (const [at, ms] of lags) if (at >= from && at - ms <= to + 10 && ms > max) max = ms
  return max
}

const redis = config.cluster
  ? new Cluster(config.nodes, { enableOfflineQueue: false, retryDelayOnTryAgain: 10, redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 } })
  : new Redis({ ...config.nodes[0], ...RECOMMENDED_OPTIONS })
redis.on('error', () => {})
await new Promise((resolve) => redis.once('ready', resolve))

const { default: rateLimit } = await import('../../lib/index.js')
const app = Fastify({ logger: false })
// Before the plugin's hook, so refused requests have their arrival time too.
app.addHook('onRequest', (request, reply, done) => {
  const t0 = realNow()
  reply.raw.once('close', () => {
    const decision = request.rateLimit as { allowed: boolean, degraded: boolean, retryAfterMs: number } | undefined
    send({
      type: 'record',
      id: Number(request.headers['x-req']),
      inst: config.inst,
      t0,
      tDec: (request as unknown as { chaosDecided?: number }).chaosDecided,
      tEnd: realNow(),
      status: reply.statusCode,
      finished: reply.raw.writableFinished,
      degraded: decision?.degraded === true,
      retryAfterMs: decision?.retryAfterMs,
      lagMs: lagBetween(t0, realNow()),
      peakHeld
    })
  })
  done()
})
if (config.wiring === 'fastify-redis') await app.register(fastifyRedis, { client: redis, closeClient: true })
// Registered before the plugin: Fastify runs onClose hooks last-registered first, so this quits after the plugin's own close.
else app.addHook('onClose', async () => { await redis.quit() })
await app.register(rateLimit, {
  ...(config.wiring === 'fastify-redis' ? {} : { redis }),
  prefix: config.prefix,
  user: (request) => request.headers['x-user'] as string | undefined,
  ...(config.maxDelayed !== undefined ? { maxDelayed: config.maxDelayed } : {})
})
const api = app.rateLimit

// The largest number held and waiting at once (sampled every 10 ms and at each decision): the maxDelayed bound.
let peakHeld = 0
const samplePeak = (): void => {
  const { held, waiting } = api.stats()
  if (held + waiting > peakHeld) peakHeld = held + waiting
}
setInterval(samplePeak, 10).unref()

// When the decision was known: preHandler for admitted requests, onSend for refusals.
// A route decided at preHandler (conc) is decided after this app-level hook: its handler marks it instead
// (seed 1594903990: a client that gave up before that decision was taken for an admission).
app.addHook('preHandler', (request, _reply, done) => {
  if (request.rateLimit != null) (request as unknown as { chaosDecided?: number }).chaosDecided = realNow()
  samplePeak()
  done()
})
app.addHook('onSend', (request, _reply, payload, done) => {
  const own = request as unknown as { chaosDecided?: number }
  own.chaosDecided ??= realNow()
  done(null, payload)
})

const header = (request: { headers: Record<string, unknown> }, name: string): number => Number(request.headers[name] ?? 0)
for (const route of ROUTES) {
  const block: Record<string, unknown> = route.algorithm === 'concurrency'
    ? { concurrency: route.limit }
    : route.period !== undefined
      ? { period: route.period, limit: route.limit }
      : { algorithm: route.algorithm, limit: route.limit, window: route.windowMs }
  block.onRedisError = route.onRedisError
  if (route.delayMs !== undefined) block.delay = route.delayMs
  if (route.waitMs !== undefined) block.wait = route.waitMs
  if (route.maxCost > 1) block.cost = (request: { headers: Record<string, unknown> }) => Math.max(1, header(request, 'x-cost'))
  if (route.settle === true) block.settle = (request: { headers: Record<string, unknown> }) => header(request, 'x-use')
  if (route.refundOn === true) block.refundOn = (reply: { statusCode: number }) => reply.statusCode >= 500
  if (route.body === true) block.hook = 'preHandler'
  app.route({
    method: route.body === true ? 'POST' : 'GET',
    url: route.url,
    ...(route.host !== undefined ? { constraints: { host: route.host } } : {}),
    config: { rateLimit: block as never },
    handler: async (request) => {
      (request as unknown as { chaosDecided?: number }).chaosDecided ??= realNow()
      const sleep = header(request, 'x-sleep')
      if (sleep > 0) await new Promise((resolve) => setTimeout(resolve, sleep))
      if (request.headers['x-throw'] === '1') throw new Error('chaos: the handler threw')
      return { ok: true }
    }
  })
}

type Command =
  | { seq: number, cmd: 'stall', ms: number }
  | { seq: number, cmd: 'skew', hours: number }
  | { seq: number, cmd: 'metrics', throwing: boolean }
  | { seq: number, cmd: 'ban', user: string }
  | { seq: number, cmd: 'unban', id: string }
  | { seq: number, cmd: 'override', user: string }
  | { seq: number, cmd: 'clear', id: string }
  | { seq: number, cmd: 'close' }
  | { seq: number, cmd: 'deploy' }

/** Closes as a deploy does: app.close() while listening; the wiring closes the client after the plugin. */
async function deploy (): Promise<{ closeAt: number, closedAt: number }> {
  const closeAt = realNow()
  await app.close()
  const closedAt = realNow()
  // The records of the last responses leave over IPC before the process does.
  setTimeout(() => process.exit(0), 300)
  return { closeAt, closedAt }
}

async function run (command: Command): Promise<unknown> {
  switch (command.cmd) {
    case 'stall': {
      const until = realNow() + command.ms
      while (realNow() < until) { /* the event loop is stalled */ }
      return true
    }
    case 'skew': skewMs = command.hours * 3_600_000; return true
    case 'metrics': metricsThrow = command.throwing; return true
    case 'ban': return (await api.ban({ identity: { user: command.user }, ttl: 60_000, actor: 'chaos', reason: 'schedule' })).id
    case 'unban': return await api.unban(command.id, { actor: 'chaos', reason: 'schedule' })
    case 'override': return (await api.setOverride({ target: OVERRIDE.target, identity: { user: command.user }, limit: OVERRIDE.limit, ttl: 60_000, actor: 'chaos', reason: 'schedule' })).id
    case 'clear': return await api.clearOverride(command.id, { actor: 'chaos', reason: 'schedule' })
    case 'close':
      await app.close()
      redis.disconnect()
      setImmediate(() => process.exit(0))
      return true
    case 'deploy': return await deploy()
  }
}
process.on('message', (command: Command) => {
  // A stall runs from a timer callback, as a busy handler or a long GC would.
  setTimeout(() => {
    run(command).then(
      (result) => { send({ type: 'reply', seq: command.seq, ok: true, result, at: realNow() }) },
      (error: unknown) => { send({ type: 'reply', seq: command.seq, ok: false, result: String(error), at: realNow() }) }
    )
  }, 0)
})

await app.listen({ port: config.port, host: '127.0.0.1' })
send({ type: 'ready' })
