import { test, type Test } from 'tap'
import Fastify from 'fastify'
import { Cluster, Redis } from 'ioredis'
import rateLimit from '../lib/index.js'
import { FST_RRL_EVICTION_POLICY } from '../lib/errors.js'
import { evictsLimiterKeys } from '../lib/store/redis/store.js'
import { startRedisServer } from './helpers/redis.js'
import { startCluster, type ManagedServer } from './helpers/topologies.js'

/*
 * Eviction safety: at ready() the plugin reads maxmemory-policy from every
 * master and warns once per process (FST_RRL_EVICTION_POLICY) when limiter
 * keys can be evicted before their TTL. Each case runs against a private
 * redis-server started (and reconfigured) by this file only.
 */

type Warning = Error & { code?: string }

/** Collects this file's warnings; resets the once-per-process flag so each case sees its own. */
function watchWarnings (t: Test): Warning[] {
  const seen: Warning[] = []
  const listener = (warning: Warning): void => { if (warning.code === 'FST_RRL_EVICTION_POLICY') seen.push(warning) }
  process.on('warning', listener)
  t.teardown(() => { process.off('warning', listener) })
  FST_RRL_EVICTION_POLICY.emitted = false
  return seen
}

/** A private redis-server with these arguments and a client to it, both gone at the test's end. */
async function serverWith (t: Test, args: string[]): Promise<{ server: ManagedServer, client: Redis }> {
  const server = await startRedisServer(args)
  const client = new Redis(server.url)
  t.teardown(async () => { client.disconnect(); await server.stop() })
  return { server, client }
}

const tick = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

/** An app on `client` with one route, readied and closed; returns its debug log lines. */
async function readyApp (client: Redis | Cluster): Promise<Array<Record<string, unknown>>> {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'debug', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  await app.register(rateLimit, { redis: client })
  app.get('/', { config: { rateLimit: { limit: 10, window: '1m' } } }, async () => 'ok')
  await app.ready()
  await app.close()
  await tick()
  return lines
}

test('which policies can evict limiter keys', async (t) => {
  for (const policy of ['allkeys-lru', 'allkeys-lfu', 'allkeys-random', 'volatile-lru', 'volatile-lfu', 'volatile-random', 'volatile-ttl']) {
    t.equal(evictsLimiterKeys('1000000', policy), true, policy)
    t.equal(evictsLimiterKeys('0', policy), false, `${policy} without maxmemory evicts nothing`)
  }
  t.equal(evictsLimiterKeys('1000000', 'noeviction'), false, 'noeviction refuses writes instead')
})

test('a standalone Redis: warned once for allkeys-lru and volatile-*, silent for noeviction and no maxmemory', async (t) => {
  const { server, client } = await serverWith(t, ['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru'])
  const seen = watchWarnings(t)

  await readyApp(client)
  t.equal(seen.length, 1, 'allkeys-lru with maxmemory warns at ready()')
  t.equal(seen[0]?.name, 'FastifyRedisRateLimitWarning')
  t.match(seen[0]?.message, `127.0.0.1:${server.port} has maxmemory-policy allkeys-lru with maxmemory 67108864`)
  t.match(seen[0]?.message, /maxmemory-policy noeviction/, 'the warning says what to set')
  await readyApp(client)
  t.equal(seen.length, 1, 'once per process, however many apps')

  FST_RRL_EVICTION_POLICY.emitted = false
  await client.config('SET', 'maxmemory-policy', 'volatile-ttl')
  await readyApp(client)
  t.equal(seen.length, 2, 'volatile-ttl warns too: every key of ours has a TTL')
  t.match(seen[1]?.message, /volatile-ttl/)

  FST_RRL_EVICTION_POLICY.emitted = false
  await client.config('SET', 'maxmemory-policy', 'noeviction')
  await readyApp(client)
  t.equal(seen.length, 2, 'noeviction: no warning (writes fail under OOM and onRedisError decides)')

  await client.config('SET', 'maxmemory-policy', 'allkeys-lru')
  await client.config('SET', 'maxmemory', '0')
  await readyApp(client)
  t.equal(seen.length, 2, 'maxmemory 0: nothing is evicted, no warning')
})

test('a started-with-noeviction Redis does not warn', async (t) => {
  const { client } = await serverWith(t, ['--maxmemory', '64mb', '--maxmemory-policy', 'noeviction'])
  const seen = watchWarnings(t)
  await readyApp(client)
  t.equal(seen.length, 0)
})

test('CONFIG refused by an ACL: no warning, no failure, a debug line', async (t) => {
  const { server, client: admin } = await serverWith(t, ['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru'])
  await admin.call('ACL', 'SETUSER', 'limiter', 'on', '>secret', '~*', '+@all', '-config')
  const client = new Redis({ host: server.host, port: server.port, username: 'limiter', password: 'secret' })
  t.teardown(() => { client.disconnect() })
  await t.rejects(client.config('GET', 'maxmemory-policy'), /NOPERM/, 'the user may not run CONFIG')
  const seen = watchWarnings(t)

  const lines = await readyApp(client)
  t.equal(seen.length, 0, 'nothing known, nothing warned')
  const debug = lines.filter((line) => line.msg === 'rate limit: cannot read maxmemory-policy (CONFIG refused), eviction not checked')
  t.equal(debug.length, 1, 'one debug line')
  t.equal(debug[0]?.level, 20)
  t.equal(debug[0]?.node, `127.0.0.1:${server.port}`)
  t.match(debug[0]?.cause, /NOPERM/)
  t.notOk(lines.some((line) => (line.level as number) >= 40), 'nothing above debug')
})

test('a Cluster: each master is read, the warning names the one that evicts', async (t) => {
  const cluster = await startCluster()
  const client = new Cluster(cluster.startupNodes, { enableOfflineQueue: false, redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 } })
  client.on('error', () => {})
  t.teardown(async () => { client.disconnect(); await cluster.stop() })
  const [first, second] = cluster.nodes
  if (first === undefined || second === undefined) throw new Error('three nodes expected')
  await cluster.admin(first.port).config('SET', 'maxmemory', '64mb')
  await cluster.admin(first.port).config('SET', 'maxmemory-policy', 'allkeys-lfu')
  await cluster.admin(second.port).config('SET', 'maxmemory', '64mb')
  await cluster.admin(second.port).config('SET', 'maxmemory-policy', 'noeviction')
  const seen = watchWarnings(t)

  await readyApp(client)
  t.equal(seen.length, 1)
  t.match(seen[0]?.message, `127.0.0.1:${first.port} has maxmemory-policy allkeys-lfu`)
  t.notMatch(seen[0]?.message, `:${second.port} `, 'the noeviction master is not named')
})
