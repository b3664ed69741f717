import { test, type Test } from 'tap'
import { createHash, createHmac } from 'node:crypto'
import Fastify, { type FastifyInstance, type FastifyServerOptions, type InjectOptions } from 'fastify'
import { Redis } from 'ioredis'
import { Client } from 'undici'
import rateLimit, { type RateLimitPluginOptions } from '../lib/index.js'
import { FST_RRL_TRUST_PROXY_TRUE } from '../lib/errors.js'
import { buildApp, setupRedisApp } from './helpers/app.js'
import { freePort, readState, startRedisServer, uniquePrefix } from './helpers/redis.js'

/*
 * Attacks on the identity: forged X-Forwarded-For, address spellings, IPv6
 * rotation, secrets leaking into Redis, logs and replies, and broken cost/by
 * functions. Real Redis throughout; real sockets where the transport matters.
 */

const ok = async () => ({ ok: true })
const LOOPBACK_PROXY = { trustProxy: ['127.0.0.1'] }

const setup = async (t: Test, options: RateLimitPluginOptions = {}, serverOptions: FastifyServerOptions = {}) => await setupRedisApp(t, 'sec', options, serverOptions)

async function keysOf (redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = []
  let cursor = '0'
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
    cursor = next
    keys.push(...batch)
  } while (cursor !== '0')
  return keys.sort()
}

async function fromIps (app: FastifyInstance, url: string, ips: string[]): Promise<number[]> {
  const codes: number[] = []
  for (const ip of ips) codes.push((await app.inject({ url, headers: { 'x-forwarded-for': ip } })).statusCode)
  return codes
}

const count = (codes: number[], code: number) => codes.filter((c) => c === code).length

test('proxy trust over a real socket', async (t) => {
  t.test('trustProxy false: 30 requests over ONE socket rotating X-Forwarded-For admit exactly 5', async (t) => {
    const { app } = await setup(t)
    app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', by: 'ip' } } }, async (req) => ({ ip: req.ip }))
    let connections = 0
    app.server.on('connection', () => { connections++ })
    const origin = await app.listen({ port: 0, host: '127.0.0.1' })
    const client = new Client(origin, { pipelining: 1 })
    t.teardown(async () => { await client.close() })
    const codes: number[] = []
    for (let i = 0; i < 30; i++) {
      const res = await client.request({ method: 'GET', path: '/x', headers: { 'x-forwarded-for': `198.51.100.${i + 1}, 203.0.113.${i + 1}` } })
      codes.push(res.statusCode)
      if (res.statusCode === 200) t.same(await res.body.json(), { ip: '127.0.0.1' }, 'request.ip is the peer, not the header')
      else await res.body.dump()
    }
    t.equal(connections, 1, 'all 30 requests used one TCP connection')
    t.same(codes.slice(0, 5), [200, 200, 200, 200, 200])
    t.equal(count(codes, 200), 5, 'exactly 5 admitted')
    t.equal(count(codes, 429), 25)
    t.equal(app.rateLimit.stats().degraded, 0)
  })

  t.test('behind a trusted loopback proxy, `X-Forwarded-For: spoof, real` is keyed on real', async (t) => {
    const { app, redis, prefix } = await setup(t, {}, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 2, window: '1m', by: 'ip' } } }, async (req) => ({ ip: req.ip }))
    const origin = await app.listen({ port: 0, host: '127.0.0.1' })
    const client = new Client(origin, { pipelining: 1 })
    t.teardown(async () => { await client.close() })
    const send = async (xff: string) => {
      const res = await client.request({ method: 'GET', path: '/x', headers: { 'x-forwarded-for': xff } })
      const body = await res.body.text()
      return { status: res.statusCode, body }
    }
    const first = await send('10.9.9.1, 203.0.113.50')
    t.equal(first.status, 200)
    t.same(JSON.parse(first.body), { ip: '203.0.113.50' })
    t.equal((await send('10.9.9.2, 203.0.113.50')).status, 200, 'another spoofed hop, same real client: same bucket')
    t.equal((await send('1.1.1.1, 203.0.113.50')).status, 429, 'rotating the spoofed part buys nothing')
    t.equal((await send('10.9.9.1, 203.0.113.51')).status, 200, 'another real client has its own bucket')
    const keys = await keysOf(redis, prefix)
    t.same(keys.map((key) => key.slice(prefix.length)), [':{GET:/x|ip=203.0.113.50}:SW60000', ':{GET:/x|ip=203.0.113.51}:SW60000'], 'keys name the real client only')
  })

  t.test('trustProxy: true warns once per process, coded, at the first public peer it believes; other settings do not warn', async (t) => {
    const seen: Array<Error & { code?: string }> = []
    const listener = (warning: Error & { code?: string }) => { if (warning.code === 'FST_RRL_TRUST_PROXY_TRUE') seen.push(warning) }
    process.on('warning', listener)
    t.teardown(() => { process.off('warning', listener) })
    FST_RRL_TRUST_PROXY_TRUE.emitted = false
    const tick = async () => await new Promise((resolve) => setImmediate(resolve))

    // A direct client on a public address forges X-Forwarded-For.
    const forge = async (trustProxy: FastifyServerOptions['trustProxy'], encapsulated = false): Promise<string> => {
      const app = Fastify({ trustProxy })
      const routes = async (scope: FastifyInstance): Promise<void> => {
        await scope.register(rateLimit, { store: 'memory' })
        scope.get('/x', { config: { rateLimit: { limit: 5, window: '1m' } } }, async (request) => request.ip)
      }
      if (encapsulated) await app.register(routes)
      else await routes(app)
      const reply = await app.inject({ url: '/x', remoteAddress: '198.51.100.77', headers: { 'x-forwarded-for': '192.0.2.200' } })
      await app.close()
      await tick()
      return reply.body
    }
    for (const safe of [false, ['127.0.0.1'], '10.0.0.0/8,127.0.0.1', (address: string) => address === '127.0.0.1', undefined]) {
      t.equal(await forge(safe), '198.51.100.77', 'the forged header is ignored')
    }
    t.equal(seen.length, 0, 'no warning for false, addresses, CIDR strings or functions that do not trust the client')

    t.equal(await forge(true), '192.0.2.200', 'trustProxy: true lets the client choose its IP')
    t.equal(seen.length, 1, 'one warning for trustProxy: true')
    t.equal(seen[0]?.name, 'FastifyRedisRateLimitWarning')
    t.match(seen[0]?.message, /X-Forwarded-For.*every peer/)
    await forge(true)
    await forge(true, true)
    t.equal(seen.length, 1, 'once per process, however many instances')
    t.equal(FST_RRL_TRUST_PROXY_TRUE.emitted, true)
  })
})

test('IP canonicalisation through the plugin (trusted loopback proxy, X-Forwarded-For)', async (t) => {
  t.test('IPv4-mapped IPv6, in both spellings, is the IPv4 caller', async (t) => {
    const { app, redis, prefix } = await setup(t, {}, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 2, window: '1m', by: 'ip' } } }, ok)
    await app.ready()
    t.same(await fromIps(app, '/x', ['::ffff:1.2.3.4', '::ffff:102:304', '1.2.3.4', '::FFFF:1.2.3.4']), [200, 200, 429, 429])
    t.same((await keysOf(redis, prefix)).map((key) => key.slice(prefix.length)), [':{GET:/x|ip=1.2.3.4}:SW60000'])
  })

  t.test('one spelling for IPv6 (ipv6Subnet 128)', async (t) => {
    const { app, redis, prefix } = await setup(t, { ipv6Subnet: 128 }, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', by: 'ip' } } }, ok)
    await app.ready()
    t.same(await fromIps(app, '/x', ['2001:DB8:0:0::1', '2001:db8::1', '2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::2']), [200, 429, 429, 200])
    t.same((await keysOf(redis, prefix)).map((key) => key.slice(prefix.length)), [':{GET:/x|ip=2001:db8::1}:SW60000', ':{GET:/x|ip=2001:db8::2}:SW60000'])
  })

  t.test('1,000 addresses inside one /64 share one bucket; another /64 is another caller', async (t) => {
    const { app, redis, prefix } = await setup(t, {}, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 10, window: '1m', by: 'ip' } } }, ok)
    await app.ready()
    const hex = () => Math.floor(Math.random() * 0x10000).toString(16)
    const rotating = Array.from({ length: 1000 }, (_, i) => `2001:db8:aaaa:1:${hex()}:${hex()}:${hex()}:${i.toString(16)}`)
    t.equal(new Set(rotating).size, 1000)
    const codes: number[] = []
    for (let i = 0; i < rotating.length; i += 50) codes.push(...await Promise.all(rotating.slice(i, i + 50).map(async (ip) => (await app.inject({ url: '/x', headers: { 'x-forwarded-for': ip } })).statusCode)))
    t.equal(count(codes, 200), 10, '1,000 addresses, one quota of 10')
    t.equal(count(codes, 429), 990)
    t.same(await fromIps(app, '/x', ['2001:db8:aaaa:2::1']), [200], 'the neighbouring /64 is untouched')
    t.same((await keysOf(redis, prefix)).map((key) => key.slice(prefix.length)), [
      ':{GET:/x|ip=2001:db8:aaaa:1::/64}:SW60000',
      ':{GET:/x|ip=2001:db8:aaaa:2::/64}:SW60000'
    ])
    t.equal(app.rateLimit.stats().degraded, 0)
  })

  t.test('ipv6Subnet is configurable: with 48, two /64s of one /48 share a bucket', async (t) => {
    const { app } = await setup(t, { ipv6Subnet: 48 }, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 2, window: '1m', by: 'ip' } } }, ok)
    await app.ready()
    t.same(await fromIps(app, '/x', ['2001:db8:1:1::1', '2001:db8:1:2::1', '2001:db8:1:ffff::9', '2001:db8:2::1']), [200, 200, 429, 200])
  })

  t.test('NAT64 (64:ff9b::/96) is not collapsed: each embedded IPv4 is its own caller', async (t) => {
    const { app } = await setup(t, {}, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', by: 'ip' } } }, ok)
    await app.ready()
    t.same(await fromIps(app, '/x', ['64:ff9b::102:304', '64:ff9b::102:305', '64:ff9b::1.2.3.6', '64:ff9b::102:304']), [200, 200, 200, 429])
  })

  t.test('a request.ip that is not an IP falls back to the socket address', async (t) => {
    const { app, redis, prefix } = await setup(t, {}, LOOPBACK_PROXY)
    app.get('/x', { config: { rateLimit: { limit: 4, window: '1m', by: 'ip' } } }, async (req) => ({ ip: req.ip }))
    await app.ready()
    const junk = ['not-an-ip', '{evil}', '1.2.3.4:5555', 'x'.repeat(8192)]
    const first = await app.inject({ url: '/x', headers: { 'x-forwarded-for': junk[0] as string } })
    t.same(first.json(), { ip: 'not-an-ip' }, 'Fastify hands the header value through')
    t.same(await fromIps(app, '/x', junk.slice(1)), [200, 200, 200])
    t.same(await fromIps(app, '/x', [junk[1] as string]), [429], 'every junk value lands in the socket address bucket')
    t.same((await app.inject('/x')).statusCode, 429, 'which is the peer 127.0.0.1')
    t.same((await keysOf(redis, prefix)).map((key) => key.slice(prefix.length)), [':{GET:/x|ip=127.0.0.1}:SW60000'])
  })
})

const API_KEY = 'sk_live_Zq7SECRETapikey0042'
const USERNAME = 'carol.secret@example.com'
const SECRETS = [API_KEY, USERNAME, encodeURIComponent(USERNAME)]

test('secrets: no raw API key or username in Redis keys or values (SCAN, MONITOR), logs, headers or 429/503 bodies', async (t) => {
  const server = await startRedisServer()
  const redis = new Redis(server.url)
  const monitorClient = new Redis(server.url)
  const monitor = await monitorClient.monitor()
  const commands: string[] = []
  monitor.on('monitor', (_time: string, args: string[]) => { commands.push(args.join(' ')) })
  const lines: string[] = []
  const stream = { write: (line: string) => { lines.push(line) } }
  const options: RateLimitPluginOptions = {
    redis,
    prefix: 'sec',
    timeout: 5000,
    user: (req) => req.headers['x-user'] as string | undefined,
    apiKey: (req) => req.headers['x-api-key'] as string | undefined
  }
  const app = await buildApp(options, { logger: { level: 'trace', stream } })
  for (const algorithm of ['fixed-window', 'sliding-window', 'sliding-log', 'token-bucket', 'gcra'] as const) {
    app.get(`/key/${algorithm}`, { config: { rateLimit: { algorithm, limit: 2, window: '1m', by: 'api-key' } } }, ok)
    app.get(`/user/${algorithm}`, { config: { rateLimit: { algorithm, limit: 2, window: '1m' } } }, ok)
  }
  app.post('/login', { config: { rateLimit: { algorithm: 'sliding-log', limit: 2, window: '15m', by: ['ip', 'body:username'] } } }, ok)
  app.get('/header', { config: { rateLimit: { limit: 2, window: '1m', by: 'header:authorization' } } }, ok)
  // A second app whose Redis is down, for the 503 path.
  const deadRedis = new Redis({ port: await freePort(), host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null })
  deadRedis.on('error', () => {})
  const closedApp = await buildApp({ ...options, redis: deadRedis }, { logger: { level: 'trace', stream } })
  closedApp.get('/closed', { config: { rateLimit: { limit: 2, window: '1m', by: ['api-key', 'user'], onRedisError: 'closed' } } }, ok)
  await app.ready()
  await closedApp.ready()
  t.teardown(async () => {
    await app.close()
    await closedApp.close()
    redis.disconnect()
    monitor.disconnect()
    monitorClient.disconnect()
    deadRedis.disconnect()
    await server.stop()
  })

  const replies: Array<{ statusCode: number, headers: Record<string, unknown>, body: string }> = []
  const send = async (target: FastifyInstance, options: InjectOptions) => {
    const res = await target.inject(options)
    replies.push({ statusCode: res.statusCode, headers: res.headers, body: res.body })
    return res.statusCode
  }
  const secretHeaders = { 'x-api-key': API_KEY, 'x-user': USERNAME, authorization: `Bearer ${API_KEY}` }
  for (const algorithm of ['fixed-window', 'sliding-window', 'sliding-log', 'token-bucket', 'gcra']) {
    for (const path of [`/key/${algorithm}`, `/user/${algorithm}`]) {
      const codes = []
      for (let i = 0; i < 3; i++) codes.push(await send(app, { url: path, headers: secretHeaders }))
      t.same(codes, [200, 200, 429], path)
    }
  }
  const logins = []
  for (let i = 0; i < 3; i++) logins.push(await send(app, { method: 'POST', url: '/login', payload: { username: USERNAME, password: API_KEY } }))
  t.same(logins, [200, 200, 429])
  const headerCodes = []
  for (let i = 0; i < 3; i++) headerCodes.push(await send(app, { url: '/header', headers: secretHeaders }))
  t.same(headerCodes, [200, 200, 429])
  t.equal(await send(closedApp, { url: '/closed', headers: secretHeaders }), 503)

  // Redis: every key name and every stored value.
  const keys = await keysOf(redis, 'sec')
  t.equal(keys.length, 12, 'ten api-key/user buckets, the login bucket and the header bucket')
  const stored: string[] = [...keys]
  for (const key of keys) {
    const type = await redis.type(key)
    if (type === 'string') stored.push(String(await redis.get(key)))
    else if (type === 'zset') stored.push(...await redis.zrange(key, '0', '-1', 'WITHSCORES'))
    else if (type === 'hash') stored.push(...Object.entries(await redis.hgetall(key)).flat())
    else stored.push(String(await redis.dump(key)))
  }
  const userHash = createHash('sha256').update(USERNAME).digest('base64url').slice(0, 22)
  t.ok(keys.some((key) => key.includes(`u=${userHash}`)), 'the username is in the keys only as its hash')
  // MONITOR sees every command the plugin sent, arguments included.
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.ok(commands.filter((line) => /^fcall /i.test(line)).length >= 33, `MONITOR captured the decisions (${commands.length} commands)`)
  t.ok(commands.some((line) => line.includes(userHash)))

  const logText = lines.join('')
  t.ok(lines.some((line) => line.includes('rate limit exceeded')), 'rejections were logged')
  t.ok(lines.some((line) => line.includes('FST_RRL_REDIS_UNAVAILABLE')), 'the 503 was logged')
  for (const secret of SECRETS) {
    t.notOk(stored.some((text) => text.includes(secret)), `${secret}: not in Redis key names or values (SCAN)`)
    t.notOk(commands.some((line) => line.includes(secret)), `${secret}: not in any command sent to Redis (MONITOR)`)
    t.notOk(logText.includes(secret), `${secret}: not in any log line`)
    for (const reply of replies) {
      t.notOk(JSON.stringify(reply.headers).includes(secret) || reply.body.includes(secret), `${secret}: not in the ${reply.statusCode} reply`)
    }
  }
  t.same([...new Set(replies.map((reply) => reply.statusCode))].sort(), [200, 429, 503])
})

test('hashSecret: identity hashes become HMAC-SHA256 keyed by it; changing it resets every bucket', async (t) => {
  const secret = 'k3y-for-hmac-0123456789abcdef'
  const user = (req: { headers: Record<string, unknown> }) => req.headers['x-user'] as string | undefined
  const plain = await setup(t, { user })
  const keyed = await setup(t, { user, hashSecret: secret })
  const rotated = await setup(t, { user, hashSecret: Buffer.from('another-secret-0123456789') })
  for (const { app } of [plain, keyed, rotated]) {
    app.get('/x', { config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
    await app.ready()
  }
  const hmac = createHmac('sha256', secret).update('alice').digest('base64url').slice(0, 22)
  const sha = createHash('sha256').update('alice').digest('base64url').slice(0, 22)
  t.equal((await plain.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 200)
  t.equal((await keyed.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 200)
  t.same(await keysOf(plain.redis, plain.prefix), [`${plain.prefix}:{GET:/x|u=${sha}}:SW60000`], 'without hashSecret: SHA-256 (guessable offline)')
  t.same(await keysOf(keyed.redis, keyed.prefix), [`${keyed.prefix}:{GET:/x|u=${hmac}}:SW60000`], 'with hashSecret: HMAC-SHA256')
  t.notOk((await keysOf(keyed.redis, keyed.prefix))[0]?.includes(secret))
  t.equal((await keyed.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 429)

  // Same prefix and Redis, another secret: alice's exhausted bucket is not found again.
  const sharedPrefix = uniquePrefix('rot')
  const before = await setup(t, { user, hashSecret: secret, prefix: sharedPrefix })
  const after = await setup(t, { user, hashSecret: `${secret}-v2`, prefix: sharedPrefix })
  for (const { app } of [before, after]) {
    app.get('/x', { config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
    await app.ready()
  }
  t.equal((await before.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 200)
  t.equal((await before.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 429)
  t.equal((await after.app.inject({ url: '/x', headers: { 'x-user': 'alice' } })).statusCode, 200, 'a new secret starts every bucket empty')

  // Validation: coded, and the value is never echoed.
  for (const [bad, pattern] of [
    ['short-secret', /at least 16 bytes \(got 12\)/],
    [Buffer.alloc(15), /at least 16 bytes \(got 15\)/],
    [1234567890123456, /string or a Buffer \(got number\)/],
    [null, /string or a Buffer \(got null\)/],
    [{ secret: 'x'.repeat(32) }, /string or a Buffer \(got object\)/]
  ] as const) {
    const app = Fastify()
    const error = await app.register(rateLimit, { store: 'memory', hashSecret: bad as never }).ready().then(() => undefined, (err: Error & { code?: string }) => err)
    t.equal(error?.code, 'FST_RRL_INVALID_OPTION')
    t.match(error?.message, pattern)
    t.notOk(typeof bad === 'string' && error?.message.includes(bad), 'the secret is not echoed')
    await app.close()
  }
  for (const good of ['0123456789abcdef', Buffer.alloc(16, 1), new Uint8Array(32), '☃☃☃☃☃☃']) {
    const app = Fastify()
    await app.register(rateLimit, { store: 'memory', hashSecret: good as never })
    await app.ready()
    t.pass(`accepted a ${typeof good === 'string' ? `${Buffer.byteLength(good)}-byte string` : `${good.length}-byte ${good.constructor.name}`}`)
    await app.close()
  }
})

test('cost and by functions that throw or return garbage: charged 1 / fallback to the IP, logged once per burst, never a 500 or an unhandled rejection', async (t) => {
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown) => { unhandled.push(reason) }
  process.on('unhandledRejection', onUnhandled)
  t.teardown(() => { process.off('unhandledRejection', onUnhandled) })
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }

  const garbage: Record<string, () => unknown> = {
    nan: () => NaN,
    infinity: () => Infinity,
    negative: () => -5,
    zero: () => 0,
    fraction: () => 1.5,
    huge: () => 1e12,
    string: () => '3',
    object: () => ({ cost: 3 }),
    nullProto: () => Object.create(null),
    symbol: () => Symbol('s'),
    null: () => null,
    bool: () => true,
    bigint: () => 3n,
    rejected: () => Promise.reject(new Error('async boom')),
    resolved: () => Promise.resolve(2),
    throws: () => { throw new Error('boom') },
    throwsOddity: () => { throw Object.create(null) }
  }
  const pick = (req: { headers: Record<string, unknown> }) => (garbage[String(req.headers['x-case'])] as () => unknown)()
  const user = (req: { headers: Record<string, unknown> }) => req.headers['x-case'] === undefined ? 'u1' : pick(req) as string
  const { app, redis, prefix } = await setup(t, { user }, { ...LOOPBACK_PROXY, logger: { level: 'info', stream } })
  const cases = Object.keys(garbage)
  app.get('/cost', { config: { rateLimit: { limit: cases.length + 1, window: '1m', cost: pick as never, by: 'ip' } } }, async (req) => req.rateLimit)
  app.get('/by', { config: { rateLimit: { limit: cases.length, window: '1m', by: pick as never } } }, async (req) => req.rateLimit)
  app.get('/user', { config: { rateLimit: { limit: cases.length, window: '1m' } } }, async (req) => req.rateLimit)
  await app.ready()

  // cost: every bad value is charged exactly 1, so the quota runs down one by one.
  const remaining: number[] = []
  for (const name of cases) {
    const res = await app.inject({ url: '/cost', headers: { 'x-case': name, 'x-forwarded-for': '203.0.113.1' } })
    t.equal(res.statusCode, 200, `cost ${name}`)
    remaining.push(res.json().remaining)
  }
  t.same(remaining, cases.map((_, i) => cases.length - i), 'charged 1 each')
  t.equal((await app.inject({ url: '/cost', headers: { 'x-case': 'nan', 'x-forwarded-for': '203.0.113.1' } })).statusCode, 200)
  t.equal((await app.inject({ url: '/cost', headers: { 'x-case': 'huge', 'x-forwarded-for': '203.0.113.1' } })).statusCode, 429, 'and never free')

  // by and user: garbage falls back to the caller's own IP bucket; real values get their own.
  for (const path of ['/by', '/user']) {
    const label = path === '/by' ? 'f0' : 'u'
    for (const name of cases) {
      const res = await app.inject({ url: path, headers: { 'x-case': name, 'x-forwarded-for': '203.0.113.2' } })
      t.equal(res.statusCode, 200, `${path} ${name}`)
    }
    const keys = (await keysOf(redis, prefix)).filter((key) => key.includes(`{GET:${path}|`))
    t.ok(keys.includes(`${prefix}:{GET:${path}|${label}~203.0.113.2}:SW60000`), `${path}: unusable values fell back to the IP`)
    const fallback = await readState(redis, `${prefix}:{GET:${path}|${label}~203.0.113.2}:SW60000`)
    // nan, infinity, object, nullProto, symbol, null, bool, bigint, rejected, throws, throwsOddity: 11 fall back
    // (`resolved` is an async identity: awaited, its value 2 is a real identity of its own).
    t.same(fallback?.slice(1), [11, 0], `${path}: eleven garbage requests counted in the fallback bucket`)
    const other = await app.inject({ url: path, headers: { 'x-case': 'object', 'x-forwarded-for': '203.0.113.3' } })
    t.equal(other.statusCode, 200, 'another IP sending garbage is not pooled with the first')
    t.equal(other.json().remaining, cases.length - 1)
  }

  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(unhandled, [], 'no unhandled rejection')
  const costLines = lines.filter((line) => (line.err as { code?: string } | undefined)?.code === 'FST_RRL_INVALID_COST')
  const identityLines = lines.filter((line) => (line.err as { code?: string } | undefined)?.code === 'FST_RRL_IDENTITY_FAILED')
  t.ok(costLines.length >= 1 && costLines.length <= 3, `cost errors logged once per burst (${costLines.length} lines for ${cases.length - 1} bad costs)`)
  t.ok(identityLines.length >= 1 && identityLines.length <= 3, `identity errors logged once per burst (${identityLines.length} lines for 24 bad parts)`)
  t.equal(lines.filter((line) => line.level === 50).length, 0, 'no error-level line (no 500)')
  t.notMatch(JSON.stringify(lines), /"cost":3|async boom.*stack/, 'values are described by type, not dumped')
  t.equal(app.rateLimit.stats().degraded, 0)
})
