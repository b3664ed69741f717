/**
 * Atomic multi-limits: a route's array of blocks and the plugin's
 * globalLimits are decided in one script call, all-or-nothing, on Redis and
 * on the memory store; headers list every policy; keys share one hash tag.
 * The last test holds the multi script to the memory store (the reference
 * model) over random sequences of mixed algorithms.
 */
import { test, type Test } from 'tap'
import { request } from 'undici'
import fc from 'fast-check'
import type { FastifyInstance } from 'fastify'
import { buildApp, compileContext, setupRedisApp, setupStoreApp, storeRequest, TestClock, testRun } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, readState, uniquePrefix, windowTag } from './helpers/redis.js'
import { ALGORITHMS, type AlgorithmName, type RawDecision } from '../lib/store/algorithms.js'
import { compileGlobals, compilePolicy, type BlockRun } from '../lib/policy/policy.js'
import { buildBatchScript } from '../scripts/build/assemble.js'
import { READ_BLOCK_LUA } from './helpers/lua.js'
import { MemoryStore } from '../lib/store/memory/store.js'

const ok = async () => ({ ok: true })

const setup = async (t: Test, options: Parameters<typeof buildApp>[0] = {}) => await setupRedisApp(t, 'ml', options)

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: a route with two blocks admits only while both admit, and a refusal charges neither`, async (t) => {
    const { app, clock } = await setupStoreApp(t, store, 'ml')
    app.get('/search', {
      config: {
        rateLimit: [
          { name: 'burst', limit: 2, window: '1s', algorithm: 'fixed-window' },
          { name: 'hourly', limit: 5, window: '1h', algorithm: 'sliding-log' }
        ]
      }
    }, async (req) => ({ rl: req.rateLimit }))
    await app.ready()
    clock.now = Math.ceil(clock.now / 3_600_000) * 3_600_000 // aligned: the fixed window starts now

    const first = await app.inject('/search')
    t.equal(first.statusCode, 200)
    t.equal(first.headers['ratelimit-policy'], '"burst";q=2;w=1, "hourly";q=5;w=3600', 'every policy is listed')
    t.equal(first.headers.ratelimit, '"burst";r=1;t=1, "hourly";r=4;t=3600', 'every policy is reported')
    t.match(first.json().rl, { allowed: true, policy: 'burst', remaining: 1, outcome: 'allowed', policies: [{ policy: 'burst', remaining: 1 }, { policy: 'hourly', remaining: 4 }] })
    t.equal((await app.inject('/search')).statusCode, 200)

    // burst is spent: refused, and the hourly block is not charged for it
    clock.advance(100)
    const refused = await app.inject('/search')
    t.equal(refused.statusCode, 429)
    t.equal(refused.headers['retry-after'], '1')
    t.same(refused.json()['violated-policies'], ['burst'])
    // a refusal lists only the refusing policy (draft-10 §6, Appendix B); that hourly was not charged shows below (r=1 after two more)
    t.equal(refused.headers.ratelimit, '"burst";r=0;t=1', 'only the refusing policy is reported')
    t.equal(refused.headers['ratelimit-policy'], '"burst";q=2;w=1, "hourly";q=5;w=3600', 'every policy is still listed')

    // next second: 2 more admitted, then hourly has 1 left; a third is refused by burst only
    clock.advance(900)
    t.equal((await app.inject('/search')).statusCode, 200)
    const fourth = await app.inject('/search')
    t.equal(fourth.statusCode, 200)
    t.match(fourth.headers.ratelimit, /"hourly";r=1;/)
    clock.advance(1000)
    const last = await app.inject('/search')
    t.equal(last.statusCode, 200)
    t.match(last.headers.ratelimit, /"hourly";r=0;/)
    // both violated: Retry-After is the latest of the two, and both are named
    const both = await app.inject('/search')
    t.equal(both.statusCode, 429)
    t.same(both.json()['violated-policies'], ['hourly'], 'burst still has 1 of 2: only hourly refuses')
    t.ok(Number(both.headers['retry-after']) > 3000, `Retry-After is the hourly wait (${String(both.headers['retry-after'])} s)`)
    const again = await app.inject('/search')
    t.equal(again.statusCode, 429)
    t.same(again.json()['violated-policies'], ['hourly'], 'burst was not charged by the refused request')
    t.equal(again.headers['retry-after'], both.headers['retry-after'])
  })

  test(`${store}: both blocks violated: Retry-After is the latest, both are named`, async (t) => {
    const { app } = await setupStoreApp(t, store, 'ml')
    app.get('/x', { config: { rateLimit: [{ name: 'a', limit: 1, window: '1s', algorithm: 'fixed-window' }, { name: 'b', limit: 1, window: '1m', algorithm: 'fixed-window' }] } }, ok)
    await app.ready()
    t.equal((await app.inject('/x')).statusCode, 200)
    const refused = await app.inject('/x')
    t.equal(refused.statusCode, 429)
    t.same(refused.json()['violated-policies'], ['a', 'b'])
    t.equal(refused.headers['retry-after'], '60', 'the latest of 1 s and 60 s')
    t.equal(refused.headers.ratelimit, '"a";r=0;t=1, "b";r=0;t=60', 'each policy reports its own wait')
  })
}

test('globalLimits: one count per identity across routes, keys tagged by identity', async (t) => {
  const { app, redis, prefix } = await setup(t, {
    user: (req) => req.headers['x-user'] as string | undefined,
    globalLimits: [{ name: 'per-user', limit: 3, window: '1m', algorithm: 'fixed-window' }]
  })
  app.get('/a', { config: { rateLimit: { limit: 10, window: '1m', name: 'a' } } }, ok)
  app.get('/b', { config: { rateLimit: [{ limit: 10, window: '1m', name: 'b' }, { limit: 100, window: '1h', name: 'b-hourly' }] } }, ok)
  app.get('/only-global', ok)
  app.get('/health', { config: { rateLimit: false } }, ok)
  await app.ready()
  const alice = { 'x-user': 'alice' }
  t.equal((await app.inject({ url: '/a', headers: alice })).statusCode, 200)
  const b = await app.inject({ url: '/b', headers: alice })
  t.equal(b.statusCode, 200)
  t.equal(b.headers['ratelimit-policy'], '"b";q=10;w=60, "b-hourly";q=100;w=3600, "per-user";q=3;w=60')
  t.equal((await app.inject({ url: '/only-global', headers: alice })).statusCode, 200, 'a route with no block of its own is limited by the globals')
  const refused = await app.inject({ url: '/a', headers: alice })
  t.equal(refused.statusCode, 429, 'the fourth request of alice, on any route, is refused')
  t.same(refused.json()['violated-policies'], ['per-user'])
  t.equal((await app.inject({ url: '/a', headers: { 'x-user': 'bob' } })).statusCode, 200, 'bob has his own count')
  t.equal((await app.inject({ url: '/health', headers: alice })).statusCode, 200, 'rateLimit: false opts out of the globals too')

  const keys = (await redis.keys(`${prefix}:*`)).sort()
  const tag = (key: string) => key.slice(key.indexOf('{') + 1, key.indexOf('}'))
  const aliceKeys = keys.filter((key) => key.includes(tag(keys.find((k) => k.includes(':*:')) as string)))
  t.ok(aliceKeys.every((key) => /^[^{]*\{u=[A-Za-z0-9_-]+\}:/.test(key)), 'every key is tagged by the identity alone')
  t.same(aliceKeys.map((key) => key.slice(key.indexOf('}') + 2)).sort(), ['*:FC60000', 'GET:/a:SW60000', 'GET:/b:SW3600000', 'GET:/b:SW60000'].sort(), 'route keys carry the route outside the tag; the global key does not')
  t.equal(new Set(aliceKeys.map(tag)).size, 1, 'one hash tag for all of alice\'s keys')
  t.ok(keys.every((key) => Buffer.byteLength(key) <= 128), 'keys stay within 128 bytes')
  t.same(await readState(redis, aliceKeys.find((key) => key.includes(':*:')) as string), [windowTag(Math.floor(new TestClock().now / 60_000)), 3], 'the global count is exactly the 3 admitted')
  t.match(app.rateLimit.policies().find((p) => p.url === '/b'), { limits: [{ name: 'b', global: false }, { name: 'b-hourly' }, { name: 'per-user', global: true }] })
})

test('shadow global block: recorded, never refuses; an enforced block still does', async (t) => {
  const { app } = await setup(t, { globalLimits: [{ name: 'trial', limit: 1, window: '1m', mode: 'shadow' }] })
  app.get('/x', { config: { rateLimit: { limit: 3, window: '1m', name: 'x' } } }, async (req) => ({ rl: req.rateLimit }))
  await app.ready()
  t.equal((await app.inject('/x')).statusCode, 200)
  const second = await app.inject('/x')
  t.equal(second.statusCode, 200)
  t.equal(second.headers['ratelimit-policy'], '"x";q=3;w=60', 'shadow policies are not advertised')
  t.match(second.json().rl, { allowed: true, outcome: 'shadow-limited', policies: [{ policy: 'x', allowed: true }, { policy: 'trial', allowed: false, shadow: true }] })
  t.equal((await app.inject('/x')).statusCode, 200)
  const fourth = await app.inject('/x')
  t.equal(fourth.statusCode, 429)
  t.same(fourth.json()['violated-policies'], ['x'], 'a shadow policy is never named as violated')
})

test('Redis Cluster: blocks of one request with different identities are refused at startup', async (t) => {
  const context = compileContext({ cluster: true, user: () => undefined })
  const globals = compileGlobals([{ limit: 5, window: '1m', by: 'user' }], context)
  t.throws(() => compilePolicy({ limit: 1, window: '1s', by: 'ip' }, { method: 'GET', url: '/x', source: 'declared' }, context, globals), { code: 'FST_RRL_INVALID_BLOCK', message: /same `by`/ })
  t.throws(() => compilePolicy([{ limit: 1, window: '1s', by: 'ip' }, { limit: 9, window: '1h', by: 'user' }], { method: 'GET', url: '/x', source: 'declared' }, context), { code: 'FST_RRL_INVALID_BLOCK' })
  const policy = compilePolicy({ limit: 1, window: '1s', by: 'user' }, { method: 'GET', url: '/x', source: 'declared' }, context, globals)
  t.same(policy.keyHeads, ['rl:{', 'rl:{'], 'same identity: one tag')
  t.same(policy.keyTails, ['}:GET:/x:SW1000', '}:*:SW60000'])
  const single = { ...context, cluster: false }
  const mixed = compilePolicy({ limit: 1, window: '1s', by: 'ip' }, { method: 'GET', url: '/x', source: 'declared' }, single, compileGlobals([{ limit: 5, window: '1m', by: 'user' }], single))
  t.same(mixed.keyHeads, ['rl:{GET:/x|', 'rl:{'], 'without a Cluster, different identities keep their own tags')
  const twins = compilePolicy([{ limit: 1, window: '1m', name: 'a' }, { limit: 5, window: '1m', name: 'b' }], { method: 'GET', url: '/x', source: 'declared' }, single)
  t.same(twins.keyTails, ['}:SW60000', '}:SW60000.1'], 'same algorithm and window: the second gets its index')
})

/*
 * Two instances, one prefix: 200 concurrent requests from one identity over
 * real sockets against blocks of 25/h and 40/h. Exactly 25 are admitted, and
 * the 40/h block's count is exactly 25: no refused request charged it.
 */
const MIXES: Array<[AlgorithmName, AlgorithmName]> = [
  ['fixed-window', 'sliding-log'],
  ['sliding-window', 'gcra'],
  ['token-bucket', 'fixed-window'],
  ['gcra', 'token-bucket'],
  ['sliding-log', 'sliding-window']
]

test('two instances, 200 concurrent requests, blocks 25/h and 40/h: exactly 25 admitted, no counter above it', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('mlc')
  const inspector = createClient(server)
  const fleet: Array<{ app: FastifyInstance, base: string, close: () => Promise<void> }> = []
  for (let i = 0; i < 2; i++) {
    const redis = createClient(server)
    const app = await buildApp({ redis, prefix, timeout: 5000, user: (req) => req.headers['x-user'] as string | undefined })
    MIXES.forEach(([first, second], index) => {
      app.get(`/mix${index}`, { config: { rateLimit: [{ algorithm: first, limit: 25, window: '1h', by: 'user', name: 'small' }, { algorithm: second, limit: 40, window: '1h', by: 'user', name: 'large' }] } }, ok)
    })
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    fleet.push({ app, base, close: async () => { await app.close(); redis.disconnect() } })
  }
  cleanUpPrefix(t, inspector, prefix, async () => { for (const member of fleet) await member.close() })
  for (let index = 0; index < MIXES.length; index++) {
    const label = MIXES[index]?.join(' + ')
    const results = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
      const res = await request(`${(fleet[i % 2] as typeof fleet[0]).base}/mix${index}`, { headers: { 'x-user': 'one' } })
      await res.body.dump()
      return res.statusCode
    }))
    t.equal(results.filter((code) => code === 200).length, 25, `${label}: exactly 25 admitted`)
    t.equal(results.filter((code) => code === 429).length, 175, `${label}: the rest refused, none failed`)
    const peek = await (fleet[0] as typeof fleet[0]).app.rateLimit.peek(`GET /mix${index}`, { user: 'one' })
    t.match(peek.policies, [{ policy: 'small', remaining: 0 }, { policy: 'large', remaining: 15 }], `${label}: the 40/h block counted exactly the 25 admitted`)
  }
  for (const member of fleet) t.equal(member.app.rateLimit.stats().degraded, 0)
})

/*
 * The production batch script's decisions of several blocks (one call per
 * step: scripts/paths.lua, multi.lua's decideAll) against the memory store,
 * over random sequences: several
 * blocks of random algorithms (some in shadow mode), non-decreasing injected
 * times, costs 1..3. Every step must give the same decisions on both sides,
 * and on a step refused by an enforced block the Lua side must have written
 * nothing (each key's DUMP unchanged, except that sliding-log may evict
 * expired entries: its members newer than now - W must be unchanged).
 * Some steps are refunds instead (adjustment entries of negative units, as
 * refundOn sends them, charged at the previous step's time): both sides must
 * say which blocks gave units back, and the later steps must still agree,
 * which holds the refunded states equal too.
 * One sequence is one EVAL, as in algorithms-property.test.ts, so Redis TTLs
 * never expire state while the injected clock jumps.
 */
function multiHarness (source: string): string {
  const body = source.split('\n').slice(1).join('\n')
  // TTLs are lengthened by a minute before they reach Redis: Redis 7.0 expires
  // keys by the real clock even inside one script, and a 1 ms window must not
  // lose state between two steps of the injected clock on a loaded machine.
  return `#!lua
local realRedis = redis
local redis = setmetatable({
  call = function (...)
    local a = { ... }
    local cmd = string.upper(a[1])
    if cmd == 'SET' then
      for j = 3, #a do
        if string.upper(tostring(a[j])) == 'PX' then a[j + 1] = tonumber(a[j + 1]) + 60000 end
      end
    elseif cmd == 'PEXPIRE' then
      a[3] = tonumber(a[3]) + 60000
    end
    return realRedis.call(unpack(a))
  end
}, { __index = realRedis })
local function batch (KEYS, ARGV)
${body}
end
${READ_BLOCK_LUA}
local n = tonumber(ARGV[1])
local shape = {}
for i = 1, n * 4 do shape[i] = ARGV[1 + i] end
-- Block i as spec i of the batch (batch.lua's layout): algorithm|limit|windowMs|burst (the limit)|shadow|no penalty.
local specs = {}
for i = 1, n do
  local b = (i - 1) * 4
  specs[#specs + 1] = shape[b + 1] .. '|' .. shape[b + 2] .. '|' .. shape[b + 3] .. '|' .. shape[b + 2] .. '|' .. shape[b + 4] .. '|'
  specs[#specs + 1] = ''
end
-- One step as the production batch script takes it: a decision of every block (0, n, charge, then spec and
-- cost per block), or a refund of each block's cost charged at ms chargedAt (-1, n, then 'u', spec, -cost,
-- chargedAt per block: Store.adjust's entries); its reply as DECISION_STRIDE numbers per block, or 1/0 per block.
local function multi (KEYS, now, refund, chargedAt, costs)
  local args = { now, tostring(n), unpack(specs) }
  if refund then
    args[#args + 1], args[#args + 2] = '-1', tostring(n)
    for i = 1, n do
      local e = #args
      args[e + 1], args[e + 2], args[e + 3], args[e + 4] = 'u', tostring(i), tostring(-tonumber(costs[i])), chargedAt
    end
  else
    args[#args + 1], args[#args + 2], args[#args + 3] = '0', tostring(n), ''
    for i = 1, n do args[#args + 1], args[#args + 2] = tostring(i), costs[i] end
  end
  local r = batch(KEYS, args)
  local row = {}
  if refund then
    for i = 1, n do row[i] = r[1 + i] end
    return row
  end
  local o = 1
  for _ = 1, n do
    local a, remaining, reset, retry, nextMs
    o, a, remaining, reset, retry, nextMs = readBlock(r, o)
    local j = #row
    row[j + 1], row[j + 2], row[j + 3], row[j + 4], row[j + 5] = a, remaining, reset, retry, nextMs
  end
  return row
end
local out = {}
local at = 2 + n * 4
while at <= #ARGV do
  local now = ARGV[at]
  local refund = string.sub(now, 1, 1) == 'r'
  local chargedAt = ''
  if refund then
    local sep = string.find(now, ':', 1, true)
    chargedAt = string.sub(now, 2, sep - 1)
    now = string.sub(now, sep + 1)
  end
  local costs = {}
  local before = {}
  for i = 1, n do
    local b = (i - 1) * 4
    costs[i] = ARGV[at + i]
    if shape[b + 1] == '3' then
      before[i] = table.concat(redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. string.format('%d', tonumber(now) - tonumber(shape[b + 3])), '+inf'), ',')
    else
      before[i] = redis.call('DUMP', KEYS[i]) or ''
    end
  end
  local r = multi(KEYS, now, refund, chargedAt, costs)
  local unchanged = 1
  for i = 1, n do
    local b = (i - 1) * 4
    local after
    if shape[b + 1] == '3' then
      after = table.concat(redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. string.format('%d', tonumber(now) - tonumber(shape[b + 3])), '+inf'), ',')
    else
      after = redis.call('DUMP', KEYS[i]) or ''
    end
    if after ~= before[i] then unchanged = 0 end
  end
  r[#r + 1] = unchanged
  out[#out + 1] = r
  at = at + 1 + n
end
redis.call('DEL', unpack(KEYS))
return out
`
}

test('property: the batch script\'s decisions of several blocks decide like the memory store, and a refused step writes nothing', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(() => { client.disconnect() })
  const prefix = uniquePrefix('mlp')
  const harness = multiHarness(buildBatchScript().source)
  const sha = await client.script('LOAD', harness) as string

  const block = fc.record({
    algorithm: fc.constantFrom(...ALGORITHMS),
    limit: fc.integer({ min: 1, max: 6 }),
    windowMs: fc.integer({ min: 1, max: 5000 }),
    shadow: fc.boolean()
  })
  const scenario = fc.record({
    blocks: fc.array(block, { minLength: 2, maxLength: 4 }),
    steps: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 1500 }), refund: fc.integer({ min: 0, max: 3 }).map((n) => n === 0), costs: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 4, maxLength: 4 }) }), { minLength: 1, maxLength: 30 })
  })
  let run = 0
  let refusedSteps = 0
  let refunds = 0
  await fc.assert(fc.asyncProperty(scenario, async ({ blocks, steps }) => {
    run++
    const keys = blocks.map((_, i) => `${prefix}:{s${run}}:${i}`)
    const runs: BlockRun[] = blocks.map((b) => testRun(b))
    const args: Array<string | number> = [blocks.length]
    for (const b of blocks) args.push(ALGORITHMS.indexOf(b.algorithm) + 1, b.limit, b.windowMs, b.shadow ? '1' : '')
    let now = 1_900_000_000_000
    const times: number[] = []
    for (const step of steps) {
      now += step.dt
      times.push(now)
      // a refund of units charged step.dt ago (at the previous step's time)
      args.push(step.refund ? `r${now - step.dt}:${now}` : now, ...step.costs.slice(0, blocks.length))
    }
    const out = await client.evalsha(sha, keys.length, ...keys, ...args.map(String)) as number[][]
    const model = new MemoryStore(() => 0)
    try {
      steps.forEach((step, s) => {
        const costs = step.costs.slice(0, blocks.length)
        if (step.refund) {
          const given = model.adjustNow(runs.map((run, i) => ({ kind: 'units' as const, run, key: keys[i] as string, units: -(costs[i] as number), chargedAt: (times[s] as number) - step.dt })), times[s] as number)
          const row = out[s] as number[]
          const actual = given.map((_, i) => row[i] === 1)
          if (JSON.stringify(actual) !== JSON.stringify(given)) throw new Error(`step ${s} (refund): lua ${JSON.stringify(actual)} model ${JSON.stringify(given)}`)
          refunds += given.filter(Boolean).length
          return
        }
        const expected: RawDecision[] = model.decideNow(storeRequest(runs, keys, costs), 'charge', times[s] as number)
        const row = out[s] as number[]
        const actual = expected.map((_, i) => ({ allowed: row[i * 5] === 1, remaining: row[i * 5 + 1], resetMs: row[i * 5 + 2], retryAfterMs: row[i * 5 + 3], nextMs: row[i * 5 + 4] }))
        if (JSON.stringify(actual) !== JSON.stringify(expected)) {
          throw new Error(`step ${s}: lua ${JSON.stringify(actual)} model ${JSON.stringify(expected)}`)
        }
        const refused = expected.some((d, i) => !d.allowed && !(runs[i] as BlockRun).shadow)
        if (refused) {
          refusedSteps++
          if (row[blocks.length * 5] !== 1) throw new Error(`step ${s}: refused, but the script wrote state`)
        }
      })
    } finally {
      model.close()
    }
  }), { numRuns: Number(process.env.PROPERTY_RUNS ?? 150) })
  t.ok(refusedSteps > 100, `${refusedSteps} refused steps checked for no writes`)
  t.ok(refunds > 100, `${refunds} refunds given back alike on both sides`)
})
