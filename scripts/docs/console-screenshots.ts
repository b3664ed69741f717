/*
 * `npm run docs:console`: the screenshots of docs/console.md, from a real run.
 * A fleet of three instances on a private redis-server (started here, stopped
 * at exit: test/helpers/processes.ts), each publishing its picture every
 * second; traffic with refusals for a few seconds; a ban and an override made
 * through the API; then Debian's chromium (playwright-core; `npm run
 * install:chromium`) opens the console on the first instance and saves PNGs
 * under docs/images/.
 */
import { mkdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { chromium } from 'playwright-core'
import rateLimit from '../../lib/index.js'
import consolePage from '../../lib/console/page/index.js'
import { startRedisServer } from '../../test/helpers/redis.js'
import { tempDir } from '../../test/helpers/processes.js'

const IMAGES = fileURLToPath(new URL('../../docs/images/', import.meta.url))
const PREFIX = '/ops/limits'
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

async function instance (port: number, i: number): Promise<{ app: FastifyInstance, redis: Redis }> {
  const redis = new Redis({ port, host: '127.0.0.1' })
  const app = Fastify()
  app.addHook('onClose', async () => { await redis.quit() })
  await app.register(rateLimit, {
    redis,
    prefix: 'shots',
    picture: { interval: '1s', rawIdentities: true },
    user: (req) => req.headers['x-user'] as string | undefined,
    apiKey: (req) => req.headers['x-api-key'] as string | undefined
  })
  // The third instance runs the next release, with a higher limit: a deploy in progress, which the console shows as a disagreement.
  app.get('/orders/:id', { config: { rateLimit: { limit: i === 2 ? 8 : 5, window: '1m', by: 'user', name: 'orders' } } }, async () => 'ok')
  app.get('/search', { config: { rateLimit: { algorithm: 'token-bucket', limit: 10, window: '1s', burst: 20, by: 'api-key', name: 'search' } } }, async () => 'ok')
  app.post('/login', { config: { rateLimit: { algorithm: 'sliding-log', limit: 3, window: '15m', by: 'ip', name: 'login', onRedisError: 'closed' } } }, async () => 'ok')
  // Every instance serves the console (the same code everywhere); the browser opens the first.
  await app.register(consolePage, { prefix: PREFIX, authorize: () => true, actor: () => 'ops:alice@example.com' })
  return { app, redis }
}

/** A second of traffic on every instance: steady users, one scraper, a few login guessers, a busy API key. */
async function traffic (apps: FastifyInstance[], second: number): Promise<void> {
  const calls: Array<Promise<unknown>> = []
  apps.forEach((app, i) => {
    for (let n = 0; n < 4; n++) calls.push(app.inject({ url: `/orders/${n}`, headers: { 'x-user': `user-${i}-${n}-${second}` } }))
    for (let n = 0; n < 2 + (second % 3) * 2; n++) calls.push(app.inject({ url: '/orders/1', headers: { 'x-user': 'scraper-7' } }))
    for (let n = 0; n < 12 + (second % 4) * 4; n++) calls.push(app.inject({ url: '/search', headers: { 'x-api-key': `key-${i}` } }))
    calls.push(app.inject({ method: 'POST', url: '/login', remoteAddress: `203.0.113.${7 + (second % 2)}` }))
    calls.push(app.inject({ method: 'POST', url: '/login', remoteAddress: '198.51.100.23' }))
  })
  await Promise.all(calls)
}

const server = await startRedisServer()
const fleet = await Promise.all([0, 1, 2].map(async (i) => await instance(server.port, i)))
const apps = fleet.map(({ app }) => app)
const base = await (apps[0] as FastifyInstance).listen({ port: 0, host: '127.0.0.1' })
const api = (apps[0] as FastifyInstance).rateLimit
try {
  for (let second = 0; second < 8; second++) {
    await traffic(apps, second)
    await sleep(1000)
  }
  await api.ban({ identity: { ip: '198.51.100.23' }, target: 'POST /login', ttl: 3_600_000, actor: 'ops:alice@example.com', reason: 'INC-42 password spraying from one address' })
  await api.setOverride({ target: 'search', identity: { apiKey: 'key-2' }, limit: 50, ttl: 600_000, actor: 'ops:bob@example.com', reason: 'INC-43 partner backfill, agreed until 18:00' })
  const lifted = await api.ban({ identity: { user: 'scraper-7' }, target: 'GET /orders/:id', ttl: 600_000, actor: 'ops:alice@example.com', reason: 'INC-41 scraping order pages' })
  await api.unban(lifted.id, { actor: 'ops:bob@example.com', reason: 'INC-41 customer confirmed a misconfigured job, fixed' })
  // Traffic goes on while the page is open, so that its last interval is not empty.
  let second = 8
  const background = setInterval(() => { traffic(apps, second++).catch(() => {}) }, 1000)
  await sleep(2500)

  const context = await chromium.launchPersistentContext(tempDir('chromium'), {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 900 },
    deviceScaleFactor: 1,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage']
  })
  try {
    const page = await context.newPage()
    await page.goto(`${base}${PREFIX}/`)
    await page.waitForSelector('#top-table tbody tr.caller')
    await page.waitForSelector('#audit-table tbody tr:nth-child(4)')
    await sleep(1200)
    mkdirSync(IMAGES, { recursive: true })
    const shots: Array<[string, string]> = [['#fleet', 'console-fleet.png'], ['#routes', 'console-routes.png'], ['#top', 'console-top.png'], ['#disagreements', 'console-disagreements.png'], ['#bans', 'console-bans.png'], ['#overrides', 'console-overrides.png'], ['#audit', 'console-audit.png']]
    for (const [selector, file] of shots) {
      await page.locator(selector).screenshot({ path: `${IMAGES}${file}` })
      console.log(`docs/images/${file}`)
    }
  } finally {
    clearInterval(background)
    await context.close()
  }
} finally {
  for (const app of apps) await app.close()
  await server.stop()
}
