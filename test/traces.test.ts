import { test } from 'tap'
import { registerInstrumentations } from '@opentelemetry/instrumentation'
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http'
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node'
import { DECISION_EVENT, loadTracing } from '../lib/diagnostics.js'

/*
 * Traces as an app that runs OpenTelemetry's Node SDK and its HTTP
 * instrumentation sees them: each decision is an event on the request's
 * server span, with the route, the policies, the outcome, a degraded
 * decision's cause and the store call's latency and size, and no identity
 * value. Without a registered TracerProvider, nothing is loaded.
 */

const before = await loadTracing(() => {})
const exporter = new InMemorySpanExporter()
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
provider.register()
// Before Fastify and the HTTP client load `http`, as the SDK's setup files do.
registerInstrumentations({ instrumentations: [new HttpInstrumentation()] })
const { request } = await import('undici')
const { buildApp } = await import('./helpers/app.js')
const { createClient, freePort, privateRedis } = await import('./helpers/redis.js')

interface Event { name: string, attributes?: Record<string, unknown> }

function serverEvents (): Event[] {
  return exporter.getFinishedSpans().filter((span) => span.kind === 1).flatMap((span) => span.events as Event[])
}

test('without a TracerProvider the plugin loads no tracing', async (t) => {
  t.equal(before, undefined)
  t.ok(await loadTracing(() => {}), 'with the SDK registered it does')
})

test('a listening server under the HTTP instrumentation: each decision is an event on the request\'s server span, with no identity value', async (t) => {
  const { server } = await privateRedis(t)
  const redis = createClient(server)
  const app = await buildApp({ redis, prefix: 'tr', user: (req) => req.headers['x-user'] as string | undefined })
  app.get('/orders', { config: { rateLimit: [{ name: 'orders', limit: 1, window: '1m' }, { name: 'orders-hour', limit: 100, window: '1h' }] } }, async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/orders`
  exporter.reset()
  for (const expected of [200, 429]) {
    const res = await request(url, { headers: { 'x-user': 'secret-user-name' } })
    await res.body.dump()
    t.equal(res.statusCode, expected)
  }
  await new Promise((resolve) => setTimeout(resolve, 50))
  const events = serverEvents().filter((event) => event.name === DECISION_EVENT)
  t.equal(events.length, 2, 'one event per decision, on the server span')
  t.match(events[0]?.attributes, {
    'rate_limit.route': 'GET /orders',
    'rate_limit.policies': ['orders', 'orders-hour'],
    'rate_limit.outcome': 'allowed',
    'rate_limit.source': 'store',
    'rate_limit.store.batch_size': 1,
    'rate_limit.store.latency_ms': Number,
    'rate_limit.duration_ms': Number
  })
  t.match(events[1]?.attributes, { 'rate_limit.outcome': 'limited', 'rate_limit.policy': 'orders', 'rate_limit.violated': ['orders'] })
  t.notMatch(JSON.stringify(exporter.getFinishedSpans().map((span) => span.events)), /secret-user-name/, 'no identity value')
})

test('a degraded decision names its cause; metrics: false turns traces off too', async (t) => {
  // A client of a port nothing listens on: every decision degrades (unavailable).
  const { Redis } = await import('ioredis')
  const redis = new Redis({ port: await freePort(), lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => 1000, maxRetriesPerRequest: 0 })
  redis.on('error', () => {})
  const app = await buildApp({ redis, prefix: 'tr' })
  app.get('/x', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  const quiet = await buildApp({ redis, prefix: 'tr', metrics: false })
  quiet.get('/x', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  await quiet.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { await app.close(); await quiet.close(); redis.disconnect() })
  exporter.reset()
  const res = await request(`http://127.0.0.1:${(app.server.address() as { port: number }).port}/x`)
  await res.body.dump()
  t.equal(res.statusCode, 200, 'fail-open')
  const res2 = await request(`http://127.0.0.1:${(quiet.server.address() as { port: number }).port}/x`)
  await res2.body.dump()
  await new Promise((resolve) => setTimeout(resolve, 50))
  const events = serverEvents().filter((event) => event.name === DECISION_EVENT)
  t.equal(events.length, 1, 'one event: the app with metrics: false adds none')
  t.match(events[0]?.attributes, { 'rate_limit.outcome': 'degraded', 'rate_limit.degraded_cause': 'unavailable' })
})
