import { test, type Test } from 'tap'
import diagnostics from 'node:diagnostics_channel'
import type { Redis } from 'ioredis'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import rateLimit, { CHANNELS, errors, type DecisionMessage, type RateLimitDecision, type RateLimitPluginOptions } from '../lib/index.js'
import { compileAllowList, callPredicate } from '../lib/request/allow-list.js'
import { SKIP_TIMEOUT_MS } from '../lib/limits.js'
import { createClient, privateRedis, scriptCalls } from './helpers/redis.js'

/*
 * allowList and skip: no Redis call for the requests they let through
 * (counted with a private server's INFO commandstats), counted as skipped in
 * stats() and on the decision channel; failures fail safe (limited as
 * usual). Custom refusals: replyBuilder and useErrorHandler.
 */

async function app (t: Test, redis: Redis, options: RateLimitPluginOptions, serverOptions: FastifyServerOptions = {}): Promise<FastifyInstance> {
  const fastify = Fastify({ logger: false, ...serverOptions })
  await fastify.register(rateLimit, { redis, ...options })
  t.teardown(async () => { await fastify.close() })
  return fastify
}

/** Declares /x (1 per hour) and a fail-closed /closed, spends /x, and returns its refusal. */
async function limitedReply (t: Test, fastify: FastifyInstance): Promise<Awaited<ReturnType<FastifyInstance['inject']>>> {
  fastify.get('/x', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'ok')
  fastify.get('/closed', { config: { rateLimit: { limit: 1, window: '1h', onRedisError: 'closed' } } }, async () => 'ok')
  await fastify.ready()
  t.equal((await fastify.inject('/x')).statusCode, 200)
  const limited = await fastify.inject('/x')
  t.equal(limited.statusCode, 429)
  return limited
}

test('allowList addresses and ranges: no Redis call, counted as skipped', async (t) => {
  const { server, admin } = await privateRedis(t)
  const redis = createClient(server)
  t.teardown(() => { redis.disconnect() })
  const fastify = await app(t, redis, { prefix: 'al', allowList: ['10.0.0.0/8', '2001:db8::1', '::ffff:192.168.0.0/112'] }, { trustProxy: true })
  fastify.get('/x', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'ok')
  await fastify.ready()
  const messages: DecisionMessage[] = []
  const listen = (message: unknown): void => { messages.push(message as DecisionMessage) }
  diagnostics.subscribe(CHANNELS.decision, listen)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, listen) })
  const before = await scriptCalls(admin)
  for (const ip of ['10.1.2.3', '::ffff:10.9.9.9', '2001:db8::1', '192.168.3.4', '10.1.2.3']) {
    const reply = await fastify.inject({ url: '/x', headers: { 'x-forwarded-for': ip } })
    t.equal(reply.statusCode, 200, `${ip} is allowed`)
    t.notOk(reply.headers['ratelimit-policy'], `${ip}: no quota headers (nothing was decided)`)
  }
  t.equal(await scriptCalls(admin) - before, 0, 'no script call for allow-listed callers')
  t.equal(fastify.rateLimit.stats().skipped, 5)
  t.equal(messages.length, 5)
  t.match(messages[0], { route: 'GET /x', policy: 'get-x', outcome: 'skipped', violated: [], shadowViolated: [], tier: undefined, source: 'allow-list', identityKinds: [] }, 'published as skipped')
  const other = ['2001:db8::2', '11.0.0.1', '2001:db8::2']
  const statuses = []
  for (const ip of other) statuses.push((await fastify.inject({ url: '/x', headers: { 'x-forwarded-for': ip } })).statusCode)
  t.same(statuses, [200, 200, 429], 'anyone else is limited')
  t.equal(await scriptCalls(admin) - before, 3)
  t.equal(fastify.rateLimit.stats().skipped, 5)
})

test('a block\'s skip and an allowList function, sync and async; failures are limited as usual and logged once per burst', async (t) => {
  const { server, admin } = await privateRedis(t)
  const redis = createClient(server)
  t.teardown(() => { redis.disconnect() })
  const logs: string[] = []
  const stream = { write: (line: string) => { logs.push(line) } }
  const fastify = await app(t, redis, {
    prefix: 'sk',
    allowList: async (req) => req.headers['x-internal'] === 'yes'
  }, { logger: { level: 'warn', stream } })
  fastify.get('/sync', { config: { rateLimit: { limit: 1, window: '1h', skip: (req) => req.headers['x-admin'] === '1' } } }, async () => 'ok')
  fastify.get('/async', { config: { rateLimit: { limit: 1, window: '1h', skip: async (req) => await Promise.resolve(req.headers['x-admin'] === '1') } } }, async () => 'ok')
  fastify.get('/throws', { config: { rateLimit: { limit: 1, window: '1h', skip: () => { throw new Error('boom') } } } }, async () => 'ok')
  fastify.get('/slow', { config: { rateLimit: { limit: 1, window: '1h', skip: async () => await new Promise<boolean>((resolve) => setTimeout(() => { resolve(true) }, SKIP_TIMEOUT_MS + 200)) } } }, async () => 'ok')
  fastify.get('/odd', { config: { rateLimit: [{ limit: 1, window: '1h', skip: (() => 'yes') as never }, { limit: 5, window: '1m', skip: async () => await Promise.reject(new Error('nope')) }] } }, async () => 'ok')
  await fastify.ready()
  const before = await scriptCalls(admin)
  for (const url of ['/sync', '/async']) {
    for (let i = 0; i < 3; i++) t.equal((await fastify.inject({ url, headers: { 'x-admin': '1' } })).statusCode, 200, `${url}: skipped`)
    t.equal((await fastify.inject({ url, headers: { 'x-internal': 'yes' } })).statusCode, 200, `${url}: async allowList`)
  }
  t.equal(await scriptCalls(admin) - before, 0, 'no script call for skipped requests')
  t.equal(fastify.rateLimit.stats().skipped, 8)
  t.same([(await fastify.inject('/sync')).statusCode, (await fastify.inject('/sync')).statusCode], [200, 429], 'the others are limited')
  for (const url of ['/throws', '/slow', '/odd']) {
    t.same([(await fastify.inject(url)).statusCode, (await fastify.inject(url)).statusCode], [200, 429], `${url}: a failing skip limits as usual`)
  }
  t.equal(fastify.rateLimit.stats().skipped, 8)
  const failures = logs.filter((line) => line.includes('FST_RRL_SKIP_FAILED'))
  t.equal(failures.length, 1, 'logged once per burst')
  t.match(failures[0], /boom/)
})

test('allowList and skip validation', async (t) => {
  for (const [allowList, message] of [
    [['10.0.0.0/33'], /prefix length is not from 0 to 32/],
    [['nonsense'], /not an IP address or CIDR range/],
    [[42], /entry of type number/],
    [['::/129'], /prefix length/],
    [['10.0.0.0/x'], /prefix length/],
    ['10.0.0.1', /must be an array of IP addresses/],
    [Array.from({ length: 10_001 }, () => '10.0.0.1'), /at most 10000/]
  ] as const) {
    const fastify = Fastify()
    await t.rejects(async () => { await fastify.register(rateLimit, { store: 'memory', allowList: allowList as never }) }, { code: 'FST_RRL_INVALID_OPTION', message }, String(allowList).slice(0, 30))
  }
  const fastify = Fastify()
  await fastify.register(rateLimit, { store: 'memory', globalLimits: [{ limit: 1, window: 1000 }] })
  t.throws(() => fastify.get('/x', { config: { rateLimit: { limit: 1, window: 1000, skip: true as never } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /`skip` must be a function/ })
  const global = Fastify()
  await t.rejects(async () => { await global.register(rateLimit, { store: 'memory', globalLimits: [{ limit: 1, window: 1000, skip: () => true }] }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /decided by each route/ })
})

test('compileAllowList: zone ids dropped, mapped and plain forms agree', async (t) => {
  const allowed = compileAllowList(['fe80::1', '0:0:0:0:0:ffff:172.16.0.0/108', '0.0.0.0/0'])
  if (typeof allowed === 'string') throw new Error(allowed)
  const v6only = compileAllowList(['fe80::1', '::ffff:172.16.0.0/108'])
  if (typeof v6only === 'string') throw new Error(v6only)
  const req = (ip: string): never => ({ ip }) as never
  t.equal(v6only(req('fe80::1%eth0')), true)
  t.equal(v6only(req('172.16.5.5')), true)
  t.equal(v6only(req('172.32.0.1')), false)
  t.equal(v6only(req('not-an-ip')), false)
  t.equal(allowed(req('8.8.8.8')), true)
  t.equal(callPredicate(() => true, req('1.1.1.1'), () => {}), true)
})

test('replyBuilder shapes 429 and 503; Retry-After stays; a throwing builder falls back to problem+json', async (t) => {
  const { server } = await privateRedis(t)
  const redis = createClient(server, { enableOfflineQueue: false })
  t.teardown(() => { redis.disconnect() })
  let builderThrows = false
  const fastify = await app(t, redis, {
    prefix: 'rb',
    circuitBreaker: false,
    replyBuilder: (req, refusal) => {
      if (builderThrows) throw new Error('builder bug')
      return { body: { error: refusal.statusCode === 429 ? 'slow down' : 'try later', retry: refusal.retryAfter, policies: refusal.violatedPolicies, remaining: refusal.decision.remaining, path: req.url }, headers: { 'x-refused-by': 'rate-limit' } }
    }
  })
  const limited = await limitedReply(t, fastify)
  t.equal(limited.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(limited.headers['x-refused-by'], 'rate-limit')
  t.ok(Number(limited.headers['retry-after']) >= 1, 'Retry-After set')
  t.ok(limited.headers.ratelimit, 'quota headers still sent')
  t.same(limited.json(), { error: 'slow down', retry: Number(limited.headers['retry-after']), policies: ['get-x'], remaining: 0, path: '/x' })
  builderThrows = true
  const fallback = await fastify.inject('/x')
  t.equal(fallback.statusCode, 429)
  t.match(fallback.headers['content-type'], /^application\/problem\+json/)
  builderThrows = false
  await redis.quit()
  const unavailable = await fastify.inject('/closed')
  t.equal(unavailable.statusCode, 503)
  t.same(unavailable.json(), { error: 'try later', retry: Number(unavailable.headers['retry-after']), policies: [], remaining: 0, path: '/closed' })
  t.equal(fastify.rateLimit.stats().limited, 2)
})

test('useErrorHandler: refusals reach setErrorHandler as coded errors with the decision', async (t) => {
  const { server } = await privateRedis(t)
  const redis = createClient(server, { enableOfflineQueue: false })
  t.teardown(() => { redis.disconnect() })
  const fastify = await app(t, redis, { prefix: 'eh', useErrorHandler: true, circuitBreaker: false })
  const seen: Array<{ code: string, statusCode: number, rateLimit: RateLimitDecision, retryAfter: number, violatedPolicies: string[] }> = []
  fastify.setErrorHandler(async (error, _req, reply) => {
    const refusal = error as unknown as typeof seen[0]
    seen.push(refusal)
    t.ok(error instanceof errors.FST_RRL_RATE_LIMITED || error instanceof errors.FST_RRL_LIMITER_UNAVAILABLE, 'one of the coded refusal errors')
    return await reply.code(refusal.statusCode).send({ message: `app format: ${refusal.code}`, retryAfter: refusal.retryAfter })
  })
  const limited = await limitedReply(t, fastify)
  t.ok(Number(limited.headers['retry-after']) >= 1, 'Retry-After still set')
  t.same(limited.json(), { message: 'app format: FST_RRL_RATE_LIMITED', retryAfter: Number(limited.headers['retry-after']) })
  t.equal(seen[0]?.rateLimit.allowed, false)
  t.same(seen[0]?.violatedPolicies, ['get-x'])
  await redis.quit()
  const unavailable = await fastify.inject('/closed')
  t.equal(unavailable.statusCode, 503)
  t.equal(seen[1]?.code, 'FST_RRL_LIMITER_UNAVAILABLE')
  t.equal(seen[1]?.rateLimit.degraded, true)
  t.ok(Number(unavailable.headers['retry-after']) >= 1)
})

test('useErrorHandler with Fastify\'s default error handler, and option validation', async (t) => {
  const fastify = Fastify()
  await fastify.register(rateLimit, { store: 'memory', useErrorHandler: true })
  fastify.get('/x', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'ok')
  await fastify.inject('/x')
  const limited = await fastify.inject('/x')
  t.equal(limited.statusCode, 429)
  t.ok(limited.headers['retry-after'])
  t.match(limited.json(), { statusCode: 429, code: 'FST_RRL_RATE_LIMITED', error: 'Too Many Requests' })
  await fastify.close()
  for (const [options, message] of [
    [{ replyBuilder: 'x' }, /replyBuilder` must be a function/],
    [{ replyBuilder: () => ({ body: '' }), useErrorHandler: true }, /choose one/],
    [{ useErrorHandler: 'yes' }, /useErrorHandler` must be true or false/]
  ] as const) {
    await t.rejects(async () => { await Fastify().register(rateLimit, { store: 'memory', ...options } as never) }, { code: 'FST_RRL_INVALID_OPTION', message })
  }
})
