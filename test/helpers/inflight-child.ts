/**
 * A child instance for test/inflight.test.ts: takes 3 concurrency slots with
 * handlers that never finish, prints `held 3`, and waits to be SIGKILLed.
 * argv: the Redis port, the key prefix.
 */
import { Redis } from 'ioredis'
import { buildApp } from './app.js'

const [port, prefix] = process.argv.slice(2) as [string, string]
const redis = new Redis({ port: Number(port), host: '127.0.0.1', enableOfflineQueue: false })
redis.on('error', () => {})
await new Promise((resolve) => redis.once('ready', resolve))
const app = await buildApp({ redis, prefix, lease: '1s' })
let started = 0
app.get('/held', { config: { rateLimit: { concurrency: 3, by: 'ip' } } }, async () => {
  started++
  if (started === 3) process.stdout.write('held 3\n')
  await new Promise(() => {})
})
await app.ready()
for (let i = 0; i < 3; i++) app.inject({ url: '/held' }).catch(() => {})
setInterval(() => {}, 1000)
