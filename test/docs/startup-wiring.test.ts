/**
 * Starting while Redis is down, as the docs say it goes, with the docs' own
 * code and nothing listening on the Redis port:
 *
 * - the startup-safe wirings (the README's Quick Start, its app-made ioredis
 *   client passed as `redis`, and docs/clients.md's node-redis client with
 *   `connect()` not awaited) are run as copied: `ready()` finishes in about
 *   0.5 s, each route answers by its onRedisError, and enforcement starts
 *   once Redis appears;
 * - the README's first wiring (the CommonJS example) runs as a process, as
 *   `node` runs it: it listens, answers by onRedisError, and prints nothing
 *   about the client's errors to stderr (they go to the app's logger);
 * - the README's @fastify/redis wiring does not start: it fails at
 *   avvio's plugin timeout (shortened here to 500 ms): the awaited register
 *   rejects with AVV_ERR_PLUGIN_EXEC_TIMEOUT, ready() with
 *   FST_ERR_PLUGIN_TIMEOUT, also with a client handed to @fastify/redis.
 */
import { test } from 'tap'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import fastifyRedis from '@fastify/redis'
import { Redis } from 'ioredis'
import { blockModule, codeBlocks, isCommonJs, root, tsBlocks, within, type Block } from '../helpers/doc-blocks.js'
import { freePort, spawnOwned } from '../helpers/processes.js'
import { RECOMMENDED_OPTIONS, startServer, waitFor, type ManagedServer } from '../helpers/topologies.js'

const blocks = tsBlocks()

/** The one ```ts block of `file` that matches `pattern`. */
function blockOf (file: string, pattern: RegExp): Block {
  const found = blocks.filter((block) => block.file === file && pattern.test(block.code))
  if (found.length !== 1) throw new Error(`${found.length} ts blocks of ${file} match ${String(pattern)}`)
  return found[0] as Block
}

const SNIPPETS = [
  { name: 'the README\'s Quick Start (its own ioredis client passed as redis)', block: blockOf('README.md', /new Redis\(/) },
  { name: 'docs/clients.md\'s node-redis createClient', block: blockOf('docs/clients.md', /createClient\(/) }
]

for (const { name, block } of SNIPPETS) {
  test(`${name} (${block.file} line ${block.line}), Redis absent: ready() in about 0.5 s, onRedisError answers, enforced once Redis appears`, async (t) => {
    const port = await freePort() // nothing listens here until the end
    const before = process.env.REDIS_URL
    process.env.REDIS_URL = `redis://127.0.0.1:${port}`
    t.teardown(() => { if (before === undefined) delete process.env.REDIS_URL; else process.env.REDIS_URL = before })
    // Importing the module runs the snippet (up to its listen, left out so routes can be added here):
    // its registration must not wait for Redis.
    const code = block.code.replace(/^await app\.listen\(.*\)\n/m, '')
    t.not(code, block.code, 'the snippet without its listen')
    const file = blockModule('startup', code, '\nexport { app }\n')
    // A hang guard, not a timing: the first import compiles lib/ (tsx), slow on a cold cache under CI's parallel files.
    const { app } = await within(import(pathToFileURL(file).href) as Promise<{ app: FastifyInstance }>, 30_000, 'the snippet')
    const later: { server?: ManagedServer } = {}
    t.teardown(async () => { await app.close(); await later.server?.stop() })
    app.get('/open', { config: { rateLimit: { limit: 2, window: '1h', onRedisError: 'open', by: 'header:x-id' } } }, async (req) => req.rateLimit)
    app.get('/closed', { config: { rateLimit: { limit: 2, window: '1h', onRedisError: 'closed', by: 'header:x-id' } } }, async () => 'ok')
    const started = performance.now()
    await within(app.ready(), 5000, 'ready()')
    const readyMs = performance.now() - started
    t.ok(readyMs < 1500, `ready() took ${readyMs.toFixed(0)} ms`)

    const get = async (url: string, id: string): Promise<LightMyRequestResponse> => await within(app.inject({ url, headers: { 'x-id': id } }), 2000, url)
    const asked = performance.now()
    const open = await get('/open', 'a')
    const closed = await get('/closed', 'a')
    t.ok(performance.now() - asked < 1000, 'both answered at once')
    t.equal(open.statusCode, 200)
    t.equal(open.json().degraded, true, 'fail-open: admitted, degraded')
    t.equal(closed.statusCode, 503)
    t.equal(closed.json().type, 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity', 'fail-closed: 503 problem+json')

    later.server = await startServer([], { port, label: 'startup' })
    const enforcedMs = await waitFor('an enforced decision', async () => (await get('/open', 'b')).json().degraded === false, 5000)
    t.comment(`enforced ${enforcedMs} ms after Redis appeared`)
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await get('/closed', 'late')).statusCode)
    t.same(statuses, [200, 200, 429], 'the limit holds once Redis is there')
  })
}

test('the README\'s first wiring (CommonJS) with Redis absent: it listens, answers by onRedisError, and logs the client\'s errors through the app', async (t) => {
  const first = codeBlocks().find((block) => block.file === 'README.md' && block.excerptOf === undefined)
  t.ok(first !== undefined && isCommonJs(first) && /new Redis\(/.test(first.code), 'the README\'s first block is the CommonJS example, with its own ioredis client')
  const file = blockModule('first-wiring-absent', (first as Block).code, '', 'cjs')
  const [redisPort, port] = [await freePort(), await freePort()]
  const child = spawnOwned(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  // A hang guard: the child compiles lib/ (tsx) before it listens.
  await waitFor('the example to listen', async () => (await fetch(`http://127.0.0.1:${port}/orders/1`)).status > 0, 30_000, 100)
  const res = await fetch(`http://127.0.0.1:${port}/orders/1`)
  t.equal(res.status, 200, 'fail-open (the default onRedisError): admitted')
  t.same(await res.json(), { order: { id: '1' } })
  t.equal(res.headers.get('ratelimit-policy'), null, 'degraded: no quota fields')
  // ioredis reconnects every 200 ms at most: half a second brings several connection errors.
  await new Promise((resolve) => setTimeout(resolve, 600))
  t.equal(child.exitCode, null, 'still running')
  t.notMatch(stderr, /Unhandled error event/, 'no ioredis error on stderr')
})

test('the README\'s @fastify/redis wiring does not start with Redis absent: AVV_ERR_PLUGIN_EXEC_TIMEOUT at the plugin timeout', async (t) => {
  const wiring = blockOf('README.md', /await app\.register\(fastifyRedis, \{/)
  const code = wiring.code.replace(/Fastify\(\)/, 'Fastify({ pluginTimeout: 500 })')
  t.not(code, wiring.code, 'the plugin timeout shortened to 500 ms')
  const file = blockModule('fastify-redis-absent', code)
  const [redisPort, port] = [await freePort(), await freePort()]
  const child = spawnOwned(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${redisPort}`, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [exitCode] = await within(once(child, 'exit'), 20_000, 'the wiring to exit')
  t.not(exitCode, 0, 'it exits with an error')
  t.match(stderr, /AVV_ERR_PLUGIN_EXEC_TIMEOUT/)
  t.match(stderr, /Plugin did not start in time: '@fastify\/redis'/)
})

test('@fastify/redis waits for a client handed to it too (`client`): register and ready() reject at the plugin timeout', async (t) => {
  const redis = new Redis({ host: '127.0.0.1', port: await freePort(), ...RECOMMENDED_OPTIONS })
  redis.on('error', () => {})
  t.teardown(() => { redis.disconnect() })
  const awaited = Fastify({ pluginTimeout: 500 })
  await t.rejects(within(awaited.register(fastifyRedis, { client: redis }), 5000, 'register'), { code: 'AVV_ERR_PLUGIN_EXEC_TIMEOUT' }, 'the awaited register')
  const app = Fastify({ pluginTimeout: 500 })
  app.register(fastifyRedis, { client: redis })
  await t.rejects(within(app.ready(), 5000, 'ready()'), { code: 'FST_ERR_PLUGIN_TIMEOUT', cause: { code: 'AVV_ERR_PLUGIN_EXEC_TIMEOUT' } }, 'ready()')
})
