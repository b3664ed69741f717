import { test, type Test } from 'tap'
import { request } from 'undici'
import { buildApp } from '../helpers/app.js'
import { FLAVOURS, type ClientFlavour } from '../helpers/clients.js'
import { startCluster, waitFor, type ClusterNode, type ManagedCluster } from '../helpers/topologies.js'

/*
 * The circuit breaker's unit is the node a call is written to: one hung
 * Cluster master opens its own breaker, and the keys of every other master
 * are decided as usual. The cluster keeps answering on its healthy masters
 * while one is stopped (a long node timeout, full coverage not required:
 * REDIS-NOTES.md), as it does for the seconds before a failover.
 */

const IDS = 60
// One flavour per client adapter (ioredis.ts serves iovalkey and ioredis 5 too).
const ADAPTERS = FLAVOURS.filter((flavour) => flavour.name === 'ioredis 6' || flavour.name === 'node-redis 6')

test('one hung Cluster master degrades only the keys it holds: the healthy masters keep deciding', async (t) => {
  const cluster = await startCluster({ nodeTimeoutMs: 15_000, fullCoverage: false })
  t.teardown(async () => { await cluster.stop() })
  for (const flavour of ADAPTERS) {
    await t.test(flavour.name, async (t) => { await oneHungMaster(t, cluster, flavour) })
  }
})

async function oneHungMaster (t: Test, cluster: ManagedCluster, flavour: ClientFlavour): Promise<void> {
  // The recommended Cluster options (docs/clients.md).
  const { client: redis, ready, close } = await flavour.cluster(cluster.startupNodes)
  t.teardown(close)
  await waitFor('cluster client ready', ready, 5000)

  const app = await buildApp({ redis: redis as never, prefix: `nb${flavour.name.replace(/\W/g, '')}` })
  app.get('/r', { config: { rateLimit: { limit: 1_000_000, window: '1m', by: 'header:x-id', onRedisError: 'open' } } },
    async (req) => ({ degraded: req.rateLimit?.degraded === true }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { await app.close() })
  const { port } = app.server.address() as { port: number }
  const ask = async (id: number): Promise<boolean> => {
    const res = await request(`http://127.0.0.1:${port}/r`, { headers: { 'x-id': `caller-${id}` } })
    t.equal(res.statusCode, 200)
    return ((await res.body.json()) as { degraded: boolean }).degraded
  }

  // Which master holds each caller: the one whose key count grew by its first request.
  const sizes = async (): Promise<number[]> => await Promise.all(cluster.nodes.map(async (n) => await cluster.admin(n.port).dbsize()))
  const homeOf: ClusterNode[] = []
  for (let id = 0; id < IDS; id++) {
    const before = await sizes()
    t.notOk(await ask(id), `caller ${id}: decided while every master answers`)
    const after = await sizes()
    const grown = cluster.nodes.filter((_n, i) => (after[i] ?? 0) > (before[i] ?? 0))
    t.equal(grown.length, 1, `caller ${id}: its key landed on one master`)
    homeOf.push(grown[0] as ClusterNode)
  }
  const hung = cluster.nodes.reduce((a, b) => homeOf.filter((n) => n === b).length > homeOf.filter((n) => n === a).length ? b : a)
  const onHung = homeOf.filter((n) => n === hung).length
  t.ok(onHung > 0 && onHung < IDS, `${onHung} of ${IDS} callers on the master that will hang`)

  hung.server.pause()
  t.teardown(() => { hung.server.resume() })
  const degraded = { hung: 0, hungAsked: 0, healthy: 0, healthyAsked: 0 }
  // Every caller every 20 ms for about 1.5 s: well inside the 15 s node timeout.
  for (let round = 0; round < 25; round++) {
    const answers = await Promise.all(homeOf.map(async (_n, id) => await ask(id)))
    answers.forEach((wasDegraded, id) => {
      const side = homeOf[id] === hung ? 'hung' : 'healthy'
      degraded[`${side}Asked`]++
      if (wasDegraded) degraded[side]++
    })
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  hung.server.resume()
  await waitFor('the hung master answers again', async () => (await cluster.admin(hung.port).ping()) === 'PONG', 5000)
  t.equal(degraded.healthy, 0, `no decision for a key on a healthy master degraded (${degraded.healthyAsked} asked)`)
  t.equal(degraded.hung, degraded.hungAsked, `every decision for a key on the hung master degraded by its route's onRedisError (${degraded.hungAsked})`)
}
