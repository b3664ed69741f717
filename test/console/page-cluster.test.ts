import t, { test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import rateLimit, { type FleetView, type RateLimitBan } from '../../lib/index.js'
import consolePage from '../../lib/console/page/index.js'
import { clusterFleet } from '../helpers/fleet.js'
import { waitFor } from '../helpers/topologies.js'

/*
 * The console page against three instances on a 3-master Redis Cluster
 * (through inject: the browser test runs the page itself on standalone
 * Redis): it shows every instance and each one's breaker per master, the
 * caller another instance refuses, and a ban by key hash made through it is
 * refused by a third instance within its poll, then lifted.
 */

const { apps } = await clusterFleet(t, 3, async (redis, i) => {
  const app = Fastify()
  await app.register(rateLimit, { redis, prefix: 'pagecl', picture: { interval: 1000 }, user: (req) => req.headers['x-user'] as string | undefined })
  app.get('/a', { config: { rateLimit: { limit: 2, window: '1m', by: 'user' } } }, async () => 'a')
  if (i === 0) await app.register(consolePage, { prefix: '/ops', authorize: () => true, actor: () => 'ops:cluster' })
  return app
})
const [withConsole, refusing, third] = apps as [FastifyInstance, FastifyInstance, FastifyInstance]
const from = async (app: FastifyInstance, user: string): Promise<number> => (await app.inject({ url: '/a', headers: { 'x-user': user } })).statusCode
const state = async (): Promise<{ fleet: FleetView, bans: RateLimitBan[] }> => (await withConsole.inject('/ops/api/state')).json()

test('the page\'s read shows the three instances, each one\'s breakers per master, and the caller another instance refuses', async (t) => {
  for (let i = 0; i < 4; i++) await from(refusing, 'mallory')
  await waitFor('three pictures and the refusal', async () => {
    const { fleet } = await state()
    return fleet.instances.length === 3 && fleet.top.some((group) => group.route === 'GET /a' && group.callers.length > 0)
  }, 8000)
  const { fleet } = await state()
  t.equal(fleet.instances.length, 3, 'three instances')
  t.ok(fleet.instances.every((instance) => instance.store.cluster), 'each on the Cluster')
  t.ok(fleet.nodes.every((node) => node.breaker === 'closed'), `${fleet.nodes.length} breakers, each closed`)
  t.ok(fleet.routes.some((row) => row.route === 'GET /a' && row.perSecond.refused > 0), 'the route\'s refusals per second')
})

test('a ban by key hash made through the page: the third instance refuses the caller within its poll; lifting it lets it through', async (t) => {
  const session = (await withConsole.inject('/ops/api/session')).json() as { token: string }
  const headers = { cookie: `rrl-console-token=${session.token}`, 'x-console-token': session.token }
  const hash = (await state()).fleet.top.find((group) => group.route === 'GET /a')?.callers[0]?.hash as string
  t.match(hash, /^[A-Za-z0-9_-]+$/)
  const ban = await withConsole.inject({ method: 'POST', url: '/ops/api/bans', headers, payload: { identity: { keyHash: hash }, target: 'GET /a', ttl: 60_000, reason: 'cluster test' } })
  t.equal(ban.statusCode, 200, 'the ban is made')
  await waitFor('the third instance refuses mallory', async () => await from(third, 'mallory') === 403, 3000)
  t.equal(await from(third, 'bob'), 200, 'another caller passes')
  const lift = await withConsole.inject({ method: 'POST', url: '/ops/api/bans/lift', headers, payload: { id: (ban.json() as RateLimitBan).id, reason: 'done' } })
  t.same(lift.json(), { lifted: true })
  await waitFor('the third instance no longer bans her', async () => await from(third, 'mallory') === 429, 3000)
  const audit = (await withConsole.inject('/ops/api/state')).json().audit as Array<{ change: string, actor: string }>
  t.same(audit.slice(0, 2).map((entry) => [entry.change, entry.actor]), [['clear', 'ops:cluster'], ['set', 'ops:cluster']], 'both in the audit trail')
})
