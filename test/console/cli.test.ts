import t, { test } from 'tap'
import { createHmac } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { type FleetView, type RateLimitBan, type RateLimitDecision, type RateLimitOverride } from '../../lib/index.js'
import { cliChild, cliHere, oneLineError, type CliRun } from '../helpers/cli.js'
import { listeningFleet } from '../helpers/fleet.js'
import { freePort, getRedis } from '../helpers/redis.js'
import { waitFor } from '../helpers/topologies.js'

/*
 * The CLI (docs/cli.md) against three live instances on one standalone Redis
 * (picture every 1000 ms, the minimum): what it reads is what the instances
 * publish, and what it changes (bans, overrides, usage) is what they enforce,
 * because it reaches Redis through the plugin's own code. Most cases run in
 * this process (runCli); the ones that matter as a process (exit codes, --help,
 * an unreachable Redis, the missing hashSecret, a reset) run as real children.
 */

const SECRET = 'the-apps-hash-secret-32-bytes-long'

const server = await getRedis()

/** Instance 0 is the old deploy: GET /a at 4 per minute; 1 and 2 declare 2 (a disagreement). */
async function instance (redis: Redis, prefix: string, i: number): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(rateLimit, { redis, prefix, hashSecret: SECRET, picture: { interval: 1000 }, user: (request) => request.headers['x-user'] as string | undefined })
  app.get('/a', { config: { rateLimit: { limit: i === 0 ? 4 : 2, window: '1m', by: 'ip' } } }, async () => 'a')
  app.get('/u', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'u')
  app.get('/f', { config: { rateLimit: { limit: 5, window: '1m', by: function tenant (request) { return request.headers['x-t'] as string } } } }, async () => 'f')
  app.get('/c', { constraints: { host: 'a.example.com' }, config: { rateLimit: { limit: 1, window: '1m', by: 'ip' } } }, async () => 'c')
  app.get('/w', { config: { rateLimit: { limit: 5, period: 'week', weekStart: 7, timeZone: 'America/New_York', by: 'ip' } } }, async () => 'w')
  return app
}

const fleet = await listeningFleet(t, 'cli', 3, instance)
const [old, one, two] = fleet.apps as [FastifyInstance, FastifyInstance, FastifyInstance]
const connection = { REDIS_URL: server.url }
const withSecret = { ...connection, RATE_LIMIT_HASH_SECRET: SECRET }
const base = ['--prefix', fleet.prefix]
const here = async (args: string[], env: Record<string, string> = withSecret): Promise<CliRun> => await cliHere([...args, ...base], env)
const child = async (args: string[], env: Record<string, string> = withSecret): Promise<CliRun> => await cliChild([...args, ...base], env)
const from = async (app: FastifyInstance, ip: string, url = '/a', headers: Record<string, string> = {}): Promise<number> => (await app.inject({ url, remoteAddress: ip, headers })).statusCode

// A caller refused by a live instance, and every picture published with it.
for (let i = 0; i < 3; i++) await from(one, '10.0.0.1')
await waitFor('three pictures with a refusal on GET /a', async () => {
  const view = await one.rateLimit.fleet()
  return view.instances.length === 3 && view.top.some((entry) => entry.route === 'GET /a')
}, 8000)

test('status: the instances, their nodes and the routes\' rates; --json is fleet() as it is; exit 0 when healthy', async (t) => {
  const [json, human] = await Promise.all([child(['status', '--json']), here(['status'])])
  t.equal(json.code, 0, json.err)
  const view = JSON.parse(json.out) as FleetView
  t.equal(view.instances.length, 3)
  t.ok(view.routes.some((row) => row.route === 'GET /a' && row.perSecond.refused > 0), 'GET /a refusals per second')
  t.ok(view.nodes.length >= 1 && view.nodes.every((node) => node.breaker === 'closed'), 'the breakers of the nodes the instances used')
  t.equal(human.code, 0)
  t.match(human.out, /3 instance\(s\)/)
  t.match(human.out, /GET \/a\s+get-a/)
  t.match(human.err, /warning: GET \/a: the instances declare 2 different limits/, 'the disagreement is warned about')
})

test('top: the refused caller by key hash; a route filter; an unknown route is exit 2', async (t) => {
  // Counts decay by half every interval: a refusal now, seen within the next pictures.
  for (let i = 0; i < 4; i++) await from(one, '10.0.0.2')
  let json: CliRun = { code: null, out: '', err: '' }
  await waitFor('GET /a in top', async () => {
    json = await here(['top', 'GET /a', '--json'])
    return json.out.includes('"hash"')
  }, 4000)
  t.equal(json.code, 0, json.err)
  const [entry] = JSON.parse(json.out) as Array<{ route: string, callers: Array<{ hash: string, count: number }> }>
  t.equal(entry?.route, 'GET /a')
  t.match(entry?.callers[0]?.hash, /^[\w-]{10,}$/)
  const human = await here(['top'])
  t.match(human.out, /GET \/a:\nRANK\s+KEY HASH/)
  const unknown = await here(['top', 'GET /nope'])
  t.equal(unknown.code, 2)
  t.ok(oneLineError(unknown), unknown.err)
})

test('bans add --key-hash: the caller top shows, banned by its hash, is refused by another instance; no other caller is', async (t) => {
  for (let i = 0; i < 3; i++) await from(one, '10.0.0.3')
  const hash = createHmac('sha256', SECRET).update('ip=10.0.0.3').digest('base64url').slice(0, 22)
  await waitFor('the caller in top', async () => (await here(['top', 'GET /a', '--json'])).out.includes(hash), 4000)
  const add = await here(['bans', 'add', '--key-hash', hash, '--route', 'GET /a', '--ttl', '5m', '--actor', 'ops', '--reason', 'top caller', '--json'])
  t.equal(add.code, 0, add.err)
  const ban = JSON.parse(add.out) as RateLimitBan
  t.match(ban, { kind: 'keyHash', route: 'GET /a', identity: { keyHash: hash } })
  await waitFor('instance 2 refuses the caller by its key hash', async () => await from(two, '10.0.0.3') === 403, 3000)
  t.equal(await from(two, '10.0.0.4'), 200, 'another caller is not banned')
  t.equal((await here(['bans', 'remove', ban.id, '--actor', 'ops', '--reason', 'done'])).code, 0)
  const bad = await here(['bans', 'add', '--key-hash', 'nope', '--ttl', '5m', '--actor', 'ops', '--reason', 'r'])
  t.equal(bad.code, 2, 'a malformed key hash: exit 2')
  t.ok(oneLineError(bad), bad.err)
})

test('policies: the newest instance\'s limits, the custom route, and the disagreement between instances', async (t) => {
  const json = await here(['policies', '--json'])
  t.equal(json.code, 0)
  const parsed = JSON.parse(json.out) as { instances: unknown[], custom: Array<{ route: string }>, disagreements: Array<{ route: string, variants: Array<{ instances: string[] }> }> }
  t.equal(parsed.instances.length, 3)
  t.same(parsed.custom.map((entry) => entry.route), ['GET /f'])
  const disagreement = parsed.disagreements.find((entry) => entry.route === 'GET /a')
  t.same(disagreement?.variants.map((variant) => variant.instances.length).sort(), [1, 2])
  const human = await here(['policies'])
  t.match(human.out, /GET \/f\s+get-f\s+sliding-window\s+5\s+60000ms\s+5\s+function tenant\s+enforce\s+custom/)
  t.match(human.out, /GET \/a differs between instances/)
  t.match(human.err, /warning: GET \/a/)
})

test('peek sees what a live instance counts; reset (a child process) frees the caller on another instance, audited', async (t) => {
  const before = await here(['peek', 'GET /a', '--ip', '10.0.0.1', '--json'])
  t.equal(before.code, 0, before.err)
  const decision = JSON.parse(before.out) as RateLimitDecision
  t.equal(decision.allowed, false, 'refused, as on the instance')
  t.equal(decision.remaining, 0)
  // (Not asked of another instance first: its deny cache would hold the refusal locally for a while, which a reset elsewhere does not clear.)
  const reset = await child(['reset', 'GET /a', '--ip', '10.0.0.1', '--actor', 'ops', '--reason', 'ticket 42'])
  t.equal(reset.code, 0, reset.err)
  t.match(reset.out, /reset GET \/a for ip=10\.0\.0\.1/)
  t.equal(await from(two, '10.0.0.1'), 200, 'the live instance admits it again')
  const after = JSON.parse((await here(['peek', 'GET /a', '--ip', '10.0.0.1', '--json'])).out) as RateLimitDecision
  t.equal(after.remaining, 1, 'one request since the reset')
  const audit = await here(['audit', '--json', '--count', '5'])
  t.ok((JSON.parse(audit.out) as Array<{ change: string, actor: string, reason: string }>).some((entry) => entry.change === 'reset' && entry.actor === 'ops' && entry.reason === 'ticket 42'))
  // A route with a host constraint rebuilds too: its keys are the instance's.
  t.equal(await from(one, '10.0.0.3', '/c', { host: 'a.example.com' }), 200)
  const constrained = JSON.parse((await here(['peek', 'GET /c {"host":"a.example.com"}', '--ip', '10.0.0.3', '--json'])).out) as RateLimitDecision
  t.equal(constrained.remaining, 0, 'the constrained route\'s count')
})

test('a week period starting on Sunday in New York: peek reads the keys a live instance counts (weekStart and the zone are published)', async (t) => {
  for (let i = 0; i < 2; i++) await from(two, '10.0.0.7', '/w')
  const peek = await here(['peek', 'GET /w', '--ip', '10.0.0.7', '--json'])
  t.equal(peek.code, 0, peek.err)
  t.match(JSON.parse(peek.out) as RateLimitDecision, { allowed: true, limit: 5, remaining: 3 }, 'two of five used this week')
})

test('peek and reset refuse: no hashSecret (the picture says the app has one), a custom route, a caller the route cannot key', async (t) => {
  const noSecret = await child(['peek', 'GET /a', '--ip', '10.0.0.1'], connection)
  t.equal(noSecret.code, 2)
  t.ok(oneLineError(noSecret), noSecret.err)
  t.match(noSecret.err, /hashSecret.*RATE_LIMIT_HASH_SECRET/)
  const custom = await here(['peek', 'GET /f', '--ip', '10.0.0.1'])
  t.equal(custom.code, 2)
  t.match(custom.err, /GET \/f cannot be rebuilt exactly .*function tenant/)
  const resetCustom = await here(['reset', 'GET /f', '--ip', '10.0.0.1', '--actor', 'a', '--reason', 'r'])
  t.equal(resetCustom.code, 2)
  const noIp = await here(['peek', 'GET /a', '--user', 'alice'])
  t.equal(noIp.code, 2)
  t.match(noIp.err, /GET \/a keys callers by ip: give --ip/)
  const unknown = await here(['peek', 'GET /nowhere', '--ip', '10.0.0.1'])
  t.equal(unknown.code, 2)
  t.ok(oneLineError(unknown), unknown.err)
})

test('bans add/list/remove: another instance refuses the banned caller within its poll, and admits it once lifted', async (t) => {
  const add = await child(['bans', 'add', '--ip', '10.0.0.9', '--ttl', '5m', '--actor', 'ops', '--reason', 'scraping', '--json'])
  t.equal(add.code, 0, add.err)
  const ban = JSON.parse(add.out) as RateLimitBan
  t.equal(ban.id, '*|ip=10.0.0.9')
  await waitFor('instance 2 refuses the banned IP', async () => await from(two, '10.0.0.9') === 403, 3000)
  const user = await here(['bans', 'add', '--user', 'mallory', '--route', 'GET /u', '--ttl', '5m', '--status', '429', '--actor', 'ops', '--reason', 'abuse'])
  t.equal(user.code, 0, user.err)
  // The user is hashed with the app's hashSecret, as the instances hash it.
  await waitFor('instance 0 refuses the banned user', async () => await from(old, '10.0.0.8', '/u', { 'x-user': 'mallory' }) === 429, 3000)
  t.equal(await from(old, '10.0.0.8', '/a', { 'x-user': 'mallory' }), 200, 'on its route only')
  const list = JSON.parse((await here(['bans', '--json'])).out) as RateLimitBan[]
  t.same(list.map((entry) => entry.route).sort(), ['*', 'GET /u'])
  for (const entry of list) t.equal((await here(['bans', 'remove', entry.id, '--actor', 'ops', '--reason', 'done'])).code, 0)
  const again = await here(['bans', 'remove', ban.id, '--actor', 'ops', '--reason', 'done'])
  t.equal(again.code, 1, 'no such ban: exit 1')
  t.match(again.out, /no ban with id/)
  await waitFor('instance 2 no longer bans the IP', async () => await from(two, '10.0.0.9') !== 403, 3000)
  t.equal((await here(['bans'])).out.trim(), 'no bans in force')
})

test('overrides set/list/clear: a live instance applies the new limit within its poll', async (t) => {
  const set = await here(['overrides', 'set', 'GET /u', '--limit', '1', '--ttl', '10m', '--actor', 'ops', '--reason', 'incident', '--json'])
  t.equal(set.code, 0, set.err)
  const override = JSON.parse(set.out) as RateLimitOverride
  t.equal(override.limit, 1)
  await waitFor('instance 1 applies the override', async () => {
    const ip = `10.1.0.${Math.floor(Math.random() * 250)}`
    return await from(one, ip, '/u') === 200 && await from(one, ip, '/u') === 429
  }, 3000)
  const list = await here(['overrides'])
  t.match(list.out, /get-u\s+GET \/u\s+\(every caller\)\s+1\s+in \d+m/)
  t.equal((await here(['overrides', 'clear', override.id, '--actor', 'ops', '--reason', 'over'])).code, 0)
  t.equal((await here(['overrides', 'clear', override.id, '--actor', 'ops', '--reason', 'over'])).code, 1)
})

test('hostile strings are escaped in tables and kept as they are in --json', async (t) => {
  const reason = '<script>alert(1)</script>\u001b[31mred\u0007 \u200fbidi\u202e end\u009b'
  const long = 'x'.repeat(9000)
  const set = await here(['overrides', 'set', 'GET /u', '--user', long, '--limit', '2', '--ttl', '1m', '--actor', '<b>ops</b>', '--reason', reason])
  t.equal(set.code, 0, set.err)
  const human = await here(['overrides'])
  // eslint-disable-next-line no-control-regex
  t.notMatch(human.out, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/, 'no control or bidi character reaches the terminal')
  t.match(human.out, '<script>alert(1)</script>\\x1b[31mred\\x07 \\u200fbidi\\u202e end\\x9b', 'each shown as an escape (HTML is inert text in a terminal)')
  t.match(human.out, /user=x{8000,}…/, 'the 9000-character value is cut with an ellipsis')
  t.notMatch(human.out, /x{8200}/)
  const json = JSON.parse((await here(['overrides', '--json'])).out) as RateLimitOverride[]
  const mine = json.find((entry) => entry.reason === reason)
  t.ok(mine, 'the JSON carries the reason as it is')
  t.equal(mine?.identity?.user, long)
  t.equal((await here(['overrides', 'clear', mine?.id ?? '', '--actor', 'ops', '--reason', 'cleanup'])).code, 0)
})

test('bad input: a one-line reason and exit 2, never a stack trace', async (t) => {
  const cases: Array<[string, string[], RegExp]> = [
    ['unknown command', ['frobnicate'], /unknown command "frobnicate"/],
    ['unknown option', ['status', '--frob'], /Unknown option '--frob'/],
    ['an option the command does not take', ['status', '--ip', '1.2.3.4'], /status does not take --ip/],
    ['a malformed IP', ['peek', 'GET /a', '--ip', 'not-an-ip'], /--ip is not an IP address/],
    ['a ttl too short', ['bans', 'add', '--ip', '10.0.0.5', '--ttl', '10ms', '--actor', 'a', '--reason', 'r'], /--ttl must be at least 1000 ms/],
    ['a ttl too long', ['bans', 'add', '--ip', '10.0.0.5', '--ttl', '400d', '--actor', 'a', '--reason', 'r'], /--ttl must be between/],
    ['a wrong status', ['bans', 'add', '--ip', '10.0.0.5', '--ttl', '1m', '--status', '500', '--actor', 'a', '--reason', 'r'], /--status must be 403 or 429/],
    ['no actor', ['bans', 'add', '--ip', '10.0.0.5', '--ttl', '1m', '--reason', 'r'], /bans add needs --actor/],
    ['two identities for a ban', ['bans', 'add', '--ip', '10.0.0.5', '--user', 'u', '--ttl', '1m', '--actor', 'a', '--reason', 'r'], /exactly one of --ip, --user, --api-key/],
    ['a limit that is no number', ['overrides', 'set', 'GET /u', '--limit', 'lots', '--ttl', '1m', '--actor', 'a', '--reason', 'r'], /--limit must be an integer/],
    ['an unknown route to ban on', ['bans', 'add', '--ip', '10.0.0.5', '--route', 'GET /nope', '--ttl', '1m', '--actor', 'a', '--reason', 'r'], /unknown|GET \/nope/i],
    ['a malformed header pair', ['peek', 'GET /a', '--header', 'novalue'], /--header takes NAME=VALUE/],
  ]
  for (const [what, args, message] of cases) {
    const run = await here(args)
    t.equal(run.code, 2, `${what}: exit 2 (${run.err.trim()})`)
    t.ok(oneLineError(run), `${what}: one line`)
    t.match(run.err, message, what)
  }
  const prefix = await cliHere(['bans', '--prefix', 'a{b}'], connection)
  t.equal(prefix.code, 2, prefix.err)
  t.ok(oneLineError(prefix))
  t.match(prefix.err, /prefix/)
})

test('exit 1 for an unreachable Redis, and the tool\'s and each command\'s --help', async (t) => {
  const port = await freePort()
  const [down, help, commandHelp, bare] = await Promise.all([
    cliChild(['status', '--redis', `redis://127.0.0.1:${port}`, '--timeout', '2s']),
    cliChild(['--help']),
    cliChild(['bans', 'add', '--help']),
    cliChild([])
  ])
  t.equal(down.code, 1)
  t.ok(oneLineError(down), down.err)
  t.match(down.err, new RegExp(`cannot connect to Redis at redis://127\\.0\\.0\\.1:${port}`))
  t.equal(help.code, 0)
  t.match(help.out, /^Usage: fastify-redis-rate-limit <command> \[options\]/)
  t.match(help.out, /Exit codes:\n {2}0 {2}done/)
  t.equal(commandHelp.code, 0)
  t.match(commandHelp.out, /Usage: fastify-redis-rate-limit bans add \[options\][\s\S]*--ttl DURATION[\s\S]*--actor WHO/)
  t.equal(bare.code, 2, 'no command: the help on stderr, exit 2')
  t.match(bare.err, /^Usage:/)
})

test('watch: a bounded number of reads (--count), one JSON view per line; exit 3 when no instance publishes', async (t) => {
  const watch = await here(['watch', '--count', '2', '--interval', '1s', '--json'])
  t.equal(watch.code, 0, watch.err)
  const views = watch.out.trim().split('\n').map((line) => JSON.parse(line) as FleetView)
  t.equal(views.length, 2)
  t.ok(views.every((view) => view.instances.length === 3))
  const empty = await cliHere(['status', '--prefix', 'nobody', '--json'], connection)
  t.equal(empty.code, 3, 'no live instance: exit 3')
  t.match(empty.err, /no live instance publishes its picture under the prefix "nobody"/)
  const peek = await cliHere(['peek', 'GET /a', '--ip', '10.0.0.1', '--prefix', 'nobody'], connection)
  t.equal(peek.code, 3)
})
