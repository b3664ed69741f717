import tap, { test } from 'tap'
import { createClient, createClientPool, createSentinel } from 'redis'
import { Redis } from 'ioredis'
import { buildApp } from '../helpers/app.js'
import { scriptCalls, uniquePrefix } from '../helpers/redis.js'
import { HOST } from '../helpers/clients.js'
import { adminClient, startSentinel, startServer } from '../helpers/topologies.js'
import { clientPort } from '../../lib/store/redis/client/detect.js'
import { isNoScript } from '../../lib/store/redis/client/port.js'

/*
 * What only node-redis needs beyond the shared subset (clients.test.ts): its
 * v6 keyPrefix honoured as ioredis honours its own, a call defused before the
 * client wrote it never reaches Redis, createSentinel, and what is refused.
 */
const server = await startServer([], { label: 'noderedis' })
const admin = adminClient(server.port)
tap.teardown(async () => { admin.disconnect(); await server.stop() })

interface Connected { destroy: () => void, sendCommand: (...args: never[]) => unknown }

async function connected (keyPrefix?: string): Promise<Connected> {
  const client = createClient({ socket: { host: HOST, port: server.port }, disableOfflineQueue: true, keyPrefix })
  client.on('error', () => {})
  await client.connect()
  return client
}

test('keyPrefix: node-redis 6 and ioredis store the same keys under it', async (t) => {
  const prefix = uniquePrefix('kp')
  const node = await connected('app:')
  const io = new Redis({ host: HOST, port: server.port, keyPrefix: 'app:', enableOfflineQueue: false })
  t.teardown(() => { node.destroy(); io.disconnect() })
  for (const [name, redis] of [['node-redis', node], ['ioredis', io]] as const) {
    const app = await buildApp({ redis, prefix: `${prefix}${name.length}` })
    app.get('/x', { config: { rateLimit: { limit: 2, window: '1h' } } }, async () => 'ok')
    await app.ready()
    t.same([(await app.inject('/x')).statusCode, (await app.inject('/x')).statusCode, (await app.inject('/x')).statusCode], [200, 200, 429], `${name}: limit enforced`)
    await app.rateLimit.setOverride({ target: 'GET /x', limit: 9, ttl: 60_000, actor: 't', reason: 'prefix' })
    await app.close()
  }
  const keys = (suffix: number): Promise<string[]> => admin.keys(`*${prefix}${suffix}:*`)
  const [nodeKeys, ioKeys] = [await keys('node-redis'.length), await keys('ioredis'.length)]
  t.ok(nodeKeys.length >= 2 && nodeKeys.every((key) => key.startsWith(`app:${prefix}`)), `node-redis: every key under keyPrefix (${nodeKeys.join(', ')})`)
  t.same(nodeKeys.map((key) => key.replace(/\d+:/, ':')).sort(), ioKeys.map((key) => key.replace(/\d+:/, ':')).sort(), 'the same layout as ioredis')
})

test('a call defused before node-redis wrote it never reaches Redis; a written one is answered', async (t) => {
  const client = await connected()
  t.teardown(() => { client.destroy() })
  const port = clientPort(client)!
  const before = await scriptCalls(admin)
  const call = port.script('eval', 'return 1', [0])
  const handedAt = call.writtenAt
  call.defuse()
  const error: unknown = await call.reply.then(() => undefined, (reason: unknown) => reason)
  t.equal((error as Error | undefined)?.constructor.name, 'AbortError', 'aborted in the queue')
  t.notOk(port.isServerError(error), 'a client-side error: it does not show Redis alive')
  t.equal(await scriptCalls(admin) - before, 0, 'Redis ran nothing')
  const written = port.script('eval', 'return 7', [1, 'k', 'v'])
  t.equal(await written.reply, 7)
  t.ok(written.writtenAt > handedAt, 'writtenAt is the write, after the hand-off')
  written.defuse()
  t.equal(await scriptCalls(admin) - before, 1, 'a defuse after the write changes nothing')
  const noscript: unknown = await port.script('evalsha', '0'.repeat(40), [0]).reply.then(() => undefined, (reason: unknown) => reason)
  t.ok(port.isServerError(noscript) && isNoScript(noscript), 'NOSCRIPT is an error reply from Redis (Redis alive), and recognised')
})

test('createSentinel: exact under concurrency, warm scripts at ready()', async (t) => {
  const topology = await startSentinel()
  const sentinel = createSentinel({ name: topology.name, sentinelRootNodes: topology.sentinels, nodeClientOptions: { disableOfflineQueue: true } })
  sentinel.on('error', () => {})
  await sentinel.connect()
  const app = await buildApp({ redis: sentinel, prefix: uniquePrefix('sn'), denyCache: false })
  app.get('/x', { config: { rateLimit: { limit: 25, window: '1h' } } }, async () => 'ok')
  t.teardown(async () => { await app.close(); sentinel.destroy(); await topology.stop() })
  await app.ready()
  const master = topology.admin(await topology.masterPort())
  t.match(await master.info('commandstats'), /cmdstat_script\|load:calls=[1-9]/, 'ready() loaded the script on the master')
  const statuses = await Promise.all(Array.from({ length: 200 }, async () => (await app.inject('/x')).statusCode))
  t.equal(statuses.filter((code) => code === 200).length, 25, 'exactly the limit')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('what is not a supported client fails register with FST_RRL_UNSUPPORTED_CLIENT naming it', async (t) => {
  const pool = createClientPool({ socket: { host: HOST, port: server.port } })
  class GlideClient { invokeScript (): void {} customCommand (): void {} }
  for (const [redis, named] of [[pool, /option `redis` is an object of class/], [new GlideClient(), /class GlideClient/], [{ sendCommand () {} }, /a plain object/], ['redis://x', /a string/]] as const) {
    await t.rejects(buildApp({ redis: redis as never }), { code: 'FST_RRL_UNSUPPORTED_CLIENT', message: named })
  }
})
