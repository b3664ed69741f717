/**
 * Concurrency blocks (`concurrency: N`): at most N requests of one identity
 * in flight across the fleet, slots released once when the raw response
 * closes, reclaimed after `lease` when an instance stops renewing them.
 * Real Redis (a private standalone server and a 3-master Cluster) and the
 * memory store. test/concurrency.test.ts is the fleet exactness test of rate
 * blocks; this file is about requests in flight.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { PassThrough } from 'node:stream'
import { test, type Test } from 'tap'
import { Cluster, Redis } from 'ioredis'
import type { FastifyInstance } from 'fastify'
import { buildApp, TestClock } from './helpers/app.js'
import { uniquePrefix } from './helpers/redis.js'
import { pluginClient, startCluster, startServer, waitFor, type ManagedCluster, type ManagedServer } from './helpers/topologies.js'
import type { RateLimitPluginOptions } from '../lib/index.js'

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

let server: ManagedServer
let cluster: ManagedCluster
const closers: Array<() => Promise<void> | void> = []

test('setup: a private redis-server and a 3-master cluster', async () => {
  server = await startServer()
  cluster = await startCluster()
})

/** A client of the topology, ready (the plugin never sends to a client that is not). */
async function client (topology: 'standalone' | 'cluster'): Promise<Redis | Cluster> {
  const redis = topology === 'standalone'
    ? pluginClient('recommended', server.port)
    : new Cluster(cluster.startupNodes, { enableOfflineQueue: false, redisOptions: { commandTimeout: 5000, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 } })
  redis.on('error', () => {})
  closers.push(() => { redis.disconnect() })
  if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve))
  return redis
}

/** The slots held under a prefix: every member of every `:cc` key (live or not yet swept). */
async function heldSlots (topology: 'standalone' | 'cluster', prefix: string): Promise<number> {
  const admins = topology === 'standalone' ? [new Redis({ port: server.port, host: '127.0.0.1' })] : cluster.nodes.map((node) => cluster.admin(node.port))
  let total = 0
  for (const admin of admins) {
    for (const key of await admin.keys(`${prefix}:*cc*`)) total += await admin.zcard(key)
  }
  if (topology === 'standalone') admins[0]?.disconnect()
  return total
}

/** A gate handlers wait on, counting how many run at once. */
function gauge (): { enter: () => void, leave: () => void, running: number, max: number } {
  const g = { running: 0, max: 0, enter: () => { g.running++; g.max = Math.max(g.max, g.running) }, leave: () => { g.running-- } }
  return g
}

async function app (t: Test, redis: Redis | Cluster | 'memory', prefix: string, options: RateLimitPluginOptions = {}): Promise<FastifyInstance> {
  const built = await buildApp(redis === 'memory' ? { store: 'memory', ...options } : { redis, prefix, ...options })
  t.teardown(async () => { await built.close() })
  return built
}

for (const topology of ['standalone', 'cluster'] as const) {
  test(`${topology}: 2 instances, 200 concurrent slow requests of one identity, concurrency 5: never more than 5 run at once, all slots free afterwards`, async (t) => {
    const prefix = uniquePrefix('cc')
    const running = gauge()
    const apps: FastifyInstance[] = []
    for (let i = 0; i < 2; i++) {
      const instance = await app(t, await client(topology), prefix)
      instance.get('/export', { config: { rateLimit: { concurrency: 5, by: 'ip' } } }, async () => {
        running.enter()
        await sleep(15)
        running.leave()
        return { ok: true }
      })
      await instance.ready()
      apps.push(instance)
    }
    // The private server's command counts (ours alone: CONFIG RESETSTAT touches no other test's server).
    const stats = topology === 'standalone' ? new Redis({ port: server.port, host: '127.0.0.1' }) : undefined
    await stats?.config('RESETSTAT')
    const replies = await Promise.all(Array.from({ length: 200 }, async (_, i) => await (apps[i % 2] as FastifyInstance).inject({ url: '/export' })))
    const codes = replies.map((reply) => reply.statusCode)
    t.ok(codes.every((code) => code === 200 || code === 429), 'every reply is 200 or 429')
    t.ok(codes.filter((code) => code === 200).length >= 5, `some were admitted (${codes.filter((code) => code === 200).length})`)
    t.ok(running.max <= 5, `at most 5 handlers ran at once (saw ${running.max})`)
    t.ok(running.max >= 1)
    for (const instance of apps) t.equal(instance.rateLimit.stats().degraded, 0, 'every decision came from Redis')
    const refused = replies.find((reply) => reply.statusCode === 429)
    if (refused !== undefined) {
      t.equal(refused.headers['retry-after'], '1', 'a refusal says Retry-After: 1')
      t.match(refused.headers['content-type'], /application\/problem\+json/)
      t.same(refused.json()['violated-policies'], ['get-export'], 'and names the policy')
    }
    await waitFor('every release reached Redis', async () => await heldSlots(topology, prefix) === 0, 5000)
    t.equal(await heldSlots(topology, prefix), 0, 'no slot is left held')
    if (stats !== undefined) {
      const zrem = Number(/cmdstat_zrem:calls=(\d+)/.exec(await stats.info('commandstats'))?.[1] ?? 0)
      t.equal(zrem, codes.filter((code) => code === 200).length, 'one release (ZREM) per admitted request, never two')
      stats.disconnect()
    }
  })

  test(`${topology}: a concurrency block beside a rate block is decided all-or-nothing with it`, async (t) => {
    const prefix = uniquePrefix('cr')
    const instance = await app(t, await client(topology), prefix)
    let open: () => void = () => {}
    const gate = new Promise<void>((resolve) => { open = resolve })
    instance.get('/job', { config: { rateLimit: [{ concurrency: 2, name: 'jobs-in-flight', by: 'ip' }, { limit: 1, window: '1m', name: 'jobs-per-minute', by: 'ip' }] } }, async () => {
      await gate
      return { ok: true }
    })
    await instance.ready()
    const first = instance.inject({ url: '/job' })
    await waitFor('the first request holds its slot', async () => await heldSlots(topology, prefix) === 1)
    const second = await instance.inject({ url: '/job' })
    t.equal(second.statusCode, 429, 'the rate block refuses the second')
    t.same(second.json()['violated-policies'], ['jobs-per-minute'])
    t.equal(await heldSlots(topology, prefix), 1, 'the refused request took no slot')
    open()
    t.equal((await first).statusCode, 200)
    t.match((await first).headers['ratelimit-policy'], /"jobs-in-flight";q=2;qu="concurrent-requests", "jobs-per-minute";q=1;w=60/)
    t.match((await first).headers.ratelimit, /^"jobs-in-flight";r=1, "jobs-per-minute";r=0/)
    await waitFor('released', async () => await heldSlots(topology, prefix) === 0)
  })
}

/** One route per way a request can end, each with concurrency 1, on a real socket. */
function endings (instance: FastifyInstance, started: Set<string>): void {
  const block = { concurrency: 1, by: 'ip' } as const
  instance.get('/throw', { config: { rateLimit: block } }, async () => { throw new Error('boom') })
  instance.get('/stream', { config: { rateLimit: block } }, async (_request, reply) => {
    const body = new PassThrough()
    setTimeout(() => { body.write('a') }, 5)
    setTimeout(() => { body.end('b') }, 30)
    return await reply.send(body)
  })
  instance.get('/abort', { config: { rateLimit: block } }, async (request) => {
    started.add('abort')
    // A handler that goes on working after an abort must watch request.signal: its slot is free already.
    await new Promise((resolve) => { request.signal.addEventListener('abort', resolve) })
    return { late: true }
  })
  instance.get('/slow', { config: { rateLimit: block } }, async () => {
    started.add('slow')
    await sleep(400)
    return { late: true }
  })
}

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: slots are released once on a throw, a streaming response, a client abort and a request timeout`, async (t) => {
    const prefix = uniquePrefix('ce')
    const started = new Set<string>()
    const instance = await app(t, store === 'redis' ? await client('standalone') : 'memory', prefix, {})
    endings(instance, started)
    await instance.listen({ port: 0, host: '127.0.0.1' })
    const { port } = instance.server.address() as AddressInfo
    const get = async (path: string, options: { abortAfter?: string, cut?: boolean } = {}): Promise<number> => await new Promise((resolve, reject) => {
      const request = http.get({ port, host: '127.0.0.1', path }, (response) => {
        response.resume()
        response.on('end', () => { resolve(response.statusCode ?? 0) })
      })
      request.on('error', (error) => { if (options.abortAfter === undefined && options.cut !== true) reject(error); else resolve(0) })
      if (options.abortAfter !== undefined) {
        const name = options.abortAfter
        waitFor(`the ${name} handler started`, () => started.has(name)).then(() => { request.destroy() }, reject)
      }
    })
    const free = async (path: string): Promise<void> => {
      await waitFor(`${path}: the slot is free`, async () => (await instance.rateLimit.peek(`GET ${path}`, { ip: '127.0.0.1' })).allowed)
    }
    t.equal(await get('/throw'), 500)
    t.equal(await get('/throw'), 500, 'a throw released the slot: the next request is admitted')
    t.equal(await get('/stream'), 200)
    t.equal(await get('/stream'), 200, 'a streamed response released it once the stream ended')
    t.equal(await get('/abort', { abortAfter: 'abort' }), 0)
    await free('/abort')
    t.pass('a client abort released the slot while the handler still ran')
    // The server's socket timeout (Fastify's connectionTimeout) cuts the slow request: the socket is destroyed.
    instance.server.setTimeout(100)
    t.equal(await get('/slow', { cut: true }), 0, 'the server cut the connection')
    t.ok(started.has('slow'))
    await free('/slow')
    t.pass('a request cut by the server\'s timeout released its slot')
    if (store === 'redis') {
      await waitFor('no slot held', async () => await heldSlots('standalone', prefix) === 0)
      t.equal(await heldSlots('standalone', prefix), 0)
    }
  })

  test(`${store}: acquire() takes a slot for work outside HTTP and release() gives it back, once`, async (t) => {
    const prefix = uniquePrefix('ca')
    const instance = await app(t, store === 'redis' ? await client('standalone') : 'memory', prefix, {
      user: () => undefined,
      policies: { exports: { concurrency: 2, by: 'user' } }
    })
    await instance.ready()
    const a = await instance.rateLimit.acquire('exports', { user: 'alice' })
    const b = await instance.rateLimit.acquire('exports', { user: 'alice' })
    const c = await instance.rateLimit.acquire('exports', { user: 'alice' })
    t.same([a.allowed, b.allowed, c.allowed], [true, true, false], 'two slots, the third refused')
    t.equal(c.retryAfterMs, 1000)
    t.ok((await instance.rateLimit.acquire('exports', { user: 'bob' })).allowed, 'another identity has its own slots')
    c.release()
    a.release()
    a.release()
    await waitFor('the slot freed', async () => (await instance.rateLimit.peek('exports', { user: 'alice' })).allowed)
    const d = await instance.rateLimit.acquire('exports', { user: 'alice' })
    const e = await instance.rateLimit.acquire('exports', { user: 'alice' })
    t.same([d.allowed, e.allowed], [true, false], 'a released one slot (twice called, once given back); b still holds its own')
    await t.rejects(instance.rateLimit.acquire('GET /none', { user: 'alice' }), { code: 'FST_RRL_UNKNOWN_POLICY' })
  })

  test(`${store}: a runtime override changes a concurrency block's N, and clearing it restores N`, async (t) => {
    const prefix = uniquePrefix('co')
    const instance = await app(t, store === 'redis' ? await client('standalone') : 'memory', prefix, {
      user: () => undefined,
      policies: { exports: { concurrency: 1, by: 'user' } }
    })
    await instance.ready()
    const record = await instance.rateLimit.setOverride({ target: 'exports', limit: 3, ttl: 60_000, actor: 'test', reason: 'more exports' })
    const held = [await instance.rateLimit.acquire('exports', { user: 'carol' }), await instance.rateLimit.acquire('exports', { user: 'carol' }), await instance.rateLimit.acquire('exports', { user: 'carol' })]
    const fourth = await instance.rateLimit.acquire('exports', { user: 'carol' })
    t.same([...held.map((slot) => slot.allowed), fourth.allowed], [true, true, true, false], 'three slots under the override, the fourth refused')
    t.equal(held[0]?.limit, 3, 'the decision reports the overridden N')
    for (const slot of held) slot.release()
    t.ok(await instance.rateLimit.clearOverride(record.id, { actor: 'test', reason: 'done' }), 'cleared')
    await waitFor('every slot freed', async () => (await instance.rateLimit.peek('exports', { user: 'carol' })).allowed)
    const [first, second] = [await instance.rateLimit.acquire('exports', { user: 'carol' }), await instance.rateLimit.acquire('exports', { user: 'carol' })]
    t.same([first.allowed, second.allowed], [true, false], 'back to one slot')
    first.release()
  })
}

// The keeper is the same for both stores; the memory store's renewal is held to the script's by test/internals/slots-property.test.ts.
test('redis: a held slot is renewed every lease / 3, so it outlives its first lease; released, it frees at once', async (t) => {
  const prefix = uniquePrefix('cn')
  const clock = new TestClock()
  const instance = await app(t, await client('standalone'), prefix, { clock: clock.read, lease: '1s' })
  instance.get('/long', { config: { rateLimit: { concurrency: 1, by: 'ip' } } }, async () => ({ ok: true }))
  await instance.ready()
  const slot = await instance.rateLimit.acquire('GET /long', { ip: '127.0.0.1' })
  t.ok(slot.allowed)
  const held = async (): Promise<boolean> => !(await instance.rateLimit.peek('GET /long', { ip: '127.0.0.1' })).allowed
  for (let lease = 1; lease <= 3; lease++) {
    // 900 ms of the limiter's clock, then wait for a renewal to restart the lease from there.
    clock.advance(900)
    const before = await leaseEnd(prefix)
    await waitFor('a renewal', async () => await leaseEnd(prefix) > before, 5000)
    t.ok(await held(), `still held ${lease * 900} ms after it was taken, with a lease of 1 s`)
  }
  slot.release()
  await waitFor('released', async () => !(await held()))
  clock.advance(10_000)
  t.equal((await instance.inject({ url: '/long' })).statusCode, 200)
})

/** The latest lease expiry under a prefix (standalone). */
async function leaseEnd (prefix: string): Promise<number> {
  const admin = new Redis({ port: server.port, host: '127.0.0.1' })
  try {
    let last = 0
    for (const key of await admin.keys(`${prefix}:*cc*`)) {
      const top = await admin.zrange(key, '-1', '-1', 'WITHSCORES')
      last = Math.max(last, Number(top[1] ?? 0))
    }
    return last
  } finally {
    admin.disconnect()
  }
}

test('an instance SIGKILLed with slots held: a short lease frees them', async (t) => {
  const prefix = uniquePrefix('ck')
  const { spawnOwned } = await import('./helpers/processes.js')
  const child = spawnOwned(process.execPath, ['--import', 'tsx', new URL('./helpers/inflight-child.ts', import.meta.url).pathname, String(server.port), prefix], { stdio: ['ignore', 'pipe', 'inherit'] })
  const held = await new Promise<string>((resolve) => { child.stdout?.once('data', (data: Buffer) => { resolve(String(data).trim()) }) })
  t.equal(held, 'held 3', 'the child holds 3 slots (its handlers never finish)')
  t.equal(await heldSlots('standalone', prefix), 3)
  child.kill('SIGKILL')
  const instance = await app(t, await client('standalone'), prefix, { lease: '1s' })
  instance.get('/held', { config: { rateLimit: { concurrency: 3, by: 'ip' } } }, async () => ({ ok: true }))
  await instance.ready()
  t.equal((await instance.inject({ url: '/held' })).statusCode, 429, 'right after the kill its slots still count')
  await waitFor('the lease reclaimed the slots', async () => (await instance.inject({ url: '/held' })).statusCode === 200, 5000, 100)
  t.pass('a request is admitted again once the dead instance stopped renewing for a lease')
})

test('Redis hung while slots are held: onRedisError decides, and no slot outlives its lease', async (t) => {
  const hung = await startServer()
  t.teardown(async () => { await hung.stop() })
  const prefix = uniquePrefix('ch')
  const redis = pluginClient('recommended', hung.port)
  closers.push(() => { redis.disconnect() })
  if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve))
  const instance = await app(t, redis, prefix, { lease: '1s' })
  let open: () => void = () => {}
  const gate = new Promise<void>((resolve) => { open = resolve })
  // Requests with x-hold wait for the gate (holding their slot); the others answer at once.
  let holding = 0
  const handler = async (request: { headers: Record<string, unknown> }): Promise<object> => {
    if (request.headers['x-hold'] === '1') {
      holding++
      await gate
    }
    return { ok: true }
  }
  instance.get('/open', { config: { rateLimit: { concurrency: 1, by: 'ip', onRedisError: 'open' } } }, handler)
  instance.get('/closed', { config: { rateLimit: { concurrency: 1, by: 'ip', onRedisError: 'closed' } } }, handler)
  instance.get('/local', { config: { rateLimit: { concurrency: 2, by: 'ip', onRedisError: 'local', localLimit: 1 } } }, handler)
  await instance.ready()
  const admin = new Redis({ port: hung.port })
  closers.push(() => { admin.disconnect() })
  const hold = { 'x-hold': '1' }
  const held = [instance.inject({ url: '/open', headers: hold }), instance.inject({ url: '/closed', headers: hold })]
  await waitFor('both slots taken', async () => (await admin.keys(`${prefix}:*`)).length === 2)
  hung.pause()
  const localHeld = instance.inject({ url: '/local', headers: hold })
  await waitFor('the local limiter gave its one slot', () => holding === 3)
  const during = await Promise.all([instance.inject({ url: '/open' }), instance.inject({ url: '/closed' }), instance.inject({ url: '/local' })])
  t.same(during.map((reply) => reply.statusCode), [200, 503, 429], "'open' lets the request run, 'closed' refuses 503, 'local' caps at localLimit (1) on this instance")
  await sleep(1500)
  hung.resume()
  const now = Date.now()
  for (const key of await admin.keys(`${prefix}:*`)) {
    const scores = (await admin.zrange(key, '0', '-1', 'WITHSCORES')).filter((_, i) => i % 2 === 1).map(Number)
    t.ok(scores.every((expiry) => expiry <= now + 1000 + 200), `${key}: every slot's lease ends within a lease of now`)
  }
  open()
  await Promise.all([...held, localHeld])
  await waitFor('released after the resume', async () => (await admin.keys(`${prefix}:*`)).length === 0, 5000)
})

test('startup errors name the field', async (t) => {
  const cases: Array<[object, string]> = [
    [{ concurrency: 2, cost: 2 }, 'cost'],
    [{ concurrency: 2, penalty: { after: 1, for: '1m' } }, 'penalty'],
    [{ concurrency: 2, refundOn: () => true }, 'refundOn'],
    [{ concurrency: 2, requestLimit: () => 3 }, 'requestLimit'],
    [{ concurrency: 2, settle: () => 1 }, 'settle'],
    [{ concurrency: 2, window: '1m' }, 'concurrency'],
    [{ concurrency: 2, limit: 5 }, 'limit'],
    [{ concurrency: 0 }, 'concurrency'],
    [{ concurrency: { pro: 3 } }, 'concurrency']
  ]
  for (const [block, field] of cases) {
    const instance = await buildApp({ store: 'memory' })
    await t.rejects(async () => {
      instance.get('/x', { config: { rateLimit: block as never } }, async () => 'x')
      await instance.ready()
    }, { code: 'FST_RRL_INVALID_BLOCK', message: new RegExp('`' + field + '`') }, `${JSON.stringify(Object.keys(block))}: names ${field}`)
    await instance.close()
  }
  await t.rejects(buildApp({ store: 'memory', lease: 500 }), { code: 'FST_RRL_INVALID_OPTION', message: /lease/ })
  await t.rejects(buildApp({ store: 'memory', notFound: { concurrency: 2 } as never }), { code: 'FST_RRL_INVALID_OPTION', message: /notFound/ })
  const globals = await buildApp({ store: 'memory', globalLimits: [{ concurrency: 1 }] })
  globals.get('/x', { config: { rateLimit: { limit: 10, window: '1m' } } }, async () => 'x')
  await globals.ready()
  t.match(globals.rateLimit.policies()[0]?.limits[1], { algorithm: 'concurrency', limit: 1, windowMs: 60_000, global: true }, 'globalLimits may hold one; policies() shows its slots and lease')
  await globals.close()
})

test('teardown', async () => {
  for (const close of closers) await close()
  await cluster.stop()
  await server.stop()
})
