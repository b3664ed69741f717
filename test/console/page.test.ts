import { test } from 'tap'
import type { Test } from 'tap'
import Fastify, { type FastifyInstance, type InjectOptions } from 'fastify'
import { Redis } from 'ioredis'
import rateLimit from '../../lib/index.js'
import consolePage, { type ConsolePageOptions } from '../../lib/console/page/index.js'
import { CONSOLE_STORE_WAIT_MS } from '../../lib/limits.js'
import { createClient, privateRedis } from '../helpers/redis.js'

/*
 * The console page plugin (docs/console.md, "The console page") through
 * inject: it refuses to register without `authorize` (or `public: true`,
 * which warns at every start) or without the rate limit plugin; a request
 * `authorize` refuses gets 403 and changes nothing; a GET never changes
 * anything; a change without the page's token or from another site is 403;
 * malformed input is a coded 4xx, never a 500. The memory store: what the
 * console reads and changes goes through the same API on either store (the
 * browser test, test/console/page-browser.test.ts, runs a fleet on Redis).
 */

const PREFIX = '/ops/limits'
const OPS = { 'x-ops': 'yes' }

interface Logged { level: number, msg: string, code?: string, rateLimitConsole?: { action: string, actor: string } }

async function build (t: Test, options: ConsolePageOptions = { authorize: (request) => request.headers['x-ops'] === 'yes' }): Promise<{ app: FastifyInstance, logs: Logged[] }> {
  const logs: Logged[] = []
  const stream = { write: (line: string) => { logs.push(JSON.parse(line) as Logged) } }
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(async () => await app.close())
  await app.register(rateLimit, { store: 'memory', user: (request) => request.headers['x-user'] as string | undefined })
  app.get('/orders/:id', { config: { rateLimit: { limit: 2, window: '1m', name: 'orders' } } }, async () => 'ok')
  for (const host of ['a.example.com', 'b.example.com']) app.get('/api', { constraints: { host }, config: { rateLimit: { limit: 2, window: '1m' } } }, async () => 'ok')
  await app.register(consolePage, { prefix: PREFIX, ...options })
  await app.ready()
  return { app, logs }
}

/** The page's token and the cookie it is bound to, as the page gets them. */
async function session (app: FastifyInstance, headers: Record<string, string> = OPS): Promise<Record<string, string>> {
  const res = await app.inject({ url: `${PREFIX}/api/session`, headers })
  const token = (res.json() as { token: string }).token
  return { ...headers, cookie: `rrl-console-token=${token}`, 'x-console-token': token }
}

async function post (app: FastifyInstance, path: string, payload: unknown, headers: Record<string, string>): Promise<{ status: number, body: Record<string, unknown> }> {
  const res = await app.inject({ method: 'POST', url: `${PREFIX}/api/${path}`, headers, payload: payload as InjectOptions['payload'] })
  return { status: res.statusCode, body: res.json() }
}

/** What the fleet's records hold now: nothing may change on a refused request. */
async function records (app: FastifyInstance): Promise<string> {
  return JSON.stringify([await app.rateLimit.listBans(), await app.rateLimit.listOverrides(), (await app.rateLimit.auditTrail(100)).length])
}

test('register: no authorize is a coded error; public: true warns at every start; no rate limit plugin, bad options', async (t) => {
  const bare = Fastify()
  await bare.register(rateLimit, { store: 'memory' })
  await t.rejects(async () => { await bare.register(consolePage, { prefix: PREFIX }) }, { code: 'FST_RRL_CONSOLE_NO_AUTHORIZE' }, 'no authorize, not public')
  await bare.close()

  for (const start of [1, 2]) {
    const { logs } = await build(t, { public: true })
    const warned = logs.filter((line) => line.code === 'FST_RRL_CONSOLE_PUBLIC')
    t.equal(warned.length, 1, `start ${start}: one warning`)
    t.equal(warned[0]?.level, 40, 'at warn level')
    t.match(warned[0]?.msg, `${PREFIX}/ is public`, 'naming where the console is')
  }

  const alone = Fastify()
  await t.rejects(async () => { await alone.register(consolePage, { authorize: () => true }) }, { code: 'FST_RRL_CONSOLE_NO_RATE_LIMIT', message: /fastify\.rateLimit/ }, 'no rate limit plugin')
  await alone.close()

  const bad: Array<[string, Record<string, unknown>]> = [
    ['authorize', { authorize: 'yes' }],
    ['public', { public: 'yes', authorize: () => true }],
    ['actor', { authorize: () => true, actor: 'me' }],
    ['refresh', { authorize: () => true, refresh: 10 }],
    ['refresh', { authorize: () => true, refresh: '2h' }],
    ['audit', { authorize: () => true, audit: 0 }],
    ['rateLimit', { authorize: () => true, rateLimit: false }],
    ['configKey', { authorize: () => true, configKey: '' }],
    ['nope', { authorize: () => true, nope: 1 }]
  ]
  for (const [name, options] of bad) {
    const app = Fastify()
    await app.register(rateLimit, { store: 'memory' })
    await t.rejects(async () => { await app.register(consolePage, options as ConsolePageOptions) }, { code: 'FST_RRL_INVALID_OPTION', message: new RegExp(`console ${name}`) }, `${name}: ${JSON.stringify(options[name])}`)
    await app.close()
  }
})

test('the page, its assets and its session: served behind authorize, with a SameSite=Strict token cookie and a strict CSP', async (t) => {
  const { app } = await build(t)
  const bare = await app.inject({ url: PREFIX, headers: OPS })
  t.equal(bare.statusCode, 302, 'the prefix redirects to the page')
  t.equal(bare.headers.location, `${PREFIX}/`)
  const page = await app.inject({ url: `${PREFIX}/`, headers: OPS })
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-type'], 'text/html')
  t.match(page.headers['content-security-policy'], "script-src 'self'", 'no inline script may run')
  t.match(page.headers['content-security-policy'], "frame-ancestors 'none'")
  t.equal(page.headers['x-content-type-options'], 'nosniff')
  t.match(page.headers['ratelimit-policy'], /q=300;w=60/, 'the page is rate limited by the plugin (the default console limit)')
  t.match(page.body, '<script src="console.js" defer></script>')
  t.notMatch(page.body, /<script>|<style>| on\w+=/, 'no inline script, style or handler')
  for (const [asset, type] of [['console.js', 'text/javascript'], ['console.css', 'text/css']] as const) {
    const res = await app.inject({ url: `${PREFIX}/${asset}`, headers: OPS })
    t.equal(res.statusCode, 200, asset)
    t.match(res.headers['content-type'], type)
  }
  const js = (await app.inject({ url: `${PREFIX}/console.js`, headers: OPS })).body
  t.notMatch(js, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(/, 'the page script never writes HTML')

  const first = await app.inject({ url: `${PREFIX}/api/session`, headers: OPS })
  t.equal(first.statusCode, 200)
  const { token, actor, refreshMs, targets } = first.json()
  t.match(token, /^[A-Za-z0-9_-]{43}$/, '256 random bits')
  t.equal(first.headers['set-cookie'], `rrl-console-token=${token as string}; Path=${PREFIX}/; HttpOnly; SameSite=Strict`)
  t.equal(actor, '127.0.0.1', 'the default actor is request.ip')
  t.equal(refreshMs, 1000)
  t.same(targets, ['GET /api {"host":"a.example.com"}', 'GET /api {"host":"b.example.com"}', 'GET /orders/:id'], 'the forms suggest the app\'s routes (by the labels the API takes), not the console\'s own')
  const again = await app.inject({ url: `${PREFIX}/api/session`, headers: { ...OPS, cookie: `rrl-console-token=${token as string}` } })
  t.equal(again.json().token, token, 'a page that holds the cookie keeps its token')
  t.equal(again.headers['set-cookie'], undefined)
  const state = await app.inject({ url: `${PREFIX}/api/state`, headers: OPS })
  t.equal(state.statusCode, 200)
  t.match(state.json(), { fleet: { instances: [{ store: { kind: 'memory' } }] }, bans: [], overrides: [], audit: [], problems: [] })
  t.equal(state.json().fleet.instances[0].policies, undefined, 'the instances\' policy tables stay on the server')
})

test('authorize refuses: 403 on every route, and nothing changes', async (t) => {
  const calls: string[] = []
  const { app } = await build(t, {
    authorize: async (request) => {
      calls.push(request.url)
      if (request.headers['x-ops'] === 'throw') throw new Error('directory down')
      return request.headers['x-ops'] === 'yes' ? true : (request.headers['x-ops'] === 'truthy' ? 1 as unknown as boolean : false)
    }
  })
  const allowed = await session(app)
  const before = await records(app)
  for (const who of [{}, { 'x-ops': 'no' }, { 'x-ops': 'throw' }, { 'x-ops': 'truthy' }]) {
    const headers = { ...allowed, ...who, 'x-ops': (who as Record<string, string>)['x-ops'] ?? '' }
    for (const url of ['', '/', '/console.js', '/api/session', '/api/state']) {
      const res = await app.inject({ url: `${PREFIX}${url}`, headers })
      t.equal(res.statusCode, 403, `GET ${url || PREFIX} as ${JSON.stringify(who)}`)
      t.equal(res.json().code, 'FST_RRL_CONSOLE_FORBIDDEN')
    }
    const ban = await post(app, 'bans', { identity: { user: 'mallory' }, ttl: 60_000, reason: 'x' }, headers)
    t.equal(ban.status, 403, 'a ban with a valid token is refused')
    const bad = await post(app, 'bans', { identity: 'nonsense' }, headers)
    t.equal(bad.status, 403, 'authorize is asked before the body is validated')
  }
  t.equal(await records(app), before, 'no ban, override or audit entry')
  t.ok(calls.length >= 20, 'authorize was asked every time')
  t.equal((await post(app, 'bans', { identity: { user: 'mallory' }, ttl: 60_000, reason: 'x' }, allowed)).status, 200, 'the same ban with authorize saying yes')
})

test('a GET never changes state; a change without the token, or from another site, is 403', async (t) => {
  const { app } = await build(t)
  const headers = await session(app)
  const before = await records(app)
  for (const path of ['bans', 'bans/lift', 'overrides', 'overrides/clear', 'reset']) {
    const res = await app.inject({ url: `${PREFIX}/api/${path}?identity=mallory&id=x&reason=x&ttl=60000`, headers })
    t.equal(res.statusCode, 404, `GET ${path}: no such route`)
  }
  for (const url of ['/', '/api/state', '/api/session']) await app.inject({ url: `${PREFIX}${url}?ban=mallory`, headers })
  t.equal(await records(app), before, 'GETs changed nothing')

  const ban = { identity: { user: 'mallory' }, ttl: 60_000, reason: 'abuse' }
  const token = headers['x-console-token'] as string
  const other = 'A'.repeat(43)
  const refused: Array<[string, Record<string, string>]> = [
    ['no token header', { ...OPS, cookie: headers.cookie as string }],
    ['no cookie', { ...OPS, 'x-console-token': token }],
    ['a token that is not the cookie\'s', { ...OPS, cookie: `rrl-console-token=${other}`, 'x-console-token': token }],
    ['a malformed token', { ...OPS, cookie: 'rrl-console-token=x', 'x-console-token': 'x' }],
    ['a cross-site request', { ...headers, 'sec-fetch-site': 'cross-site' }],
    ['a same-site (sibling origin) request', { ...headers, 'sec-fetch-site': 'same-site' }],
    ['another Origin', { ...headers, origin: 'https://evil.example' }],
    ['a malformed Origin', { ...headers, origin: 'null' }]
  ]
  for (const [what, sent] of refused) {
    const res = await post(app, 'bans', ban, sent)
    t.equal(res.status, 403, what)
    t.equal(res.body.code, 'FST_RRL_CONSOLE_BAD_TOKEN', what)
  }
  t.equal(await records(app), before, 'nothing changed')
  const same = await post(app, 'bans', ban, { ...headers, 'sec-fetch-site': 'same-origin', origin: 'http://localhost:80' })
  t.equal(same.status, 200, 'the page\'s own request (same origin, its token) bans')
})

test('malformed input is a coded 4xx, never a 500 or a stack', async (t) => {
  const { app } = await build(t)
  const headers = await session(app)
  const cases: Array<[string, string, unknown, number, string]> = [
    ['bans', 'no reason', { identity: { user: 'm' }, ttl: 60_000 }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'an empty reason', { identity: { user: 'm' }, ttl: 60_000, reason: '' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a reason over 200 characters', { identity: { user: 'm' }, ttl: 60_000, reason: 'x'.repeat(201) }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a ttl under a second', { identity: { user: 'm' }, ttl: 5, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a ttl over 366 days', { identity: { user: 'm' }, ttl: 400 * 86_400_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a ttl of the wrong type', { identity: { user: 'm' }, ttl: { ms: 1 }, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'two identities', { identity: { user: 'm', ip: '1.2.3.4' }, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'no identity', { identity: {}, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'an identity that is a string', { identity: 'mallory', ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a key hash with markup', { identity: { keyHash: '<img src=x>' }, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a status code other than 403 or 429', { identity: { user: 'm' }, ttl: 60_000, reason: 'r', statusCode: 500 }, 400, 'FST_ERR_VALIDATION'],
    ['bans', 'a 429 ban without a ttl', { identity: { user: 'm' }, ttl: 'permanent', reason: 'r', statusCode: 429 }, 400, 'FST_RRL_INVALID_API_CALL'],
    ['bans', 'an ip that is no address', { identity: { ip: 'not-an-ip' }, ttl: 60_000, reason: 'r' }, 400, 'FST_RRL_INVALID_API_CALL'],
    ['bans', 'an unknown route', { identity: { user: 'm' }, target: 'GET /nope', ttl: 60_000, reason: 'r' }, 404, 'FST_RRL_UNKNOWN_POLICY'],
    ['overrides', 'a limit of 0', { target: 'orders', limit: 0, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['overrides', 'a fractional limit', { target: 'orders', limit: 1.5, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['overrides', 'no target', { limit: 5, ttl: 60_000, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['overrides', 'an unknown block', { target: '<script>', limit: 5, ttl: 60_000, reason: 'r' }, 404, 'FST_RRL_UNKNOWN_POLICY'],
    ['reset', 'no identity', { target: 'orders', reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['reset', 'an identity field of the wrong type', { target: 'orders', identity: { user: { name: 'm' } }, reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['bans/lift', 'no id', { reason: 'r' }, 400, 'FST_ERR_VALIDATION'],
    ['overrides/clear', 'a number for an id', { id: { x: 1 }, reason: 'r' }, 400, 'FST_ERR_VALIDATION']
  ]
  // Two routes answer to 'GET /api' (host constraints): a target naming both is ambiguous.
  cases.push(['overrides', 'a target several routes answer to', { target: 'GET /api', limit: 5, ttl: 60_000, reason: 'r' }, 400, 'FST_RRL_AMBIGUOUS_TARGET'])
  for (const [path, what, body, status, code] of cases) {
    const res = await post(app, path, body, headers)
    t.equal(res.status, status, `${path}: ${what}`)
    t.equal(res.body.code, code, `${path}: ${what}: ${code}`)
    t.notMatch(JSON.stringify(res.body), /\bat .*\.(ts|js):\d+/, 'no stack')
  }
  const raw = async (payload: string, type: string): Promise<{ statusCode: number, json: () => { code: string } }> =>
    await app.inject({ method: 'POST', url: `${PREFIX}/api/bans`, headers: { ...headers, 'content-type': type }, payload })
  const broken = await raw('{"identity":', 'application/json')
  t.equal(broken.statusCode, 400, 'malformed JSON')
  t.equal(broken.json().code, 'FST_ERR_CTP_INVALID_JSON_BODY')
  t.equal((await raw('identity=m', 'application/x-www-form-urlencoded')).statusCode, 415, 'a form post (what another site could send) is not even parsed')
  const huge = await raw(JSON.stringify({ identity: { user: 'x'.repeat(200_000) }, ttl: 60_000, reason: 'r' }), 'application/json')
  t.equal(huge.statusCode, 413, 'a body over the console\'s bound')
  t.equal((await app.rateLimit.listBans()).length, 0, 'nothing was banned')
})

test('each change: made as the app\'s actor, logged, and in the audit trail; the console\'s own limit', async (t) => {
  const { app, logs } = await build(t, {
    authorize: (request) => request.headers['x-ops'] === 'yes',
    actor: async (request) => `ops:${request.headers['x-operator'] as string}`,
    rateLimit: { limit: 40, window: '1m', name: 'ops-console' }
  })
  const headers = await session(app, { ...OPS, 'x-operator': 'alice' })
  const ban = await post(app, 'bans', { identity: { user: 'mallory' }, target: 'GET /orders/:id', ttl: 600_000, statusCode: 403, reason: 'INC-1 scraping' }, headers)
  t.equal(ban.status, 200)
  t.match(ban.body, { route: 'GET /orders/:id', kind: 'user', identity: { user: 'mallory' }, actor: 'ops:alice', reason: 'INC-1 scraping' })
  t.equal((await app.inject({ url: '/orders/1', headers: { 'x-user': 'mallory' } })).statusCode, 403, 'the ban applies')
  const override = await post(app, 'overrides', { target: 'orders', identity: { user: 'carol' }, limit: 50, ttl: 600_000, reason: 'INC-2 batch' }, headers)
  t.equal(override.status, 200)
  t.match(override.body, { limit: 50, actor: 'ops:alice' })
  t.same((await post(app, 'reset', { target: 'orders', identity: { user: 'carol' }, reason: 'INC-2 retry' }, headers)).body, { reset: true })
  t.same((await post(app, 'overrides/clear', { id: override.body.id, reason: 'INC-2 done' }, headers)).body, { cleared: true })
  t.same((await post(app, 'bans/lift', { id: ban.body.id, reason: 'INC-1 done' }, headers)).body, { lifted: true })
  t.same((await post(app, 'bans/lift', { id: ban.body.id, reason: 'again' }, headers)).body, { lifted: false }, 'lifting twice says so')
  t.equal((await app.inject({ url: '/orders/1', headers: { 'x-user': 'mallory' } })).statusCode, 200, 'the ban is lifted')

  const trail = (await app.inject({ url: `${PREFIX}/api/state`, headers })).json().audit as Array<{ change: string, noun: string, actor: string, reason: string }>
  t.same(trail.map((entry) => [entry.change, entry.noun, entry.actor, entry.reason]), [
    ['clear', 'ban', 'ops:alice', 'INC-1 done'],
    ['clear', 'override', 'ops:alice', 'INC-2 done'],
    ['reset', 'usage', 'ops:alice', 'INC-2 retry'],
    ['set', 'override', 'ops:alice', 'INC-2 batch'],
    ['set', 'ban', 'ops:alice', 'INC-1 scraping']
  ], 'the audit trail, newest first: who, what, why')
  const actions = logs.filter((line) => line.rateLimitConsole !== undefined).map((line) => [line.rateLimitConsole?.action, line.rateLimitConsole?.actor])
  t.same(actions, [['ban', 'ops:alice'], ['override', 'ops:alice'], ['reset', 'ops:alice'], ['clear override', 'ops:alice'], ['unban', 'ops:alice'], ['unban', 'ops:alice']], 'each change in the app\'s log')

  const statuses: number[] = []
  for (let i = 0; i < 45; i++) statuses.push((await app.inject({ url: `${PREFIX}/api/state`, headers })).statusCode)
  t.ok(statuses.includes(429), 'the console\'s own routes are limited by the plugin (the rateLimit option)')
  t.equal(statuses.indexOf(429), 40 - 1, 'after the option\'s 40 per minute (one read above)')
})

test('a store that does not answer: the page still reads (its problems named), a change is a 503 with a code; another configKey; an actor that throws', async (t) => {
  // A Redis client that never connects (port 1): the API's store calls fail at once.
  const redis = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null })
  redis.on('error', () => {})
  const logs: Logged[] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as Logged) } } } })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  await app.register(rateLimit, { redis, timeout: 50, configKey: 'limits', user: (request) => request.headers['x-user'] as string | undefined })
  app.get('/orders/:id', { config: { limits: { limit: 2, window: '1m', name: 'orders' } } }, async () => 'ok')
  await app.register(consolePage, {
    prefix: PREFIX,
    configKey: 'limits',
    authorize: () => true,
    actor: (request) => { if (request.headers['x-operator'] === 'broken') throw new Error('directory down'); return 'op' }
  })
  await app.ready()
  const state = await app.inject({ url: `${PREFIX}/api/state` })
  t.equal(state.statusCode, 200, 'the page still reads')
  t.match(state.json(), { fleet: null, bans: null, overrides: null, audit: null, problems: [/^audit trail: /, /^fleet: /, /^bans: /, /^overrides: /] }, 'each part that failed is named')
  const limits = (app as unknown as { limits: FastifyInstance['rateLimit'] }).limits
  const declared = limits.policies().find((summary) => summary.method === 'GET' && summary.url === `${PREFIX}/api/state`)
  t.match(declared?.limit, { limit: 300, windowMs: 60_000 }, 'the console\'s limit is declared under the plugin\'s configKey')
  const headers = await session(app, {})
  for (const [path, body] of [
    ['bans', { identity: { user: 'm' }, ttl: 60_000, reason: 'r' }],
    ['bans/lift', { id: '*|u=x', reason: 'r' }],
    ['overrides', { target: 'orders', limit: 5, ttl: 60_000, reason: 'r' }],
    ['reset', { target: 'orders', identity: { user: 'm' }, reason: 'r' }]
  ] as const) {
    const res = await post(app, path, body, headers)
    t.equal(res.status, 503, `${path}: the store did not answer`)
    t.equal(res.body.code, 'FST_RRL_REDIS_UNAVAILABLE')
  }
  const broken = await post(app, 'bans', { identity: { user: 'm' }, ttl: 60_000, reason: 'r' }, { ...headers, 'x-operator': 'broken' })
  t.same(broken, { status: 500, body: { statusCode: 500, code: 'FST_RRL_CONSOLE_FAILED', error: 'Internal Server Error', message: 'The console call failed; see the server log' } }, 'an actor that throws: a 500 that says nothing more')
  t.ok(logs.some((line) => line.level === 50 && line.msg === 'rate limit console: a call failed'), 'and the error is logged')
})

test('review fixes: no CORS header on any console answer; JSON only (415); a refused caller gets 403 before its body is read; the redirect stays on the site', async (t) => {
  const logs: Logged[] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as Logged) } } }, routerOptions: { ignoreDuplicateSlashes: true } })
  t.teardown(async () => await app.close())
  const { default: cors } = await import('@fastify/cors')
  await app.register(cors, { origin: true, credentials: true })
  await app.register(rateLimit, { store: 'memory' })
  await app.register(consolePage, { prefix: PREFIX, authorize: (request) => request.headers['x-ops'] === 'yes' })
  await app.ready()
  const evil = { origin: 'http://evil.test' }
  for (const url of [`${PREFIX}/`, `${PREFIX}/api/session`, `${PREFIX}/api/state`]) {
    const res = await app.inject({ url, headers: { ...OPS, ...evil } })
    t.equal(res.statusCode, 200, url)
    t.same(Object.keys(res.headers).filter((name) => name.startsWith('access-control-')), [], `${url}: no CORS header for another site`)
  }
  const headers = await session(app)
  const plain = await app.inject({ method: 'POST', url: `${PREFIX}/api/bans`, headers: { ...headers, 'content-type': 'text/plain' }, payload: '{}' })
  t.equal(plain.statusCode, 415, 'text/plain is not parsed')
  for (const [type, payload] of [['application/json', ''], ['application/json', '{'], ['application/x-www-form-urlencoded', 'a=1'], ['application/json', JSON.stringify({ reason: 'x'.repeat(140_000) })]] as const) {
    const res = await app.inject({ method: 'POST', url: `${PREFIX}/api/bans`, headers: { 'content-type': type }, payload })
    t.equal(res.statusCode, 403, `refused caller, ${type} ${payload.length} bytes: 403 before the body is read`)
    t.equal((res.json() as { code: string }).code, 'FST_RRL_CONSOLE_FORBIDDEN')
  }
  const redirect = await app.inject({ url: `/${PREFIX}`, headers: OPS })
  t.equal(redirect.statusCode, 302)
  t.equal(redirect.headers.location, `${PREFIX}/`, 'to the page\'s own path, never //host')
})

test('review fixes: a prefix with a trailing slash or a space: one cookie path the browser sends back, and changes work; a prefix with ";" is refused', async (t) => {
  for (const [prefix, path] of [['/ops/limits/', '/ops/limits/'], ['/a b', '/a%20b/']] as const) {
    const app = Fastify()
    t.teardown(async () => await app.close())
    await app.register(rateLimit, { store: 'memory' })
    app.get('/x', { config: { rateLimit: { limit: 2, window: '1m' } } }, async () => 'ok')
    await app.register(consolePage, { prefix, authorize: () => true })
    await app.ready()
    const res = await app.inject({ url: `${path}api/session` })
    t.match(res.headers['set-cookie'], `Path=${path};`, `${JSON.stringify(prefix)}: the cookie's Path is the page's`)
    const token = (res.json() as { token: string }).token
    const ban = await app.inject({ method: 'POST', url: `${path}api/bans`, headers: { cookie: `rrl-console-token=${token}`, 'x-console-token': token }, payload: { identity: { ip: '192.0.2.1' }, ttl: 60_000, reason: 'r' } })
    t.equal(ban.statusCode, 200, `${JSON.stringify(prefix)}: a change works`)
  }
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateLimit, { store: 'memory' })
  await t.rejects(async () => { await app.register(consolePage, { prefix: '/x;y', authorize: () => true }) }, { code: 'FST_RRL_INVALID_OPTION', message: /may not hold ';'/ })
})

test('review fixes: a hung Redis answers a change and a read within CONSOLE_STORE_WAIT_MS (503, the read names the parts), never a request left hanging', async (t) => {
  const { server } = await privateRedis(t)
  const redis = createClient(server)
  const app = Fastify()
  t.teardown(async () => { server.resume(); await app.close(); redis.disconnect() })
  await app.register(rateLimit, { redis, prefix: 'hung' })
  await app.register(consolePage, { prefix: PREFIX, authorize: () => true })
  await app.ready()
  const headers = await session(app, {})
  server.pause()
  const started = Date.now()
  const [ban, state] = await Promise.all([
    post(app, 'bans', { identity: { ip: '192.0.2.9' }, ttl: 60_000, reason: 'r' }, headers),
    app.inject({ url: `${PREFIX}/api/state` })
  ])
  const took = Date.now() - started
  t.equal(ban.status, 503)
  t.equal(ban.body.code, 'FST_RRL_REDIS_UNAVAILABLE')
  t.equal(state.statusCode, 200)
  t.ok((state.json() as { problems: string[] }).problems.length >= 3, 'the read names each part that did not answer')
  t.ok(took >= CONSOLE_STORE_WAIT_MS - 100 && took < CONSOLE_STORE_WAIT_MS + 3000, `answered after ${took} ms`)
})
