import t, { test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import rateLimit, { type FleetView, type RateLimitDecision } from '../../lib/index.js'
import { cliChild, cliHere } from '../helpers/cli.js'
import { clusterFleet } from '../helpers/fleet.js'
import { waitFor } from '../helpers/topologies.js'

/* The CLI against three instances on a 3-master Redis Cluster (`--cluster host:port`), through ioredis and node-redis. */

const prefix = 'clicl'
const { apps, cluster } = await clusterFleet(t, 3, async (redis) => {
  const app = Fastify()
  await app.register(rateLimit, { redis, prefix, picture: { interval: 1000 }, globalLimits: [{ name: 'all', limit: 100, window: '1m', by: 'ip' }] })
  app.get('/a', { config: { rateLimit: { limit: 2, window: '1m', algorithm: 'fixed-window', by: 'ip' } } }, async () => 'a')
  return app
})
const [one, two] = apps as [FastifyInstance, FastifyInstance]
const seeds = cluster.nodes.map((node) => `127.0.0.1:${node.port}`).join(',')
const args = (...rest: string[]): string[] => [...rest, '--cluster', seeds, '--prefix', prefix]
const from = async (app: FastifyInstance, ip: string): Promise<number> => (await app.inject({ url: '/a', remoteAddress: ip })).statusCode

for (let i = 0; i < 3; i++) await from(one, '10.2.0.1')
await waitFor('three pictures', async () => (await one.rateLimit.fleet()).instances.length === 3, 8000)

test('status through ioredis (a child process) and node-redis: three instances on the Cluster', async (t) => {
  const [io, node] = await Promise.all([cliChild(args('status', '--json')), cliHere(args('status', '--json', '--client', 'redis'))])
  t.equal(io.code, 0, io.err)
  t.equal((JSON.parse(io.out) as FleetView).instances.length, 3)
  t.equal(node.code, 0, node.err)
  t.equal((JSON.parse(node.out) as FleetView).instances.length, 3, 'node-redis reads the same picture')
  const policies = await cliHere(args('policies'))
  t.match(policies.out, /GET \/a\s+all \(global\)/)
})

test('peek and reset hit the keys a live instance uses (one hash tag with the global block)', async (t) => {
  const peek = JSON.parse((await cliHere(args('peek', 'GET /a', '--ip', '10.2.0.1', '--json'))).out) as RateLimitDecision
  t.equal(peek.allowed, false)
  t.equal(peek.policies.find((policy) => policy.policy === 'all')?.remaining, 98, 'the global block counted the two admitted')
  t.equal((await cliHere(args('reset', 'GET /a', '--ip', '10.2.0.1', '--actor', 'ops', '--reason', 'cluster test'))).code, 0)
  t.equal(await from(two, '10.2.0.1'), 200, 'another instance admits it')
})

test('bans add: another instance refuses within its poll; remove lifts it', async (t) => {
  const add = await cliHere(args('bans', 'add', '--ip', '10.2.0.9', '--ttl', '1m', '--actor', 'ops', '--reason', 'cluster'))
  t.equal(add.code, 0, add.err)
  await waitFor('instance 2 refuses', async () => await from(two, '10.2.0.9') === 403, 3000)
  t.equal((await cliHere(args('bans', 'remove', '*|ip=10.2.0.9', '--actor', 'ops', '--reason', 'done', '--client', 'iovalkey'))).code, 0, 'through iovalkey')
  await waitFor('instance 2 no longer bans', async () => await from(two, '10.2.0.9') !== 403, 3000)
})
