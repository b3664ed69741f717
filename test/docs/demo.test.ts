import { test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'undici'
import { freePort, getRedis } from '../helpers/redis.js'

/** Starts `example/server.ts` the way `npm run demo` does, on a free port. */
async function startDemo (env: Record<string, string>) {
  const port = await freePort()
  const child = spawn(process.execPath, ['--import=tsx', 'example/server.ts'], {
    cwd: new URL('../..', import.meta.url),
    env: { ...process.env, REDIS_URL: '', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const deadline = Date.now() + 20_000
  while (!output.includes('Server listening')) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`demo did not start:\n${output}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return {
    base: `http://127.0.0.1:${port}`,
    firstLine: () => JSON.parse(output.split('\n')[0] as string).msg as string,
    stop: async () => {
      child.kill('SIGTERM')
      if (child.exitCode === null) await once(child, 'exit')
    }
  }
}

async function call (base: string, path: string, init: { method?: string, headers?: Record<string, string>, body?: string } = {}) {
  const res = await request(base + path, { method: (init.method ?? 'GET') as 'GET', headers: init.headers, body: init.body })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text }
}

for (const withRedis of [false, true]) {
  test(`npm run demo serves the documented routes ${withRedis ? 'with REDIS_URL' : 'with the memory store'}`, async (t) => {
    const env: Record<string, string> = withRedis ? { REDIS_URL: (await getRedis()).url } : {}
    const demo = await startDemo(env)
    t.teardown(demo.stop)
    t.match(demo.firstLine(), withRedis ? /use Redis at/ : /memory store/, 'the first log line says which store')

    const health = await call(demo.base, '/health')
    t.equal(health.status, 200)
    t.equal(health.headers.ratelimit, undefined, 'health is opted out')

    // The operator's console, as the README says to open it (loopback only).
    const page = await call(demo.base, '/ops/limits/')
    t.equal(page.status, 200, 'the console page answers on loopback')
    t.match(page.text, '<title>Rate limits')
    const consoleState = await call(demo.base, '/ops/limits/api/state')
    t.match(JSON.parse(consoleState.text), { fleet: { instances: [{ store: { kind: withRedis ? 'redis' : 'memory' } }] }, problems: [] }, 'it reads the fleet\'s picture')

    const order = await call(demo.base, '/orders/42', { headers: { 'x-user-id': `alice-${Date.now()}` } })
    t.equal(order.status, 200)
    t.equal(order.headers['ratelimit-policy'], '"orders";q=100;w=60')
    t.equal(JSON.parse(order.text).source, withRedis ? 'redis' : 'memory', 'the body names the store that decided')

    const key = { 'x-api-key': 'demo-key-1', 'x-forwarded-for': 'ignored' }
    // Concurrent, so a loaded machine's slow requests cannot let the bucket refill (10/s) in between.
    const searches = await Promise.all(Array.from({ length: 25 }, async () => (await call(demo.base, '/search?q=redis', { headers: key })).status))
    t.ok(searches.filter((s) => s === 429).length >= 1, 'the token bucket runs dry after its burst')
    const plan = /"search-plan";q=10000;w=(\d+)/.exec(String((await call(demo.base, '/search?q=redis', { headers: { 'x-api-key': 'demo-key-2' } })).headers['ratelimit-policy']))
    const monthDays = Number(plan?.[1]) / 86400
    t.ok(monthDays >= 28 - 1 / 24 && monthDays <= 31 + 1 / 24, `beside it the key's calendar month in Berlin (w = ${monthDays} days)`)

    const username = `user-${Date.now()}`
    const logins = []
    for (let i = 0; i < 6; i++) {
      logins.push((await call(demo.base, '/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username }) })).status)
    }
    t.same(logins, [200, 200, 200, 200, 200, 429], 'login: 5 per 15 minutes per IP and username')
    const retries = []
    for (let i = 0; i < 2; i++) {
      retries.push((await call(demo.base, '/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username }) })).headers['retry-after'])
    }
    t.equal(retries[1], '3600', 'login: the third refusal starts a one-hour penalty')
    const refusal = await call(demo.base, '/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username }) })
    t.match(JSON.parse(refusal.text), { status: 429, 'violated-policies': ['login'], hint: /retry in 3600 s/ }, 'the refusal body comes from replyBuilder')

    // Completions: reserve max_tokens, settle what was used when the response closes; an overdraft waits.
    const tokens = { 'x-api-key': 'demo-key-2' }
    const first = await call(demo.base, '/complete?max_tokens=2000&used=4900', { headers: tokens })
    t.equal(first.status, 200)
    t.match(JSON.parse(first.text), { reserved: 2000, used: 4900, remainingBeforeSettle: 3000 }, 'complete: admitted on its reservation')
    const overdrawn = await call(demo.base, '/complete?max_tokens=500', { headers: tokens })
    t.equal(overdrawn.status, 429, 'complete: 4900 used of 5000: the next 500-token reservation does not fit')
    t.ok(Number(overdrawn.headers['retry-after']) >= 60, 'complete: Retry-After counts the refill of about 400 tokens at 20,000 an hour')
    const small = await call(demo.base, '/complete?max_tokens=50&used=10', { headers: tokens })
    t.equal(small.status, 200, 'complete: a reservation that fits what is left is admitted')
    t.ok(JSON.parse(small.text).remainingBeforeSettle <= 60, 'complete: about 100 tokens were left after the settle')

    const internal = await Promise.all(Array.from({ length: 8 }, async () => await call(demo.base, '/reports', { headers: { 'x-internal-token': 'demo-internal' } })))
    t.same(internal.map((reply) => reply.status), Array(8).fill(200), 'allowList: internal callers are never limited')
    t.equal(internal[0]?.headers.ratelimit, undefined, 'and get no quota headers')

    const renders = await Promise.all(Array.from({ length: 3 }, async () => await call(demo.base, '/render?ms=800', { headers: { 'x-forwarded-for': 'ignored' } })))
    t.same(renders.map((reply) => reply.status).sort(), [200, 200, 429], 'render: at most 2 in flight per IP')
    const busy = renders.find((reply) => reply.status === 429)
    t.equal(busy?.headers['retry-after'], '1', 'a busy render says Retry-After: 1')
    t.equal(renders.find((reply) => reply.status === 200)?.headers['ratelimit-policy'], '"renders";q=2;qu="concurrent-requests"')
    t.equal((await call(demo.base, '/render?ms=0')).status, 200, 'the slots were given back')

    const scanner = { 'x-user-id': `scanner-${Date.now()}` }
    const missing = []
    for (let i = 0; i < 21; i++) missing.push((await call(demo.base, `/no-such-page-${i}`, { headers: scanner })).status)
    t.same([missing[0], missing[19], missing[20]], [404, 404, 429], 'notFound: the 21st 404 in a minute is refused')

    // A runtime override for one user (unique, short-lived, cleared: the shared Redis's 'demo' prefix sees it).
    const vip = `vip-${Date.now()}`
    const admin = { 'x-admin': 'ops-test' }
    t.equal((await call(demo.base, `/admin/override?user=${vip}&limit=500&ttl=60000&reason=test`, { method: 'POST' })).status, 401, 'overrides need the admin header')
    const set = await call(demo.base, `/admin/override?user=${vip}&limit=500&ttl=60000&reason=test`, { method: 'POST', headers: admin })
    t.equal(set.status, 200)
    const record = JSON.parse(set.text) as { id: string, actor: string, limit: number }
    t.match(record, { actor: 'ops-test', limit: 500 })
    t.equal((await call(demo.base, '/orders/1', { headers: { 'x-user-id': vip } })).headers['ratelimit-policy'], '"orders";q=500;w=60', 'the override is in the header')
    t.ok(JSON.parse((await call(demo.base, '/admin/overrides', { headers: admin })).text).some((listed: { id: string }) => listed.id === record.id), 'listed')
    t.same(JSON.parse((await call(demo.base, `/admin/override?id=${encodeURIComponent(record.id)}&reason=done`, { method: 'DELETE', headers: admin })).text), { cleared: true })
    t.equal((await call(demo.base, '/orders/1', { headers: { 'x-user-id': vip } })).headers['ratelimit-policy'], '"orders";q=100;w=60', 'cleared')

    // An operator ban of one user (unique, short-lived, lifted), on one route, then everywhere.
    const abuser = `abuser-${Date.now()}`
    t.equal((await call(demo.base, `/admin/ban?user=${abuser}&ttl=60000&reason=test`, { method: 'POST' })).status, 401, 'bans need the admin header')
    const onOrders = JSON.parse((await call(demo.base, `/admin/ban?user=${abuser}&route=${encodeURIComponent('GET /orders/:id')}&ttl=60000&status=429&reason=test`, { method: 'POST', headers: admin })).text) as { id: string, actor: string, statusCode: number }
    t.match(onOrders, { actor: 'ops-test', statusCode: 429, route: 'GET /orders/:id' })
    const limited = await call(demo.base, '/orders/1', { headers: { 'x-user-id': abuser } })
    t.equal(limited.status, 429, 'banned on /orders with a 429')
    t.match(limited.headers['retry-after'], /^(60|59)$/, 'Retry-After: the ban\'s time left')
    t.equal(limited.headers['ratelimit-policy'], undefined, 'no RateLimit fields on a ban')
    t.match(JSON.parse(limited.text), { type: 'https://iana.org/assignments/http-problem-types#abnormal-usage-detected', status: 429 }, 'the demo\'s replyBuilder shapes bans too')
    t.equal((await call(demo.base, '/feed', { headers: { 'x-user-id': abuser } })).status, 200, 'other routes admit the caller')
    const everywhere = JSON.parse((await call(demo.base, `/admin/ban?user=${abuser}&ttl=60000&reason=test`, { method: 'POST', headers: admin })).text) as { id: string }
    t.equal((await call(demo.base, '/feed', { headers: { 'x-user-id': abuser } })).status, 403, 'a ban without a route: 403 everywhere')
    const bans = JSON.parse((await call(demo.base, '/admin/bans', { headers: admin })).text) as Array<{ id: string }>
    t.ok([onOrders.id, everywhere.id].every((id) => bans.some((listed) => listed.id === id)), 'listed')
    for (const id of [onOrders.id, everywhere.id]) {
      t.same(JSON.parse((await call(demo.base, `/admin/ban?id=${encodeURIComponent(id)}&reason=done`, { method: 'DELETE', headers: admin })).text), { lifted: true })
    }
    t.equal((await call(demo.base, '/orders/1', { headers: { 'x-user-id': abuser } })).status, 200, 'lifted')

    // Signed in: the limit runs after the preHandler that verifies the token, so users on one address are apart.
    const token = async (user: string): Promise<string> => (await call(demo.base, `/token?user=${user}`, { method: 'POST' })).text
    const suffix = Date.now()
    const alice = { authorization: `Bearer ${await token(`alice-${suffix}`)}` }
    const bob = { authorization: `Bearer ${await token(`bob-${suffix}`)}` }
    const me = await call(demo.base, '/me', { headers: alice })
    t.equal(me.status, 200)
    t.equal(JSON.parse(me.text).user, `alice-${suffix}`)
    t.equal(me.headers['ratelimit-policy'], '"me";q=5;w=60')
    const mine = []
    for (let i = 0; i < 5; i++) mine.push((await call(demo.base, '/me', { headers: alice })).status)
    t.same(mine, [200, 200, 200, 200, 429], 'me: 5 per minute for alice')
    t.equal((await call(demo.base, '/me', { headers: bob })).status, 200, 'me: bob, on the same address, has his own')
    t.equal((await call(demo.base, '/me')).status, 401, 'me: no token, no entry')

    const index = await call(demo.base, '/')
    t.ok(JSON.parse(index.text).policies.length >= 6, 'the index lists the policies')
    t.equal(JSON.parse(index.text).stats.skipped, 8, 'skipped requests are counted')
  })
}
