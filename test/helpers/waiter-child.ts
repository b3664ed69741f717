/**
 * A child instance for test/wait.test.ts: sends 3 requests to a concurrency
 * block with `wait` whose one slot the parent holds, prints `queued 3` once
 * all three wait in the fleet's queue, and waits to be SIGKILLed.
 * argv: the Redis port, the key prefix.
 */
import { Redis } from 'ioredis'
import { buildApp } from './app.js'

const [port, prefix] = process.argv.slice(2) as [string, string]
const redis = new Redis({ port: Number(port), host: '127.0.0.1', enableOfflineQueue: false })
redis.on('error', () => {})
await new Promise((resolve) => redis.once('ready', resolve))
const app = await buildApp({ redis, prefix, lease: '2s', user: () => 'waiter' })
app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '20s', by: 'user' } } }, async () => ({ ok: true }))
await app.ready()
for (let i = 0; i < 3; i++) app.inject({ url: '/slot' }).catch(() => {})
const timer = setInterval(() => {
  if (app.rateLimit.stats().waiting === 3) {
    clearInterval(timer)
    process.stdout.write('queued 3\n')
  }
}, 10)
setInterval(() => {}, 1000)
