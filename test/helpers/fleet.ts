import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Cluster, type Redis } from 'ioredis'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './redis.js'
import { startCluster, type ManagedCluster } from './topologies.js'

/** Instances of one app on one Redis, each listening on its own port, and a client to read Redis with. */
export interface ListeningFleet {
  apps: FastifyInstance[]
  bases: string[]
  inspector: Redis
  prefix: string
}

/**
 * `size` instances under one fresh prefix, each built by `build` on its own
 * client (`i`: its index), listening on loopback. At teardown `beforeClose`
 * runs first (open what handlers wait on), then the apps close, the clients
 * disconnect and the prefix's keys go.
 */
export async function listeningFleet (t: Test, label: string, size: number, build: (redis: Redis, prefix: string, i: number) => Promise<FastifyInstance>, beforeClose: () => void = () => {}): Promise<ListeningFleet> {
  const server = await getRedis()
  const prefix = uniquePrefix(label)
  const inspector = createClient(server)
  const apps: FastifyInstance[] = []
  const clients: Redis[] = []
  const bases: string[] = []
  cleanUpPrefix(t, inspector, prefix, async () => {
    beforeClose()
    for (const app of apps) await app.close()
    for (const client of clients) client.disconnect()
  })
  for (let i = 0; i < size; i++) {
    const redis = createClient(server)
    clients.push(redis)
    const app = await build(redis, prefix, i)
    bases.push(await app.listen({ port: 0, host: '127.0.0.1' }))
    apps.push(app)
  }
  return { apps, bases, inspector, prefix }
}

/**
 * `size` instances on a 3-master Redis Cluster started for them, each built
 * by `build` on its own ioredis Cluster client (`i`: its index) and made
 * ready. At `t`'s teardown the apps close, the clients disconnect and the
 * Cluster stops.
 */
export async function clusterFleet (t: Test, size: number, build: (redis: Cluster, i: number) => Promise<FastifyInstance>): Promise<{ apps: FastifyInstance[], cluster: ManagedCluster }> {
  const cluster = await startCluster()
  const apps: FastifyInstance[] = []
  const clients: Cluster[] = []
  t.teardown(async () => {
    for (const app of apps) await app.close()
    for (const client of clients) client.disconnect()
    await cluster.stop()
  })
  for (let i = 0; i < size; i++) {
    const redis = new Cluster(cluster.startupNodes, { enableOfflineQueue: true, redisOptions: { maxRetriesPerRequest: 1 } })
    clients.push(redis)
    const app = await build(redis, i)
    await app.ready()
    apps.push(app)
  }
  return { apps, cluster }
}
