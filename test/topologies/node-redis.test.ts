import tap, { test } from 'tap'
import { createClient, createClientPool, createSentinel } from 'redis'
import { createClient as createClient5 } from 'redis5'
import { Redis } from 'ioredis'
import { buildApp } from '../helpers/app.js'
import { uniquePrefix } from '../helpers/redis.js'
import { HOST } from '../helpers/clients.js'
import { adminClient, startSentinel, startServer } from '../helpers/topologies.js'
import { clientPort } from '../../lib/store/redis/client/detect.js'
import { isFunctionMissing, isNoScript } from '../../lib/store/redis/client/port.js'

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

test('a call defused before node-redis wrote it runs nothing; a written one is answered', async (t) => {
  const client = await connected()
  t.teardown(() => { client.destroy() })
  const port = clientPort(client)!
  const key = `${uniquePrefix('defuse')}:k`
  const call = port.script('eval', "return redis.call('INCR', KEYS[1])", [1, key])
  const handedAt = call.writtenAt
  t.notOk(call.written, 'held by the client until its next turn')
  call.defuse()
  t.equal(await call.reply, 0, 'written later as the inert script: it answers 0')
  t.equal(await admin.get(key), null, 'and touched no key')
  const written = port.script('eval', "return redis.call('INCR', KEYS[1])", [1, key])
  t.equal(await written.reply, 1)
  t.ok(written.written && written.writtenAt > handedAt, 'writtenAt is the write, after the hand-off')
  written.defuse()
  t.equal(await admin.get(key), '1', 'a defuse after the write changes nothing')
  const noscript: unknown = await port.script('evalsha', '0'.repeat(40), [0]).reply.then(() => undefined, (reason: unknown) => reason)
  t.ok(port.isServerError(noscript) && isNoScript(noscript), 'NOSCRIPT is an error reply from Redis (Redis alive), and recognised')
  // This file's own server: a function that would count, called and defused before its write.
  await admin.call('FUNCTION', 'LOAD', 'REPLACE', "#!lua name=defuse_test\nredis.register_function('defuse_test_incr', function (keys) return redis.call('INCR', keys[1]) end)")
  const held = port.script('fcall', 'defuse_test_incr', [1, key])
  held.defuse()
  const missing: unknown = await held.reply.then(() => undefined, (reason: unknown) => reason)
  t.ok(port.isServerError(missing) && isFunctionMissing(missing), 'an FCALL defused before its write names no function: "Function not found", recognised')
  t.equal(await admin.get(key), '1', 'and touched no key')
})

test('node-redis 5: calls defused in turn while queued leave the client working (its queue is never unlinked)', async (t) => {
  const client = createClient5({ socket: { host: HOST, port: server.port }, disableOfflineQueue: true })
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => { client.destroy() })
  const port = clientPort(client)!
  // Aborting queued commands one after another corrupts v5's queue; every later command then hangs.
  const calls = [1, 2, 3].map(() => port.script('eval', 'return 1', [0]))
  for (const call of calls) call.defuse()
  t.same(await Promise.all(calls.map(async (call) => await call.reply)), [0, 0, 0], 'each written as the inert script')
  t.equal(await client.sendCommand(['PING']), 'PONG', 'a later command is still written and answered')
})

test('createSentinel: exact under concurrency, the library loaded at ready()', async (t) => {
  const topology = await startSentinel()
  const sentinel = createSentinel({ name: topology.name, sentinelRootNodes: topology.sentinels, nodeClientOptions: { disableOfflineQueue: true } })
  sentinel.on('error', () => {})
  await sentinel.connect()
  const app = await buildApp({ redis: sentinel, prefix: uniquePrefix('sn'), denyCache: false })
  app.get('/x', { config: { rateLimit: { limit: 25, window: '1h' } } }, async () => 'ok')
  t.teardown(async () => { await app.close(); sentinel.destroy(); await topology.stop() })
  await app.ready()
  const master = topology.admin(await topology.masterPort())
  t.match(await master.info('commandstats'), /cmdstat_function\|load:calls=[1-9]/, 'ready() loaded the library on the master')
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
