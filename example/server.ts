/*
 * `npm run demo`: an example service on 127.0.0.1:3000 showing each algorithm
 * and identity kind. With REDIS_URL it uses Redis (through @fastify/redis),
 * otherwise the in-process memory store, and says which in its first log line.
 *
 *   curl -i http://127.0.0.1:3000/orders/42 -H 'x-user-id: alice'
 *   curl -i http://127.0.0.1:3000/search?q=redis -H 'x-api-key: demo-key-1'
 *   curl -i http://127.0.0.1:3000/login -H 'content-type: application/json' -d '{"username":"alice"}'
 *   curl -i http://127.0.0.1:3000/health
 */
import Fastify, { type FastifyRequest } from 'fastify'
import fastifyRedis from '@fastify/redis'
import rateLimit from '../lib/index.js'

const redisUrl = process.env.REDIS_URL
const port = Number(process.env.PORT ?? 3000)

// Behind a load balancer you would trust its addresses here, e.g. ['10.0.0.0/8'].
const app = Fastify({ logger: true, trustProxy: false })
app.log.info(redisUrl === undefined || redisUrl === ''
  ? 'rate limits use the in-process memory store (set REDIS_URL to share them across instances)'
  : `rate limits use Redis at ${new URL(redisUrl).host}`)

if (redisUrl !== undefined && redisUrl !== '') {
  // The client options the README recommends: fail fast, never resend a lost reply.
  await app.register(fastifyRedis, {
    url: redisUrl,
    enableOfflineQueue: false,
    commandTimeout: 100,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false
  })
}

// A stand-in for real authentication: it runs before the limiter's hook.
const DEMO_KEYS = new Set(['demo-key-1', 'demo-key-2'])
const userOf = (req: FastifyRequest) => req.headers['x-user-id'] as string | undefined
const validApiKey = (req: FastifyRequest) => {
  const key = req.headers['x-api-key']
  return typeof key === 'string' && DEMO_KEYS.has(key) ? key : undefined
}

await app.register(rateLimit, {
  store: redisUrl === undefined || redisUrl === '' ? 'memory' : 'redis',
  prefix: 'demo',
  onRedisError: 'open',
  timeout: 50,
  headers: 'ietf',
  user: userOf,
  apiKey: validApiKey
})

// Login: exact sliding log per IP and username, fail-closed (a brute-force guard must not open up).
app.post('/login', {
  config: { rateLimit: { algorithm: 'sliding-log', limit: 5, window: '15m', by: ['ip', 'body:username'], onRedisError: 'closed', name: 'login' } }
}, async () => ({ token: 'demo-token' }))

// Search: a token bucket per API key: 10 per second sustained, bursts of 20.
app.get('/search', {
  config: { rateLimit: { algorithm: 'token-bucket', limit: 10, window: '1s', burst: 20, by: 'api-key', name: 'search' } }
}, async (req) => ({ results: [], query: (req.query as { q?: string }).q ?? '', remaining: req.rateLimit?.remaining }))

// Orders: the default algorithm (sliding window) per user; anonymous callers per IP.
app.get('/orders/:id', {
  config: { rateLimit: { limit: 100, window: '1m', by: 'user', name: 'orders' } }
}, async (req) => ({ id: (req.params as { id: string }).id }))

// Exports: GCRA, expensive requests cost 5.
app.get('/exports', {
  config: { rateLimit: { algorithm: 'gcra', limit: 30, window: '1h', burst: 10, cost: 5, name: 'exports' } }
}, async () => ({ queued: true }))

// Health: explicitly unlimited.
app.get('/health', { config: { rateLimit: false } }, async () => ({ status: 'ok' }))

app.get('/', { config: { rateLimit: false } }, async () => ({ policies: app.rateLimit.policies() }))

await app.listen({ host: '127.0.0.1', port })
