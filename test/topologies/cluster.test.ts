import { performance } from 'node:perf_hooks'
import { test } from 'tap'
import { request } from 'undici'
import { Cluster } from 'ioredis'
import type { FastifyInstance } from 'fastify'
import { ALGORITHMS } from '../../lib/index.js'
import { buildApp } from '../helpers/app.js'
import { readState } from '../helpers/redis.js'
import { startCluster, type ManagedCluster } from '../helpers/topologies.js'

/*
 * A real 3-master Redis Cluster on loopback ports, started once for this file.
 * The plugin gets an ioredis Cluster as its `redis` option.
 */
const TIMEOUT = 50
const MARGIN = 150

let cluster: ManagedCluster
const clients: Cluster[] = []

/** The recommended options; `commandTimeout` generous where atomicity, not latency, is under test (a loaded CI machine). */
function clusterClient (commandTimeout: number): Cluster {
  const client = new Cluster(cluster.startupNodes, {
    enableOfflineQueue: false,
    retryDelayOnTryAgain: 10,
    redisOptions: { commandTimeout, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 }
  })
  client.on('error', () => {})
  clients.push(client)
  return client
}

async function readyClient (commandTimeout = 5000): Promise<Cluster> {
  const client = clusterClient(commandTimeout)
  await new Promise<void>((resolve, reject) => {
    if (client.status === 'ready') return resolve()
    const timer = setTimeout(() => reject(new Error('cluster client not ready in 5 s')), 5000)
    client.once('ready', () => { clearTimeout(timer); resolve() })
  })
  return client
}

/** CRC16/XMODEM of the hash tag, as Redis Cluster computes a key's slot. */
function keySlot (key: string): number {
  let hashed = key
  const open = key.indexOf('{')
  if (open !== -1) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) hashed = key.slice(open + 1, close)
  }
  let crc = 0
  for (const byte of Buffer.from(hashed)) {
    crc ^= byte << 8
    for (let i = 0; i < 8; i++) crc = (crc & 0x8000) !== 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16384
}

/** Every key under `prefix` on every master. */
async function keysByNode (prefix: string): Promise<Map<number, string[]>> {
  const result = new Map<number, string[]>()
  for (const node of cluster.nodes) {
    const keys: string[] = []
    let cursor = '0'
    do {
      const [next, batch] = await cluster.admin(node.port).scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
      cursor = next
      keys.push(...batch)
    } while (cursor !== '0')
    result.set(node.port, keys)
  }
  return result
}

test('setup: a 3-master cluster', async (t) => {
  const started = Date.now()
  cluster = await startCluster()
  t.equal(cluster.nodes.length, 3)
  t.comment(`figures ${JSON.stringify({ clusterStartMs: Date.now() - started })}`)
})

test('cluster: fresh clients, the first burst after ready(): two instances, 200 concurrent requests over sockets, limit 25 → exactly 25 for every algorithm', async (t) => {
  const LIMIT = 25
  const REQUESTS = 200
  const counts: Record<string, number> = {}
  for (const algorithm of ALGORITHMS) {
    // A new fleet per algorithm, on Cluster clients created just now, with the plugin's default
    // options: ready() connects every master and loads the script, so the first burst is exact.
    const fleet: Array<{ app: FastifyInstance, base: string }> = []
    for (let i = 0; i < 2; i++) {
      const app = await buildApp({ redis: clusterClient(1000), prefix: `cc-${algorithm}`, user: (req) => req.headers['x-user'] as string | undefined })
      app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: LIMIT, window: '1h', by: 'user' } } }, async () => 'ok')
      fleet.push({ app, base: await app.listen({ port: 0, host: '127.0.0.1' }) })
    }
    const statuses = await Promise.all(Array.from({ length: REQUESTS }, async (_, i) => {
      const res = await request(`${fleet[i % 2]!.base}/${algorithm}`, { headers: { 'x-user': 'one-identity' } })
      await res.body.dump()
      return res.statusCode
    }))
    counts[algorithm] = statuses.filter((code) => code === 200).length
    t.equal(counts[algorithm], LIMIT, `${algorithm}: exactly ${LIMIT} admitted`)
    t.equal(statuses.filter((code) => code === 429).length, REQUESTS - LIMIT, `${algorithm}: every other request refused with 429`)
    for (const member of fleet) t.equal(member.app.rateLimit.stats().degraded, 0, `${algorithm}: nothing degraded`)
    for (const member of fleet) await member.app.close()
    // One identity, one route: the algorithm's state lives in exactly one key, on one node.
    t.equal([...(await keysByNode(`cc-${algorithm}`)).values()].flat().length, 1, `${algorithm}: one key`)
  }
  t.comment(`figures ${JSON.stringify({ clusterAdmitted: counts, limit: LIMIT, requests: REQUESTS })}`)
})

/** Whether the Cluster node on `port` holds the store's Functions library. */
async function holdsLibrary (port: number): Promise<boolean> {
  const { buildLibrary } = await import('../../scripts/build/library.js')
  return (await cluster.admin(port).call('FUNCTION', 'LIST', 'LIBRARYNAME', buildLibrary().name) as unknown[]).length > 0
}

test('cluster: ready() loads the library on every master before the first request; a master that lost it gets it again', async (t) => {
  const app = await buildApp({ redis: clusterClient(1000), prefix: 'warm' })
  app.get('/w', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  for (const node of cluster.nodes) await cluster.admin(node.port).call('FUNCTION', 'FLUSH')
  await app.ready()
  t.teardown(async () => { await app.close() })
  for (const node of cluster.nodes) t.ok(await holdsLibrary(node.port), `master ${node.port} has the library`)
  for (const node of cluster.nodes) await cluster.admin(node.port).call('FUNCTION', 'FLUSH')
  const res = await app.inject('/w')
  t.equal(res.statusCode, 200)
  t.equal(app.rateLimit.stats().degraded, 0, '"Function not found" was answered by an EVAL, not by onRedisError')
  let everywhere = false
  for (let i = 0; i < 200 && !everywhere; i++) {
    everywhere = (await Promise.all(cluster.nodes.map(async (node) => await holdsLibrary(node.port)))).every(Boolean)
    if (!everywhere) await new Promise((resolve) => setTimeout(resolve, 10))
  }
  t.ok(everywhere, 'the library is loaded again on every master')
})

test('cluster: the slot of a live key migrates during traffic; decisions stay within the timeout, the count is intact', async (t) => {
  const redis = await readyClient(100)
  const app = await buildApp({ redis, prefix: 'mig', timeout: TIMEOUT })
  app.get('/m', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1_000_000, window: '1h', onRedisError: 'open' } } }, async (req) => req.rateLimit)
  app.get('/warm', { config: { rateLimit: false } }, async () => 'warm')
  await app.ready()
  t.teardown(async () => { await app.close() })
  await app.inject('/warm')
  t.equal((await app.inject('/m')).json().degraded, false)
  const [key] = [...(await keysByNode('mig')).values()].flat()
  t.ok(key, 'the live key exists')
  const slot = keySlot(key as string)
  t.equal(await cluster.admin(cluster.nodes[0]!.port).cluster('KEYSLOT', key as string), slot, 'our CRC16 agrees with CLUSTER KEYSLOT')
  const from = await cluster.ownerOf(slot)
  const to = cluster.nodes.find((node) => node.id !== from.id)!

  let enforced = 1
  let degraded = 0
  let worst = 0
  let decisions = 0
  const load = { running: true }
  const traffic = (async () => {
    for (let i = 0; load.running && i < 20_000; i++) {
      const started = performance.now()
      const res = await app.inject('/m')
      worst = Math.max(worst, performance.now() - started)
      decisions++
      if (res.json().degraded === true) degraded++
      else enforced++
      await new Promise((resolve) => setTimeout(resolve, 2))
    }
  })()
  const pause = async (): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, 300)) }
  await pause()
  const migrationStarted = performance.now()
  const { keys } = await cluster.migrateSlot(slot, to, { beforeMigrate: pause, afterMigrate: pause })
  const migrationMs = performance.now() - migrationStarted
  await pause()
  load.running = false
  await traffic

  const asking = /cmdstat_asking:calls=(\d+)/.exec(await cluster.admin(to.port).info('commandstats'))
  t.ok(Number(asking?.[1] ?? 0) > 0, `the client followed ASK redirections to the destination (${asking?.[1] ?? 0} ASKING)`)
  t.equal(keys, 1, 'MIGRATE moved the live key')
  t.equal((await cluster.ownerOf(slot)).id, to.id, 'the slot now belongs to the destination')
  t.ok(decisions > 50, `${decisions} decisions during the migration`)
  t.ok(worst < TIMEOUT + MARGIN, `worst decision during the migration: ${worst.toFixed(1)} ms`)
  const stored = (await readState(cluster.admin(to.port), key as string))?.[1] ?? Number.NaN
  // Each enforced decision counted once; a decision abandoned at the timeout may or may not have run (never twice).
  t.ok(stored >= enforced && stored <= enforced + degraded, `count intact after the migration: ${stored} stored, ${enforced} enforced, ${degraded} degraded`)
  t.equal((await app.inject('/m')).json().remaining, 1_000_000 - stored - 1, 'the next decision continues from the migrated count')
  t.comment(`figures ${JSON.stringify({ migration: { decisions, worstMs: Math.round(worst * 10) / 10, degraded, enforced, stored, migrationMs: Math.round(migrationMs), asking: Number(asking?.[1] ?? 0) } })}`)
})

test('cluster: 10,000 identities spread over slots and nodes', async (t) => {
  const IDENTITIES = 10_000
  const redis = await readyClient()
  const app = await buildApp({ redis, prefix: 'spread', timeout: 5000 })
  app.get('/s', { config: { rateLimit: { algorithm: 'fixed-window', limit: 10, window: '1h', by: 'header:x-id' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  for (let i = 0; i < IDENTITIES; i += 100) {
    const statuses = await Promise.all(Array.from({ length: 100 }, async (_, j) => (await app.inject({ url: '/s', headers: { 'x-id': `caller-${i + j}` } })).statusCode))
    if (statuses.some((s) => s !== 200)) t.fail(`batch ${i}: ${statuses.filter((s) => s !== 200).length} not admitted`)
  }
  t.equal(app.rateLimit.stats().degraded, 0)
  const byNode = await keysByNode('spread')
  const perNode = [...byNode.values()].map((keys) => keys.length)
  const total = perNode.reduce((a, b) => a + b, 0)
  t.equal(total, IDENTITIES, 'one key per identity, read back with SCAN on every node')

  const perSlot = new Map<number, number>()
  for (const [port, keys] of byNode) {
    for (const key of keys) {
      const slot = keySlot(key)
      perSlot.set(slot, (perSlot.get(slot) ?? 0) + 1)
      // The node that holds the key owns its slot: the hash tag routed it.
      if (slot % 997 === 0) t.equal((await cluster.ownerOf(slot)).port, port)
    }
  }
  const maxSlot = Math.max(...perSlot.values())
  // 10,000 keys over 16,384 slots: ~0.61 per slot, so a per-slot mean is below one key. The
  // "3× the mean" rule is checked over 256 groups of 64 consecutive slots (mean ~39), and per slot
  // no slot may hold more than a handful (a Poisson tail of 8 has odds of ~1e-5 over all slots).
  const groups = new Array<number>(256).fill(0)
  for (const [slot, count] of perSlot) groups[Math.floor(slot / 64)]! += count
  const groupMean = IDENTITIES / groups.length
  const groupMax = Math.max(...groups)
  const nodeMean = IDENTITIES / 3
  const nodeMax = Math.max(...perNode)
  t.ok(perSlot.size > 7000, `${perSlot.size} distinct slots used (expected ~7,490 for random keys)`)
  t.ok(maxSlot <= 8, `no slot holds more than ${maxSlot} keys`)
  t.ok(groupMax <= 3 * groupMean, `busiest 64-slot group: ${groupMax} keys, ${(groupMax / groupMean).toFixed(2)}× the mean`)
  t.ok(nodeMax <= 1.5 * nodeMean, `per node: ${perNode.join(' / ')} (max ${(nodeMax / nodeMean).toFixed(2)}× the mean)`)
  t.comment(`figures ${JSON.stringify({ spread: { perNode, distinctSlots: perSlot.size, maxPerSlot: maxSlot, meanPerSlot: +(IDENTITIES / 16384).toFixed(3), maxOverMeanPerSlot: +(maxSlot / (IDENTITIES / 16384)).toFixed(2), meanPerOccupiedSlot: +(IDENTITIES / perSlot.size).toFixed(2), groupMax, groupMean, groupMaxOverMean: +(groupMax / groupMean).toFixed(2) } })}`)
})

test('cluster: settles and adjust for identities spread over slots: each change reaches its own slot', async (t) => {
  const IDENTITIES = 100
  const redis = await readyClient()
  const app = await buildApp({ redis, prefix: 'settle', timeout: 5000 })
  const used = (req: { headers: Record<string, unknown> }): number => Number(req.headers['x-used'])
  app.get('/t', {
    config: {
      rateLimit: [
        { name: 'tokens', algorithm: 'token-bucket', limit: 50, window: '1h', by: 'header:x-id', cost: 3, settle: used },
        { name: 'tokens-daily', algorithm: 'fixed-window', limit: 500, window: '1d', by: 'header:x-id', cost: 3, settle: used }
      ]
    }
  }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  const ids = Array.from({ length: IDENTITIES }, (_, i) => i)
  const statuses = await Promise.all(ids.map(async (i) => (await app.inject({ url: '/t', headers: { 'x-id': `caller-${i}`, 'x-used': String(i % 7) } })).statusCode))
  t.ok(statuses.every((code) => code === 200), 'all admitted')
  const changed = ids.filter((i) => i % 7 !== 3).length
  const deadline = Date.now() + 5000
  while (app.rateLimit.stats().settled < changed && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
  t.equal(app.rateLimit.stats().settled, changed, 'every settle that changed usage was applied')
  await Promise.all(ids.map(async (i) => await app.rateLimit.adjust('GET /t', { headers: { 'x-id': `caller-${i}` } }, 2)))
  const left = await Promise.all(ids.map(async (i) => (await app.rateLimit.peek('GET /t', { headers: { 'x-id': `caller-${i}` } })).policies.map((policy) => policy.remaining)))
  const wrong = ids.filter((i) => JSON.stringify(left[i]) !== JSON.stringify([50 - (i % 7) - 2, 500 - (i % 7) - 2]))
  t.same(wrong, [], 'each identity: what it used plus what was adjusted, on both blocks')
  t.equal(app.rateLimit.stats().degraded, 0)
  const slots = new Set([...(await keysByNode('settle')).values()].flat().map(keySlot))
  t.ok(slots.size > 50, `${slots.size} slots held the identities' keys`)
})

test('cluster: delay on gcra and token-bucket, two instances, identities over several slots: the same turns as on one Redis, the longest wait over the two blocks', async (t) => {
  const clock = { now: Date.UTC(2030, 0, 1) }
  const fleet: Array<{ app: FastifyInstance, base: string }> = []
  for (let i = 0; i < 2; i++) {
    const app = await buildApp({ redis: clusterClient(1000), prefix: 'cc-delay', clock: () => clock.now, user: (req) => req.headers['x-user'] as string | undefined })
    app.get('/shaped', {
      config: {
        rateLimit: [
          { algorithm: 'gcra', limit: 10, window: '1s', delay: '1s', by: 'user' },
          { algorithm: 'token-bucket', limit: 10, window: '1s', burst: 5, delay: '1s', by: 'user' }
        ]
      }
    }, async (req) => ({ delayMs: req.rateLimit?.delayMs }))
    fleet.push({ app, base: await app.listen({ port: 0, host: '127.0.0.1' }) })
  }
  const users = ['u-a', 'u-b', 'u-c', 'u-d']
  const waits = await Promise.all(users.map(async (user) => await Promise.all(Array.from({ length: 18 }, async (_, i) => {
    const res = await request(`${fleet[i % 2]!.base}/shaped`, { headers: { 'x-user': user } })
    const body = await res.body.text()
    return res.statusCode === 200 ? (JSON.parse(body) as { delayMs: number }).delayMs : res.statusCode
  }))))
  // The token bucket (5 at once, then 100 ms apart, 1 s of reservations) binds: 5 now, 10 held, 3 refused.
  const expected = [0, 0, 0, 0, 0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 429, 429, 429]
  for (const [i, user] of users.entries()) {
    t.same([...waits[i]!].sort((a, b) => a - b), expected.slice().sort((a, b) => a - b), `${user}: turns as on one Redis`)
  }
  const slots = new Set(users.map((user) => keySlot(`cc-delay:{GET:/shaped|${user}}`)))
  t.ok(slots.size > 1, `the identities sit on ${slots.size} slots`)
  t.equal(fleet.reduce((sum, member) => sum + member.app.rateLimit.stats().degraded, 0), 0, 'nothing degraded')
  for (const member of fleet) await member.app.close()
})

test('cluster: wait on a concurrency block, two instances, identities on several slots: each waiter is woken on the other instance when the slot is released there', async (t) => {
  const fleet: Array<{ app: FastifyInstance, base: string }> = []
  const gates = new Map<string, () => void>()
  const started: string[] = []
  for (let i = 0; i < 2; i++) {
    const app = await buildApp({ redis: clusterClient(1000), prefix: 'cc-wait', user: (req) => req.headers['x-user'] as string | undefined })
    app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '5s', by: 'user' } } }, async (req) => {
      const tag = `${String(req.headers['x-user'])}/${i}`
      started.push(tag)
      await new Promise<void>((resolve) => { gates.set(tag, resolve) })
      return { outcome: req.rateLimit?.outcome }
    })
    fleet.push({ app, base: await app.listen({ port: 0, host: '127.0.0.1' }) })
  }
  const users = ['w-a', 'w-b', 'w-c', 'w-d']
  const send = async (inst: number, user: string): Promise<string> => {
    const res = await request(`${fleet[inst]!.base}/slot`, { headers: { 'x-user': user } })
    return res.statusCode === 200 ? (JSON.parse(await res.body.text()) as { outcome: string }).outcome : String(res.statusCode)
  }
  const holders = users.map(async (user) => await send(0, user))
  while (started.length < users.length) await new Promise((resolve) => setTimeout(resolve, 10))
  const waiters = users.map(async (user) => await send(1, user))
  while (fleet[1]!.app.rateLimit.stats().waiting < users.length) await new Promise((resolve) => setTimeout(resolve, 10))
  const latencies: number[] = []
  for (const user of users) {
    const releasedAt = performance.now()
    gates.get(`${user}/0`)!()
    while (!started.includes(`${user}/1`)) await new Promise((resolve) => setTimeout(resolve, 1))
    latencies.push(performance.now() - releasedAt)
    gates.get(`${user}/1`)!()
  }
  t.same(await Promise.all(holders), ['allowed', 'allowed', 'allowed', 'allowed'])
  t.same(await Promise.all(waiters), ['delayed', 'delayed', 'delayed', 'delayed'], 'every waiter admitted after its wait, on the other instance')
  const slots = new Set(users.map((user) => keySlot(`cc-wait:{GET:/slot|${user}}`)))
  t.ok(slots.size > 1, `the identities sit on ${slots.size} slots`)
  t.comment(`release on instance 0 to the waiter's start on instance 1: ${latencies.map((ms) => ms.toFixed(1)).join(', ')} ms (a poll would take up to 1000 ms)`)
  t.ok(latencies.every((ms) => ms < 900), 'woken by the announcement, not by the one-second poll')
  t.equal(fleet.reduce((sum, member) => sum + member.app.rateLimit.stats().degraded, 0), 0, 'nothing degraded')
  for (const member of fleet) await member.app.close()
})

test('teardown: cluster clients and servers stopped', async (t) => {
  for (const client of clients) client.disconnect()
  await cluster.stop()
  t.pass()
})
