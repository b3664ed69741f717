import tap, { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { RateLimitPluginOptions } from '../../lib/index.js'
import { OVERRIDE_POLL_MS } from '../../lib/fleet/overrides.js'
import { buildApp } from '../helpers/app.js'
import { FLAVOURS, type ClientFlavour, type FlavourClient } from '../helpers/clients.js'
import { readState, scriptCalls, uniquePrefix } from '../helpers/redis.js'
import { performance } from 'node:perf_hooks'
import { adminClient, startCluster, startProxy, startServer, waitFor } from '../helpers/topologies.js'

/*
 * The same guarantees for every supported client (issue 19), one named
 * subset run per client with its recommended options against real servers:
 * exact under concurrency with two instances and recovery from a flushed library, a flood
 * on one instance, override polling, three faults (lost reply counted once,
 * server hung, port closed) and Cluster batching by hash tag. The full
 * suites run on ioredis 6; this file is what every other client must match.
 */
const TIMEOUT = 50
// timeout + what a loaded 2-core CI machine's event loop may add (faults.test.ts uses the same).
const BOUND = TIMEOUT + 150
const shared = await startServer([], { label: 'clients' })
const sharedAdmin = adminClient(shared.port)
const cluster = await startCluster()
tap.teardown(async () => { sharedAdmin.disconnect(); await shared.stop(); await cluster.stop() })

type Connect = () => Promise<FlavourClient>

/** One instance of the plugin on a fresh client; the routes every subset uses. */
async function instance (t: Test, connect: Connect, options: RateLimitPluginOptions): Promise<{ app: FastifyInstance, fc: FlavourClient }> {
  const fc = await connect()
  const app = await buildApp({ redis: fc.client as never, timeout: TIMEOUT, denyCache: false, ...options })
  app.get('/sw', { config: { rateLimit: { limit: 25, window: '1h' } } }, async () => 'ok')
  app.get('/tb', { config: { rateLimit: { algorithm: 'token-bucket', limit: 25, window: '1h' } } }, async () => 'ok')
  app.get('/id', { config: { rateLimit: { limit: 5, window: '1h', by: 'header:x-id' } } }, async () => 'ok')
  app.get('/closed', { config: { rateLimit: { limit: 3, window: '1h', by: 'header:x-id', onRedisError: 'closed' } } }, async () => 'ok')
  app.get('/count', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1_000_000, window: '1h' } } }, async (req) => req.rateLimit)
  t.teardown(async () => { await app.close(); await fc.close() })
  await app.ready()
  await waitFor('plugin client ready', fc.ready, 5000, 5)
  return { app, fc }
}

const statusesOf = async (app: FastifyInstance, url: string, n: number): Promise<number[]> =>
  await Promise.all(Array.from({ length: n }, async () => (await app.inject(url)).statusCode))
const admitted = (statuses: number[]): number => statuses.filter((code) => code === 200).length

async function exactness (t: Test, flavour: ClientFlavour): Promise<void> {
  const prefix = uniquePrefix('cx')
  const connect = async (): Promise<FlavourClient> => await flavour.standalone(shared.port)
  const [a, b] = [await instance(t, connect, { prefix }), await instance(t, connect, { prefix })]
  for (const url of ['/sw', '/tb']) {
    const both = await Promise.all([statusesOf(a.app, url, 100), statusesOf(b.app, url, 100)])
    t.equal(admitted(both.flat()), 25, `${url}: 200 concurrent requests on two instances admit exactly 25`)
  }
  await sharedAdmin.call('FUNCTION', 'FLUSH')
  t.equal((await a.app.inject('/sw')).statusCode, 429, 'after FUNCTION FLUSH the next decision is still taken (EVAL after "Function not found")')
  const flood = await statusesOf(a.app, '/id', 2000)
  t.equal(admitted(flood), 5, 'a flood of 2,000 concurrent requests on one instance admits exactly the limit')
  t.equal(a.app.rateLimit.stats().degraded + b.app.rateLimit.stats().degraded, 0, 'no decision degraded')

  const record = await a.app.rateLimit.setOverride({ target: 'GET /sw', limit: 40, ttl: 60_000, actor: 'test', reason: flavour.name })
  const waited = await waitFor('instance B applies the override', async () => (await b.app.rateLimit.peek('GET /sw', { ip: '127.0.0.1' })).limit === 40, OVERRIDE_POLL_MS + 1000, 20)
  t.ok(waited <= OVERRIDE_POLL_MS + 300, `the other instance polled the override in (${waited} ms)`)
  t.equal(admitted(await statusesOf(b.app, '/sw', 30)), 15, 'and enforces it: 15 more up to 40')
  t.ok(await b.app.rateLimit.clearOverride(record.id, { actor: 'test', reason: 'done' }), 'cleared through the other instance')
}

/** New callers' decisions on the fail-closed route: each answered within the bound. */
async function duringFault (t: Test, app: FastifyInstance, what: string, expected: number): Promise<void> {
  let worst = 0
  for (let i = 0; i < 6; i++) {
    const started = performance.now()
    const reply = await app.inject({ url: '/closed', headers: { 'x-id': `${what}-${i}` } })
    worst = Math.max(worst, performance.now() - started)
    t.equal(reply.statusCode, expected, `${what}: new caller answered ${expected}`)
  }
  t.ok(worst < BOUND, `${what}: worst decision ${worst.toFixed(1)} ms (bound ${BOUND})`)
}

async function enforcedAgain (app: FastifyInstance, what: string): Promise<number> {
  let n = 0
  return await waitFor(`${what}: enforced again`, async () => (await app.inject({ url: '/closed', headers: { 'x-id': `${what}-after-${n++}` } })).statusCode === 200, 5000, 10)
}

/**
 * Four concurrent requests of one new caller on the fail-closed route (limit 3), sorted.
 * A loaded CI core can still miss the 50 ms default timeout on all four (seen once, node-redis
 * through the proxy): a batch with a 503 in it proves nothing about the limit, so it is retried
 * under a fresh caller, at most three times; the last batch is returned whatever it holds.
 */
async function limitBeforeFaults (app: FastifyInstance): Promise<number[]> {
  let statuses: number[] = []
  for (let attempt = 0; attempt < 3; attempt++) {
    const id = `before-${attempt}`
    statuses = (await Promise.all([1, 2, 3, 4].map(async () => (await app.inject({ url: '/closed', headers: { 'x-id': id } })).statusCode))).sort()
    if (!statuses.includes(503)) break
  }
  return statuses
}

async function faults (t: Test, flavour: ClientFlavour): Promise<void> {
  const server = await startServer([], { label: 'cfault' })
  const proxy = await startProxy(server.port)
  const admin = adminClient(server.port)
  t.teardown(async () => { admin.disconnect(); await proxy.close(); await server.stop() })
  const prefix = uniquePrefix('cf')
  const { app, fc } = await instance(t, async () => await flavour.standalone(proxy.port), { prefix, circuitBreaker: false })
  // A fresh server's first decisions may miss the 50 ms timeout on a loaded CI core (seen twice in full runs): warm up on another caller first.
  await waitFor('a first decision taken by Redis', async () => (await app.inject({ url: '/closed', headers: { 'x-id': 'warm-up' } })).statusCode !== 503, 5000, 20)
  t.same(await limitBeforeFaults(app), [200, 200, 200, 429], 'limit enforced before the faults')
  t.equal((await app.inject('/count')).statusCode, 200)

  proxy.mode = 'drop-replies'
  for (let i = 0; i < 3; i++) t.equal((await app.inject('/count')).json<{ degraded?: boolean }>().degraded ?? true, true, 'reply lost: answered as degraded')
  proxy.mode = 'pass'
  proxy.cut()
  await waitFor('reconnected', fc.ready, 5000, 5)
  await enforcedAgain(app, 'lost')
  await new Promise((resolve) => setTimeout(resolve, 100)) // let any resent command land
  const [key] = await admin.keys(`${prefix}:{GET:/count|*`)
  t.equal((await readState(admin, key as string))?.[1], 4, 'one request before, three whose reply was lost: each counted once')

  server.pause()
  await duringFault(t, app, 'hung', 503)
  server.resume()
  t.ok(await enforcedAgain(app, 'hung') < 1000, 'hung: enforced again within a second of SIGCONT')

  await server.stop()
  await duringFault(t, app, 'port closed', 503)
  await server.start()
  t.ok(await enforcedAgain(app, 'closed') < 2000, 'port closed: enforced again within 2 s of the restart (the library loaded again after "Function not found")')
}

async function clusterBatching (t: Test, flavour: ClientFlavour): Promise<void> {
  const prefix = uniquePrefix('cc')
  const connect = async (): Promise<FlavourClient> => await flavour.cluster(cluster.startupNodes)
  const [a, b] = [await instance(t, connect, { prefix }), await instance(t, connect, { prefix })]
  const before = await clusterScriptCalls()
  const both = await Promise.all([statusesOf(a.app, '/sw', 100), statusesOf(b.app, '/sw', 100)])
  t.equal(admitted(both.flat()), 25, 'Cluster: 200 concurrent requests on two instances admit exactly 25')
  const ids = Array.from({ length: 300 }, (_, i) => `caller-${i % 30}`)
  const spread = await Promise.all(ids.map(async (id, i) => (await (i % 2 === 0 ? a : b).app.inject({ url: '/id', headers: { 'x-id': id } })).statusCode))
  t.equal(admitted(spread), 150, '30 callers (30 hash tags, every master) × 10 requests, limit 5: exactly 5 each')
  const calls = await clusterScriptCalls() - before
  t.ok(calls < 250, `500 decisions in ${calls} script calls: coalesced per hash tag`)
  t.equal(a.app.rateLimit.stats().degraded + b.app.rateLimit.stats().degraded, 0, 'no decision degraded')
}

/**
 * A turn that blocks Node longer than `timeout` right after the flush: the
 * decision timer fires before node-redis (which writes one turn later) has
 * even written the call. Redis was never silent on it, so the decision must
 * still come from Redis (the timeout rule measures Redis, not Node's lag).
 */
async function lagAfterFlush (t: Test, flavour: ClientFlavour): Promise<void> {
  const { app } = await instance(t, async () => await flavour.standalone(shared.port), { prefix: uniquePrefix('lag') })
  t.equal((await app.inject('/count')).statusCode, 200, 'warm')
  for (let i = 0; i < 5; i++) {
    const decision = app.rateLimit.consume('GET /count', { ip: '10.0.0.1' })
    // consume() reaches the dispatcher after a few microtasks; queued after its flush, the block
    // runs in the same check phase, so the next turn starts with the decision timer expired.
    for (let k = 0; k < 20; k++) await null
    setImmediate(() => { const end = performance.now() + TIMEOUT + 30; while (performance.now() < end);/* block */ })
    const result = await decision
    t.equal(result.degraded, false, `decision ${i + 1}: from Redis, not degraded, after ${TIMEOUT + 30} ms of Node lag`)
  }
}

async function clusterScriptCalls (): Promise<number> {
  let calls = 0
  for (const node of cluster.nodes) calls += await scriptCalls(cluster.admin(node.port))
  return calls
}

for (const flavour of FLAVOURS) {
  test(`${flavour.name}: exact with two instances, a flushed library, a flood, override polling`, async (t) => { await exactness(t, flavour) })
  test(`${flavour.name}: lost reply counted once, server hung, port closed`, async (t) => { await faults(t, flavour) })
  test(`${flavour.name}: Cluster, exact and batched by hash tag`, async (t) => { await clusterBatching(t, flavour) })
  test(`${flavour.name}: Node blocked past the timeout right after the flush: still decided by Redis`, async (t) => { await lagAfterFlush(t, flavour) })
}
