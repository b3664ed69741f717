/**
 * ioredis is a peer dependency: the plugin drives the user's client with the
 * user's version. The supported range (^5.4 || ^6) is tested here with an
 * ioredis 5 client (installed as `ioredis5`) beside the suite's ioredis 6:
 * exact under concurrency, and recovery from a flushed library. The plugin takes the
 * `Command` class from the client it is given (lib/store/redis/client/ioredis.ts),
 * never from an import, so an ioredis 5 client sends its own ioredis 5
 * commands whatever copy of ioredis the application also has installed.
 */
import { test } from 'tap'
import { Redis as Redis5 } from 'ioredis5'
import { Redis as Redis6 } from 'ioredis'
import { ALGORITHMS } from '../../lib/index.js'
import { buildApp } from '../helpers/app.js'
import { adminClient, startServer } from '../helpers/topologies.js'

type AnyClient = new (options: Record<string, unknown>) => { on: (event: string, listener: () => void) => unknown, disconnect: () => void }
const clients: Array<[string, AnyClient]> = [['5', Redis5 as unknown as AnyClient], ['6', Redis6 as unknown as AnyClient]]
for (const [version, Client] of clients) {
  test(`ioredis ${version}: 200 concurrent requests, limit 25 → exactly 25 for every algorithm; a flushed library answered`, async (t) => {
    const server = await startServer([], { label: `ioredis${version}` })
    const admin = adminClient(server.port)
    const redis = new Client({ host: '127.0.0.1', port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 1 })
    redis.on('error', () => {})
    const app = await buildApp({ redis: redis as never, prefix: `v${version}`, denyCache: false })
    for (const algorithm of ALGORITHMS) app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: 25, window: '1h' } } }, async () => 'ok')
    await app.ready()
    t.teardown(async () => { await app.close(); redis.disconnect(); admin.disconnect(); await server.stop() })

    for (const algorithm of ALGORITHMS) {
      const statuses = await Promise.all(Array.from({ length: 200 }, async () => (await app.inject(`/${algorithm}`)).statusCode))
      t.equal(statuses.filter((code) => code === 200).length, 25, `${algorithm}: exactly the limit`)
    }
    await admin.call('FUNCTION', 'FLUSH')
    t.equal((await app.inject('/fixed-window')).statusCode, 429, 'after FUNCTION FLUSH the next decision is still taken (EVAL after "Function not found")')
    t.equal(app.rateLimit.stats().degraded, 0)
  })
}
