/*
 * `npm run demo`: an example service on 127.0.0.1:3000 showing each algorithm
 * and identity kind. With REDIS_URL it uses Redis (through @fastify/redis),
 * otherwise the in-process memory store, and says which in its first log line.
 *
 *   curl -i http://127.0.0.1:3000/orders/42 -H 'x-user-id: alice'
 *   curl -i http://127.0.0.1:3000/search?q=redis -H 'x-api-key: demo-key-1'   a burst limit and a monthly plan quota per API key
 *   curl -i http://127.0.0.1:3000/login -H 'content-type: application/json' -d '{"username":"alice"}'
 *   curl -i http://127.0.0.1:3000/health
 *
 * Signed in (a JWT from @fastify/jwt, checked in a preHandler; the limit runs after it, per user):
 *   TOKEN=$(curl -s -X POST 'http://127.0.0.1:3000/token?user=alice')   a demo token (plain text)
 *   curl -i http://127.0.0.1:3000/me -H "authorization: Bearer $TOKEN"   5 per minute per user (hook: 'preHandler')
 *
 * Beyond the basics:
 *   curl -i http://127.0.0.1:3000/reports                       two limits at once (5/s and 100/h), all-or-nothing
 *   curl -i http://127.0.0.1:3000/feed -H 'x-plan: pro'          tiers: 30/min by default, 300/min on pro
 *   curl -i -X POST http://127.0.0.1:3000/notify -H 'x-user-id: alice'   fastify.rateLimit.consume() for a non-HTTP limit
 *   curl -i 'http://127.0.0.1:3000/admin/peek?user=alice'        fastify.rateLimit.peek(): no charge
 *   curl -i -X POST 'http://127.0.0.1:3000/admin/reset?user=alice'
 *   curl -i http://127.0.0.1:3000/exports?fail=1                 refundOn: a 500 gives its 5 units back
 *   curl -i 'http://127.0.0.1:3000/complete?max_tokens=2000&used=4900' -H 'x-api-key: demo-key-2'
 *                                                               settle: reserves 2000 tokens, charges the 4900 used when the response closes
 *   (login 8 times with the same username)                      penalty: the 3rd refusal locks it out for 1 h (Retry-After: 3600)
 *   curl -i -X POST 'http://127.0.0.1:3000/admin/override?user=alice&limit=500&ttl=600000&reason=INC-42' -H 'x-admin: ops-alice'
 *                                                               runtime override: alice gets 500/min on /orders for 10 min, fleet-wide
 *   curl -i http://127.0.0.1:3000/admin/overrides -H 'x-admin: ops-alice'
 *   curl -i -X DELETE 'http://127.0.0.1:3000/admin/override?id=<id>&reason=done' -H 'x-admin: ops-alice'
 *   curl -i -X POST 'http://127.0.0.1:3000/admin/ban?user=mallory&ttl=600000&reason=INC-43' -H 'x-admin: ops-alice'
 *                                                               operator ban: mallory gets 403 on every limited route for 10 min, fleet-wide
 *                                                               (ip=… or apiKey=… instead of user; route=GET%20/orders/:id for one route; status=429)
 *   curl -i http://127.0.0.1:3000/admin/bans -H 'x-admin: ops-alice'
 *   curl -i -X DELETE 'http://127.0.0.1:3000/admin/ban?id=<id>&reason=done' -H 'x-admin: ops-alice'
 *   curl -i http://127.0.0.1:3000/reports -H 'x-internal-token: demo-internal'   allowList: internal callers are never limited
 *   curl -i http://127.0.0.1:3000/no-such-page                   notFound: 20 404s a minute per caller, then 429
 * The operator's console (fastify-redis-rate-limit/console), from this machine only:
 *   open http://127.0.0.1:3000/ops/limits/ in a browser               the fleet, top refused callers, bans, overrides, audit trail
 * Refusals use a custom body (replyBuilder): the RFC 9457 fields plus a hint.
 * Every route also counts toward a fleet-wide 600/min per caller in shadow
 * mode (recorded, never enforced), the startup log prints the policy table,
 * and GET / shows the decisions seen on node:diagnostics_channel.
 */
import diagnostics from 'node:diagnostics_channel'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import fastifyJwt from '@fastify/jwt'
import fastifyRedis from '@fastify/redis'
import rateLimit, { CHANNELS, type DecisionMessage } from '../lib/index.js'
import consolePage from '../lib/console/page/index.js'

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: { sub: string }
    user: { sub: string }
  }
}

const redisUrl = process.env.REDIS_URL
const port = Number(process.env.PORT ?? 3000)
// `npm run docs:sessions` freezes the limiter's clock (the `clock` option, for tests), so the sessions in the docs are the same on every run.
const frozenClock = process.env.DEMO_FROZEN_CLOCK_MS === undefined ? undefined : Number(process.env.DEMO_FROZEN_CLOCK_MS)

// Behind a load balancer you would trust its addresses here, e.g. ['10.0.0.0/8'].
const app = Fastify({ logger: true, trustProxy: false })
app.log.info(redisUrl === undefined || redisUrl === ''
  ? 'rate limits use the in-process memory store (set REDIS_URL to share them across instances)'
  : `rate limits use Redis at ${new URL(redisUrl).host}`)

if (redisUrl !== undefined && redisUrl !== '') {
  // The client options docs/operations.md recommends: fail fast, never resend a lost reply.
  await app.register(fastifyRedis, {
    url: redisUrl,
    enableOfflineQueue: false,
    commandTimeout: 1000,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt: number) => Math.min(attempt * 50, 200)
  })
}

// Signed-in callers carry a JWT (see /token and /me); the secret is a demo's, set JWT_SECRET in a real service.
await app.register(fastifyJwt, { secret: process.env.JWT_SECRET ?? 'demo-only-secret-do-not-use-in-production' })

// A stand-in for real authentication: it runs before the limiter's hook.
const DEMO_KEYS = new Set(['demo-key-1', 'demo-key-2'])
const INTERNAL_TOKEN = 'demo-internal'
const userOf = (req: FastifyRequest) => req.headers['x-user-id'] as string | undefined
const validApiKey = (req: FastifyRequest) => {
  const key = req.headers['x-api-key']
  return typeof key === 'string' && DEMO_KEYS.has(key) ? key : undefined
}

// What decided a request: the store the limits live in (the orders route reports it).
const store = redisUrl === undefined || redisUrl === '' ? 'memory' : 'redis'
await app.register(rateLimit, {
  store,
  prefix: 'demo',
  onRedisError: 'open',
  timeout: 50,
  headers: 'ietf',
  // The verified token's subject where a route checked one (/me), else the demo's x-user-id header.
  user: (req) => req.user?.sub ?? userOf(req),
  apiKey: validApiKey,
  // Fleet-wide, per caller, on every limited route, in the same script call as the route's own
  // limits. In shadow mode while it is being tried out: recorded, never enforced, not advertised.
  globalLimits: [{ name: 'per-caller', limit: 600, window: '1m', mode: 'shadow' }],
  // After Redis refuses a caller, this instance refuses it locally until Redis's retry time (the default).
  denyCache: { max: 10_000 },
  // Plans for the tier maps below (a real service would read them from the authenticated user).
  tier: (req) => req.headers['x-plan'] as string | undefined,
  // Limits outside HTTP routes, for fastify.rateLimit.consume().
  // 'upstream': one budget for the fleet's outbound calls, 5 per second, each call waiting its turn (schedule()).
  policies: {
    'email-send': { limit: 3, window: '1h', by: 'user', algorithm: 'sliding-log' },
    upstream: { algorithm: 'gcra', limit: 5, window: '1s', burst: 1, delay: '2s', by: 'api-key' }
  },
  // A table of every route's limits in the startup log.
  printPolicies: true,
  // How many instances share the limits: each enforces limit / fleetSize on its own while Redis is down
  // (routes with onRedisError: 'local'). Set it to the smallest fleet you run.
  fleetSize: Number(process.env.FLEET_SIZE ?? 2),
  // Never limited, no Redis call (counted as skipped): here a shared secret of internal callers.
  // Addresses and ranges work too: allowList: ['10.0.0.0/8', '2001:db8::/32'].
  allowList: (req) => req.headers['x-internal-token'] === INTERNAL_TOKEN,
  // The 429/503/403 body: the RFC 9457 fields plus a hint. (useErrorHandler: true would hand it to setErrorHandler.)
  replyBuilder: (req, refusal) => ({
    headers: { 'content-type': 'application/problem+json' },
    body: refusal.decision.outcome === 'banned'
      ? {
          // An operator ban (/admin/ban): 403, or 429 with Retry-After = the ban's time left.
          type: 'https://iana.org/assignments/http-problem-types#abnormal-usage-detected',
          title: refusal.statusCode === 403 ? 'Forbidden' : 'Too Many Requests',
          status: refusal.statusCode,
          hint: 'this client is refused by an operator; contact support'
        }
      : {
          type: refusal.statusCode === 429 ? 'https://iana.org/assignments/http-problem-types#quota-exceeded' : 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity',
          title: refusal.statusCode === 429 ? 'Too Many Requests' : 'Service Unavailable',
          status: refusal.statusCode,
          'violated-policies': refusal.violatedPolicies,
          hint: `retry in ${refusal.retryAfter} s, or ask for the pro plan (x-plan: pro) on /feed`
        }
  }),
  // Scanners' 404s: one bucket per caller for every URL that does not exist.
  notFound: { limit: 20, window: '1m' },
  ...(frozenClock === undefined ? {} : { clock: () => frozenClock })
})

// Every decision is published on node:diagnostics_channel (OpenTelemetry metrics too, where an SDK is registered).
const outcomes: Record<string, number> = {}
diagnostics.subscribe(CHANNELS.decision, (message) => {
  const { outcome } = message as DecisionMessage
  outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
})

// Login: exact sliding log per IP and username, fail-closed (a brute-force guard must not open up).
// A caller refused 3 times within the window is locked out for an hour, then 2 h, 4 h, … (penalty).
app.post('/login', {
  config: { rateLimit: { algorithm: 'sliding-log', limit: 5, window: '15m', by: ['ip', 'body:username'], onRedisError: 'closed', name: 'login', penalty: { after: 3, for: '1h', backoff: 2 } } }
}, async () => ({ token: 'demo-token' }))

// Search: a token bucket per API key (10 per second sustained, bursts of 20) beside the key's plan:
// 10,000 a calendar month, reset on the 1st at midnight in Berlin. Both decided together, all-or-nothing.
app.get('/search', {
  config: {
    rateLimit: [
      { algorithm: 'token-bucket', limit: 10, window: '1s', burst: 20, by: 'api-key', name: 'search' },
      { limit: 10_000, period: 'month', timeZone: 'Europe/Berlin', by: 'api-key', name: 'search-plan' }
    ]
  }
}, async (req) => ({ results: [], query: (req.query as { q?: string }).q ?? '', remaining: req.rateLimit?.remaining }))

// Orders: the default algorithm (sliding window) per user; anonymous callers per IP. If Redis fails,
// this instance keeps enforcing its share (limit / fleetSize) on its own instead of admitting everyone.
app.get('/orders/:id', {
  config: { rateLimit: { limit: 100, window: '1m', by: 'user', name: 'orders', onRedisError: 'local' } }
}, async (req) => ({ id: (req.params as { id: string }).id, source: req.rateLimit?.degraded === true ? 'local limit' : store }))

// Exports: GCRA, expensive requests cost 5; a failed export gives its units back.
app.get('/exports', {
  config: { rateLimit: { algorithm: 'gcra', limit: 30, window: '1h', burst: 10, cost: 5, name: 'exports', refundOn: (reply) => reply.statusCode >= 500 } }
}, async (req, reply) => {
  if ((req.query as { fail?: string }).fail === '1') return await reply.code(500).send({ error: 'export failed; your quota was not charged' })
  return { queued: true, remaining: req.rateLimit?.remaining }
})

// Completions: an LLM token budget per API key (20,000 an hour, 5,000 at once), charged by what each
// completion really used. The request reserves its max_tokens (cost); when the response closes (also
// when the client aborts a stream) settle charges or gives back the difference. A completion may end
// over the budget (an overdraft): the caller's next ones wait, Retry-After saying how long.
const TOKEN_BURST = 5000
const completionTokens = new WeakMap<FastifyRequest, number>()
const tokenQuery = (req: FastifyRequest, name: 'max_tokens' | 'used', fallback: number, max: number): number => {
  const value = Number((req.query as Record<string, string | undefined>)[name] ?? fallback)
  return Number.isInteger(value) ? Math.min(Math.max(value, name === 'used' ? 0 : 1), max) : fallback
}
const maxTokens = (req: FastifyRequest): number => tokenQuery(req, 'max_tokens', 500, 2000)
const settleTokens = (req: FastifyRequest): number => completionTokens.get(req) ?? 0
app.get('/complete', {
  config: { rateLimit: { algorithm: 'token-bucket', limit: 20_000, window: '1h', burst: TOKEN_BURST, by: 'api-key', name: 'tokens', cost: maxTokens, settle: settleTokens } }
}, async (req) => {
  // A stand-in for the model: `used` says how many tokens this completion took (default: half the reservation).
  const used = tokenQuery(req, 'used', Math.ceil(maxTokens(req) / 2), TOKEN_BURST)
  completionTokens.set(req, used)
  return { text: 'lorem ipsum', reserved: maxTokens(req), used, remainingBeforeSettle: req.rateLimit?.remaining }
})

// Reports: a burst limit and an hourly quota, decided together: a refused request charges neither.
app.get('/reports', {
  config: { rateLimit: [{ limit: 5, window: '1s', name: 'reports-burst' }, { limit: 100, window: '1h', name: 'reports-hourly', algorithm: 'fixed-window' }] }
}, async (req) => ({ policies: req.rateLimit?.policies }))

// Renders: at most 2 in flight per IP across the fleet (a concurrency block); the slot is given back when
// the response closes. The handler watches request.signal: after a client abort its slot is free already.
app.get('/render', {
  config: { rateLimit: { concurrency: 2, by: 'ip', name: 'renders' } }
}, async (req) => {
  const ms = Math.min(2000, Number((req.query as { ms?: string }).ms ?? 200) || 0)
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms)
    req.signal.addEventListener('abort', () => { clearTimeout(timer); resolve() })
  })
  return { rendered: !req.signal.aborted, free: req.rateLimit?.remaining }
})

// Thumbnails: shaped instead of refused. 5 per second per IP; a request whose turn comes within 500 ms
// is held until it (turns reserved fleet-wide), one past that is refused. docs/shaping.md.
app.get('/thumbnails', {
  config: { rateLimit: { algorithm: 'gcra', limit: 5, window: '1s', delay: '500ms', by: 'ip', name: 'thumbnails' } }
}, async (req) => ({ outcome: req.rateLimit?.outcome, delayMs: req.rateLimit?.delayMs }))

// Downloads: one in flight per IP across the fleet, and a request that finds it busy waits up to 3 s for
// the slot (a fleet-wide queue in arrival order) instead of a 429. docs/shaping.md.
app.get('/downloads', {
  config: { rateLimit: { concurrency: 1, wait: '3s', by: 'ip', name: 'downloads' } }
}, async (req) => {
  await new Promise((resolve) => setTimeout(resolve, 300))
  return { outcome: req.rateLimit?.outcome, waited: (req.rateLimit?.delayMs ?? 0) > 0 }
})

// Charge: an outbound call to a payment provider, at most 5 per second for the whole fleet; each call
// waits for its turn (schedule()), and one whose turn is more than 2 s away is refused.
app.post('/charge', { config: { rateLimit: false } }, async (_req, reply) => {
  try {
    const decision = await app.rateLimit.schedule('upstream', { apiKey: 'payment-provider' })
    return { charged: true, waitedMs: decision.delayMs }
  } catch (error) {
    const refusal = error as { code?: string, retryAfter?: number }
    if (refusal.code !== 'FST_RRL_RATE_LIMITED') throw error
    return await reply.code(429).header('retry-after', refusal.retryAfter).send({ error: 'upstream budget spent', retryAfter: refusal.retryAfter })
  }
})

// Feed: the limit depends on the caller's plan; the RateLimit-Policy header names the tier.
app.get('/feed', {
  config: { rateLimit: { limit: { default: 30, pro: 300 }, window: '1m', name: 'feed' } }
}, async (req) => ({ tier: req.rateLimit?.tier, remaining: req.rateLimit?.remaining }))

// Notify: the HTTP route is unlimited, the e-mails it sends are limited (3 per hour per user).
app.post('/notify', { config: { rateLimit: false } }, async (req, reply) => {
  const user = userOf(req)
  if (user === undefined) return await reply.code(401).send({ error: 'x-user-id required' })
  const decision = await app.rateLimit.consume('email-send', { user })
  if (!decision.allowed) return await reply.code(429).send({ error: 'e-mail quota spent', retryAfterMs: decision.retryAfterMs })
  return { sent: true, remaining: decision.remaining }
})

// Admin: peek (no charge) and reset a user's orders limit. Protect such routes in a real service.
app.get('/admin/peek', { config: { rateLimit: false } }, async (req) => {
  return await app.rateLimit.peek('GET /orders/:id', { user: (req.query as { user?: string }).user ?? '', ip: req.ip })
})
app.post('/admin/reset', { config: { rateLimit: false } }, async (req) => {
  await app.rateLimit.reset('GET /orders/:id', { user: (req.query as { user?: string }).user ?? '', ip: req.ip })
  return { reset: true }
})

// Admin: runtime overrides of the orders limit, fleet-wide (every instance within 1 s), logged with who
// and why. The x-admin header stands in for real operator authentication: never expose these routes.
const adminOf = (req: FastifyRequest) => {
  const admin = req.headers['x-admin']
  return typeof admin === 'string' && admin !== '' ? admin : undefined
}
// Only admin routes carry this preHandler: a request without x-admin is refused before the handler.
const admin = { config: { rateLimit: false as const }, preHandler: async (req: FastifyRequest, reply: FastifyReply) => { if (adminOf(req) === undefined) await reply.code(401).send({ error: 'x-admin required' }) } }
const actorOf = (req: FastifyRequest) => adminOf(req) ?? ''
const ttlOf = (ttl: string | undefined) => ttl === 'permanent' ? 'permanent' : Number(ttl ?? 600_000)
app.post('/admin/override', admin, async (req) => {
  const query = req.query as { user?: string, limit?: string, ttl?: string, reason?: string }
  return await app.rateLimit.setOverride({
    target: 'GET /orders/:id',
    identity: query.user === undefined ? undefined : { user: query.user },
    limit: Number(query.limit),
    ttl: ttlOf(query.ttl),
    actor: actorOf(req),
    reason: query.reason ?? ''
  })
})
app.get('/admin/overrides', admin, async () => await app.rateLimit.listOverrides())
app.delete('/admin/override', admin, async (req) => {
  const query = req.query as { id?: string, reason?: string }
  return { cleared: await app.rateLimit.clearOverride(query.id ?? '', { actor: actorOf(req), reason: query.reason ?? '' }) }
})

// Admin: operator bans of one caller (ip, user or apiKey), on every limited route or one, fleet-wide
// (every instance within 1 s), logged with who and why; reset() never lifts one.
app.post('/admin/ban', admin, async (req) => {
  const query = req.query as { ip?: string, user?: string, apiKey?: string, route?: string, ttl?: string, status?: string, reason?: string }
  const identity = query.ip !== undefined ? { ip: query.ip } : query.apiKey !== undefined ? { apiKey: query.apiKey } : { user: query.user ?? '' }
  return await app.rateLimit.ban({
    target: query.route,
    identity,
    ttl: ttlOf(query.ttl),
    statusCode: query.status === '429' ? 429 : 403,
    actor: actorOf(req),
    reason: query.reason ?? ''
  })
})
app.get('/admin/bans', admin, async () => await app.rateLimit.listBans())
app.delete('/admin/ban', admin, async (req) => {
  const query = req.query as { id?: string, reason?: string }
  return { lifted: await app.rateLimit.unban(query.id ?? '', { actor: actorOf(req), reason: query.reason ?? '' }) }
})

// Token: a demo sign-in without a password, so /me can be tried with curl (limited per IP like any anonymous route).
app.post('/token', {
  config: { rateLimit: { limit: 10, window: '1m', by: 'ip', name: 'token' } }
}, async (req, reply) => await reply.type('text/plain').send(app.jwt.sign({ sub: (req.query as { user?: string }).user ?? 'alice' })))

// Me: authenticated in a preHandler (where @fastify/auth and many apps authenticate). With the
// decision in that stage too, after the route's own preHandler, each user gets a bucket of their
// own; in onRequest (the default) it would see no user yet and pool everyone on one address.
app.get('/me', {
  preHandler: async (req) => { await req.jwtVerify() },
  config: { rateLimit: { limit: 5, window: '1m', by: 'user', hook: 'preHandler', name: 'me' } }
}, async (req) => ({ user: req.user.sub, remaining: req.rateLimit?.remaining }))

// Health: explicitly unlimited.
app.get('/health', { config: { rateLimit: false } }, async () => ({ status: 'ok' }))

app.get('/', { config: { rateLimit: false } }, async () => ({ policies: app.rateLimit.policies(), stats: app.rateLimit.stats(), outcomes }))

// The operator's console (docs/console.md): a page that shows the fleet's picture and bans, overrides and
// resets through fastify.rateLimit. Here only callers on this machine may use it; a real service asks its
// own operator authentication (a session, an SSO header set by its proxy) in authorize and names the operator in actor.
const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1'])
await app.register(consolePage, {
  prefix: '/ops/limits',
  authorize: (req) => LOOPBACK.has(req.socket.remoteAddress ?? ''),
  actor: (req) => `demo-operator@${req.ip}`
})

await app.listen({ host: '127.0.0.1', port })
