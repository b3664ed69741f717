import { test, type Test } from 'tap'
import { readFileSync } from 'node:fs'
import diagnostics from 'node:diagnostics_channel'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { ALGORITHMS, CHANNELS, type RateLimitPluginOptions, type StoreErrorMessage } from '../lib/index.js'
import { buildBatchScript } from '../scripts/build/assemble.js'
import { buildLibrary } from '../scripts/build/library.js'
import { buildApp } from './helpers/app.js'
import { createClient, readState, scriptCalls } from './helpers/redis.js'
import { adminClient, pluginClient, startProxy, startServer, waitFor, type ManagedServer } from './helpers/topologies.js'
import { freePort } from './helpers/processes.js'

/*
 * Coalesced decisions, counted on a private redis-server (INFO commandstats):
 * the decisions of one event-loop turn leave as one script call (at most
 * maxBatch decisions each), every decision inside stays atomic on its own, a
 * bad key fails only its own decision, a lost reply is counted once, and the
 * number of decisions waiting on Redis is capped.
 */
const LIMIT = 25

interface Setup { server: ManagedServer, admin: Redis, app: FastifyInstance, redis: Redis }

async function setup (t: Test, options: RateLimitPluginOptions = {}, redis?: Redis, server?: ManagedServer): Promise<Setup> {
  server ??= await startServer([], { label: 'coalesce' })
  const admin = adminClient(server.port)
  redis ??= createClient(server)
  // The fleet's picture is published by EVAL: off here, where EVAL calls are counted.
  const app = await buildApp({ redis, prefix: 'co', denyCache: false, picture: false, user: (req) => req.headers['x-user'] as string | undefined, ...options })
  app.get('/x', { config: { rateLimit: { limit: LIMIT, window: '1h', by: 'user' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { limit: LIMIT, window: '1h', by: 'user', onRedisError: 'closed' } } }, async (req) => req.rateLimit)
  app.get('/count', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1_000_000, window: '1h', by: 'user' } } }, async (req) => req.rateLimit)
  await app.ready()
  const client = redis
  t.teardown(async () => {
    await app.close()
    client.disconnect()
    admin.disconnect()
    await server.stop()
  })
  return { server, admin, app, redis }
}

const burst = async (app: FastifyInstance, count: number, path = '/x', user = (i: number): string => 'u1'): Promise<number[]> =>
  await Promise.all(Array.from({ length: count }, async (_, i) => (await app.inject({ url: path, headers: { 'x-user': user(i) } })).statusCode))

test('the decisions of one turn leave as one script call; batchWrites: false sends one call each', async (t) => {
  for (const batchWrites of [true, false]) {
    const { app, admin } = await setup(t, { batchWrites })
    const before = await scriptCalls(admin)
    const statuses = await burst(app, 40)
    const calls = await scriptCalls(admin) - before
    t.equal(statuses.filter((code) => code === 200).length, LIMIT, `batchWrites ${batchWrites}: exactly the limit admitted`)
    t.equal(statuses.filter((code) => code === 429).length, 40 - LIMIT)
    t.equal(calls, batchWrites ? 1 : 40, `batchWrites ${batchWrites}: ${calls} script calls for 40 decisions`)
    t.equal(app.rateLimit.stats().degraded, 0)
  }
})

test('maxBatch caps the decisions of one script call', async (t) => {
  const { app, admin } = await setup(t, { maxBatch: 128 })
  const before = await scriptCalls(admin)
  const statuses = await burst(app, 300, '/x', (i) => `user-${i}`)
  t.equal(await scriptCalls(admin) - before, 3, '300 decisions of one turn: 128 + 128 + 44')
  t.equal(statuses.filter((code) => code === 200).length, 300, 'each caller its own bucket: all admitted')
})

/** The victim's /closed key turned into a hash (WRONGTYPE for every script), and the store errors published from then on. */
async function breakVictimKey (t: Test, app: FastifyInstance, admin: Redis): Promise<{ key: string, errors: StoreErrorMessage[] }> {
  await burst(app, 1, '/closed', () => 'victim')
  const [key] = await admin.keys('co:{GET:/closed|*')
  t.ok(key, 'the victim key exists')
  await admin.del(key as string)
  await admin.hset(key as string, 'not', 'a counter')
  const errors: StoreErrorMessage[] = []
  const onError = (message: unknown): void => { errors.push(message as StoreErrorMessage) }
  diagnostics.subscribe(CHANNELS.storeError, onError)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.storeError, onError) })
  return { key: key as string, errors }
}

test('a WRONGTYPE key fails only its own decision in a batch', async (t) => {
  const { app, admin } = await setup(t)
  const { key, errors } = await breakVictimKey(t, app, admin)
  const before = await scriptCalls(admin)
  const users = (i: number): string => i === 7 ? 'victim' : `good-${i % 3}`
  const results = await Promise.all(Array.from({ length: 30 }, async (_, i) => {
    const res = await app.inject({ url: '/closed', headers: { 'x-user': users(i) } })
    return { user: users(i), status: res.statusCode }
  }))
  t.equal(await scriptCalls(admin) - before, 1, 'one script call for the 30 decisions')
  t.same(results.filter((r) => r.status === 503).map((r) => r.user), ['victim'], 'only the decision on the bad key failed (fail-closed: 503)')
  t.equal(results.filter((r) => r.status === 200).length, 29, 'every other decision was taken and admitted')
  t.equal(errors.length, 1)
  t.equal(errors[0]?.cause, 'script-error')
  t.match((errors[0]?.error as Error).message, /WRONGTYPE/)
  t.equal(await admin.type(key), 'hash', 'the bad key was left alone')
  t.equal(app.rateLimit.stats().degraded, 1)
})

test('a decision alone (its algorithm\'s lone script) fails on a WRONGTYPE key as it would in a batch', async (t) => {
  const { app, admin } = await setup(t)
  const { errors } = await breakVictimKey(t, app, admin)
  const res = await app.inject({ url: '/closed', headers: { 'x-user': 'victim' } })
  t.equal(res.statusCode, 503, 'fail-closed: 503')
  t.same(errors.map((e) => e.cause), ['script-error'], 'a script error of that decision, not an unavailable Redis')
  t.match((errors[0]?.error as Error).message, /WRONGTYPE/)
  t.equal((await app.inject({ url: '/closed', headers: { 'x-user': 'someone-else' } })).statusCode, 200, 'the next decision alone is taken')
})

/** FCALL, EVALSHA and EVAL calls a server has counted (INFO commandstats). */
async function scriptCommands (admin: Redis): Promise<Record<'fcall' | 'evalsha' | 'eval', number>> {
  const stats = await admin.info('commandstats')
  const calls = (name: string): number => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0)
  return { fcall: calls('fcall'), evalsha: calls('evalsha'), eval: calls('eval') }
}

/** Resolves once the server holds the store's library again (loaded behind the EVAL), within 2 s. */
async function libraryLoaded (admin: Redis): Promise<boolean> {
  const name = buildLibrary().name
  for (let i = 0; i < 200; i++) {
    const list = await admin.call('FUNCTION', 'LIST', 'LIBRARYNAME', name) as unknown[]
    if (list.length > 0) return true
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return false
}

test('"Function not found" after FUNCTION FLUSH: a decision alone is sent again as EVAL of the script, decided once; the library is loaded again', async (t) => {
  const { app, admin } = await setup(t)
  await burst(app, 1, '/count', () => 'c')
  t.same(await scriptCommands(admin), { fcall: 1, evalsha: 0, eval: 0 }, 'decisions go by FCALL')
  await admin.call('FUNCTION', 'FLUSH')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.ok(await libraryLoaded(admin), 'the store loaded its library again')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.equal(app.rateLimit.stats().degraded, 0)
  t.same(await scriptCommands(admin), { fcall: 3, evalsha: 0, eval: 1 }, 'one FCALL met "Function not found", one EVAL answered it, then FCALL again')
  t.same(await admin.script('EXISTS', buildBatchScript().sha), [1], 'the EVAL was of the script the EVALSHA route uses (its cache filled too)')
  const [key] = await admin.keys('co:{GET:/count|*')
  t.equal((await readState(admin, key as string))?.[1], 3, 'each decision counted exactly once')
})

test('"Function not found" after FUNCTION FLUSH: the batch is sent again as EVAL, decided once, nothing degraded', async (t) => {
  const { app, admin } = await setup(t)
  await burst(app, 1, '/count', () => 'c')
  await admin.call('FUNCTION', 'FLUSH')
  const statuses = await burst(app, 50, '/count', () => 'c')
  t.equal(statuses.filter((code) => code === 200).length, 50)
  t.equal(app.rateLimit.stats().degraded, 0)
  t.equal((await scriptCommands(admin)).eval, 1, 'the batch\'s one call, sent again as EVAL')
  const [key] = await admin.keys('co:{GET:/count|*')
  t.equal((await readState(admin, key as string))?.[1], 51, 'every decision counted exactly once')
})

test('a Redis that refuses FUNCTION: decisions go by EVALSHA, and NOSCRIPT after SCRIPT FLUSH is answered by one EVAL', async (t) => {
  const server = await startServer(['--rename-command', 'FUNCTION', ''], { label: 'coalesce-no-functions' })
  const { app, admin } = await setup(t, {}, undefined, server)
  await burst(app, 1, '/count', () => 'c')
  t.same(await scriptCommands(admin), { fcall: 1, evalsha: 1, eval: 0 }, 'FUNCTION LOAD was refused at ready() and one FCALL found no library loaded by hand: the decision went by EVALSHA')
  await admin.script('FLUSH')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.same(await admin.script('EXISTS', buildBatchScript().sha), [1], 'the EVAL loaded the script again')
  await admin.script('FLUSH')
  const statuses = await burst(app, 50, '/count', () => 'c')
  t.equal(statuses.filter((code) => code === 200).length, 50)
  t.same(await scriptCommands(admin), { fcall: 1, evalsha: 4, eval: 2 }, 'each NOSCRIPT answered by one EVAL, then EVALSHA again')
  t.equal(app.rateLimit.stats().degraded, 0)
  const [key] = await admin.keys('co:{GET:/count|*')
  t.equal((await readState(admin, key as string))?.[1], 53, 'every decision counted exactly once')
})

test('FUNCTION LOAD refused for a while (OOM at ready()): functions stay on, and the first call loads the library once memory is free', async (t) => {
  const server = await startServer(['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'], { label: 'coalesce-oom' })
  const filler = createClient(server)
  t.teardown(() => { filler.disconnect() })
  let oom = ''
  for (let i = 0; oom === '' && i < 1000; i++) {
    try { await filler.set(`filler:${i}`, 'x'.repeat(64 * 1024)) } catch (error) { oom = (error as Error).message }
  }
  t.match(oom, /^OOM/, 'the server is full')
  const { app, admin } = await setup(t, {}, undefined, server)
  t.match(await admin.info('commandstats'), /cmdstat_function\|load:calls=0,[^\r\n]*rejected_calls=1/, 'ready() met OOM on FUNCTION LOAD')
  await filler.flushall()
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.ok(await libraryLoaded(admin), 'the library was loaded behind the first call')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.same(await scriptCommands(admin), { fcall: 2, evalsha: 0, eval: 1 }, '"Function not found" once, answered by EVAL; then FCALL: the route never left functions')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('Redis absent at ready(), then one that refuses FUNCTION: the route change is logged once, decisions go by EVALSHA', async (t) => {
  const port = await freePort()
  const redis = pluginClient('recommended', port)
  const lines: Array<{ level: number, msg: string, cause?: string }> = []
  const app = await buildApp({ redis, prefix: 'co', denyCache: false, picture: false, user: (req) => req.headers['x-user'] as string | undefined }, { logger: { level: 'debug', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  app.get('/count', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1_000_000, window: '1h', by: 'user' } } }, async () => 'ok')
  await app.ready()
  const server = await startServer(['--rename-command', 'FUNCTION', ''], { port, label: 'coalesce-late' })
  const admin = adminClient(port)
  t.teardown(async () => { await app.close(); redis.disconnect(); admin.disconnect(); await server.stop() })
  await waitFor('plugin client ready', () => redis.status === 'ready', 8000, 5)
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  const refusal = (): typeof lines => lines.filter((line) => line.msg.includes('Redis Functions refused'))
  await waitFor('the refusal logged', () => refusal().length > 0, 2000, 5)
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.equal(refusal().length, 1, 'one debug line')
  t.match(refusal()[0]?.cause, /unknown command 'FUNCTION'/)
  t.notMatch(refusal()[0]?.cause, /args beginning|#!lua/, 'without the Lua Redis quotes after the error')
  t.same(await scriptCommands(admin), { fcall: 2, evalsha: 1, eval: 1 }, '"Function not found", one EVAL (and one FCALL finding no library loaded by hand), then EVALSHA')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('FCALL refused after ready() (an ACL changed): the call is sent again as EVAL, and later ones go by EVALSHA', async (t) => {
  const { app, admin } = await setup(t)
  await burst(app, 1, '/count', () => 'c')
  await admin.call('ACL', 'SETUSER', 'default', '-fcall')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200, 'the refused FCALL was answered by an EVAL')
  t.equal((await app.inject({ url: '/count', headers: { 'x-user': 'c' } })).statusCode, 200)
  t.equal(app.rateLimit.stats().degraded, 0)
  const rejected = Number(/cmdstat_fcall:[^\r\n]*rejected_calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0)
  t.equal(rejected, 1, 'one FCALL refused (NOPERM)')
  t.same(await scriptCommands(admin), { fcall: 1, evalsha: 1, eval: 1 }, 'then one EVAL, then EVALSHA')
  const [key] = await admin.keys('co:{GET:/count|*')
  t.equal((await readState(admin, key as string))?.[1], 3, 'each decision counted exactly once')
})

/** The commands and channel docs/operations.md ("ACL") says the plugin's user needs, beside the route's script commands. */
const ACL_DATA = '+time +get +set +del +incrby +pexpire +pttl +zadd +zcard +zcount +zrange +zrangebyscore +zrank +zrem +zremrangebyscore +zscore +hgetall +hget +hset +hdel +xadd +xrevrange +publish +subscribe &frrl:slots'

for (const [route, commands] of [['Functions', '+fcall +function|load +eval'], ['EVALSHA', '+evalsha +script|load +eval']] as const) {
  test(`an ACL user with exactly the documented commands (${route} route): every algorithm decides, and a flushed library or script cache degrades nothing`, async (t) => {
    const server = await startServer([], { label: `coalesce-acl-${route}` })
    const admin = adminClient(server.port)
    // ioredis's ready check sends INFO; the rest is what docs/operations.md lists.
    await admin.call('ACL', 'SETUSER', 'limiter', 'on', '>secret', '~*', '-@all', ...`${ACL_DATA} ${commands} +info`.split(' '))
    const redis = createClient(server, { username: 'limiter', password: 'secret' })
    const app = await buildApp({ redis, prefix: 'acl', denyCache: false })
    for (const algorithm of ALGORITHMS) app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: 2, window: '1m' } } }, async () => 'ok')
    // A concurrency block that waits: its queue (ZRANK), the wake-up PUBLISH at release and the plugin's SUBSCRIBE.
    app.get('/wait', { config: { rateLimit: { concurrency: 1, wait: '3s', onRedisError: 'closed' } } }, async () => await new Promise((resolve) => setTimeout(() => { resolve('ok') }, 100)))
    await app.ready()
    t.teardown(async () => { await app.close(); redis.disconnect(); admin.disconnect(); await server.stop() })
    const statuses = async (): Promise<number[]> => await Promise.all(ALGORITHMS.map(async (algorithm) => (await app.inject(`/${algorithm}`)).statusCode))
    t.same(await statuses(), ALGORITHMS.map(() => 200))
    await admin.call('FUNCTION', 'FLUSH')
    await admin.script('FLUSH')
    t.same(await statuses(), ALGORITHMS.map(() => 200), 'after FUNCTION FLUSH and SCRIPT FLUSH')
    t.same(await statuses(), ALGORITHMS.map(() => 429), 'the third request of each is refused: every decision counted')
    t.equal(app.rateLimit.stats().degraded, 0, 'nothing degraded')
    const stats = await admin.info('commandstats')
    t.match(stats, route === 'Functions' ? /cmdstat_fcall:calls=[1-9]/ : /cmdstat_evalsha:calls=[1-9]/, `decisions went by the ${route} route`)
    const started = Date.now()
    const waits = await Promise.all([0, 1, 2].map(async () => (await app.inject('/wait')).statusCode))
    t.same(waits, [200, 200, 200], 'three at once on one slot: each waits its turn')
    t.ok(Date.now() - started < 900, `the waiters were woken by the release's PUBLISH, not by their 1 s poll (${Date.now() - started} ms)`)
    // The fleet's picture (published at ready), a ban and its audit entry: the console's reads and writes.
    t.equal((await app.rateLimit.fleet()).instances.length, 1, 'the picture was published and read under the ACL')
    await app.rateLimit.ban({ identity: { ip: '203.0.113.9' }, ttl: 60_000, actor: 'acl test', reason: 'audit trail under the ACL' })
    t.match(await app.rateLimit.auditTrail(5), [{ change: 'set', noun: 'ban', actor: 'acl test' }], 'the ban is in the audit trail')
    // CONFIG GET (the eviction check) is optional; on the EVALSHA route the refused FUNCTION LOAD and its FCALL probe are how the route was chosen.
    const expected = new Set(['config|get', ...route === 'EVALSHA' ? ['function|load', 'fcall'] : []])
    const refused = (await admin.call('ACL', 'LOG') as unknown[][]).map((entry) => String(entry[entry.indexOf('object') + 1])).filter((object) => !expected.has(object))
    t.same(refused, [], 'Redis refused the user nothing else')
  })
}

test('a batch whose reply is lost is counted once, even by a client that resends unanswered commands', async (t) => {
  const server = await startServer([], { label: 'coalesce-lost' })
  const proxy = await startProxy(server.port)
  t.teardown(async () => { await proxy.close() })
  const redis = pluginClient('default', proxy.port) // resends unanswered commands after reconnecting
  const { app, admin } = await setup(t, {}, redis, server)
  await burst(app, 1, '/count', () => 'c')

  proxy.mode = 'drop-replies'
  const lost = await burst(app, 20, '/count', () => 'c')
  t.equal(app.rateLimit.stats().degraded, 20, 'the 20 decisions of the lost batch were degraded (fail-open)')
  t.same([...new Set(lost)], [200])
  proxy.mode = 'pass'
  proxy.cut() // the connection breaks, the client reconnects and resends the unanswered call
  await new Promise<void>((resolve) => { redis.once('ready', resolve) })
  await new Promise((resolve) => setTimeout(resolve, 100))
  const [key] = await admin.keys('co:{GET:/count|*')
  t.equal((await readState(admin, key as string))?.[1], 21, 'the lost batch ran once: 1 + 20, never 1 + 40')
})

test('maxPending: beyond the cap, onRedisError answers at once instead of queueing', async (t) => {
  const { app, admin } = await setup(t, { maxPending: 10 })
  const errors: StoreErrorMessage[] = []
  const onError = (message: unknown): void => { errors.push(message as StoreErrorMessage) }
  diagnostics.subscribe(CHANNELS.storeError, onError)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.storeError, onError) })
  const statuses = await burst(app, 50, '/closed', (i) => `p-${i}`)
  t.equal(statuses.filter((code) => code === 200).length, 10, 'ten decisions queued and taken')
  t.equal(statuses.filter((code) => code === 503).length, 40, 'the rest refused at once on a fail-closed route')
  t.ok(errors.length === 40 && errors.every((e) => e.cause === 'overloaded'), 'each reported with cause overloaded')
  t.equal(await scriptCalls(admin) >= 1, true)
})

test('maxBatch and maxPending are validated at register', async (t) => {
  for (const [option, value] of [['maxBatch', 0], ['maxBatch', 2000], ['maxBatch', '64'], ['maxPending', 0], ['maxPending', 1.5]] as const) {
    await t.rejects(buildApp({ store: 'memory', [option]: value } as never), { code: 'FST_RRL_INVALID_OPTION', message: new RegExp(`${option}.*got ${typeof value === 'string' ? '"64"' : String(value)}`) }, `${option}: ${String(value)}`)
  }
})

test('an ACL that refuses FUNCTION LOAD: a library an operator loaded by hand is called by FCALL; without it, EVALSHA', async (t) => {
  const server = await startServer([], { label: 'coalesce-acl' })
  const admin = adminClient(server.port)
  t.teardown(() => { admin.disconnect() })
  // The application's user may do anything but load functions.
  await admin.call('ACL', 'SETUSER', 'app', 'on', '>app-secret', '~*', '&*', '+@all', '-function|load')
  const appClient = (): Redis => createClient(server, { username: 'app', password: 'app-secret' })
  const probe = appClient()
  const refused: unknown = await probe.call('FUNCTION', 'LOAD', buildLibrary().source).then(() => undefined, (error: unknown) => error)
  probe.disconnect()
  t.match(String(refused), /NOPERM/, 'the user cannot load the library itself')

  // No library there: EVALSHA.
  const without = await setup(t, {}, appClient(), server)
  await burst(without.app, 3, '/count', () => 'c')
  t.same(await scriptCommands(admin), { fcall: 1, evalsha: 1, eval: 0 }, 'no library loaded (one FCALL found none): the batch went by EVALSHA')
  await without.app.close()

  // The operator loads the shipped file by hand (docs/operations.md): the next app calls it.
  await admin.call('FUNCTION', 'LOAD', readFileSync(new URL('../scripts/library.lua', import.meta.url), 'utf8'))
  await admin.config('RESETSTAT')
  const { app } = await setup(t, {}, appClient(), server)
  const statuses = await burst(app, 5, '/count', () => 'c')
  t.same(statuses, [200, 200, 200, 200, 200])
  const calls = await scriptCommands(admin)
  t.equal(calls.evalsha + calls.eval, 0, 'nothing by EVALSHA or EVAL')
  t.ok(calls.fcall >= 2, `decisions by FCALL of the hand-loaded library (${calls.fcall} calls: the probe and the batch)`)
  t.equal(app.rateLimit.stats().degraded, 0)
})
