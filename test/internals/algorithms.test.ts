/**
 * Per-algorithm behaviour with an injected clock, run against both the Lua
 * scripts on a real Redis and the TypeScript memory model: every scenario
 * asserts the same exact numbers on both backends.
 *
 * Windows are long (60 s) and no scenario writes a key whose logical TTL is
 * shorter than ~1 s, so Redis' real-time expiry never interferes with the
 * injected clock while a scenario runs.
 */
import { test, type Test } from 'tap'
import type { Redis } from 'ioredis'
import { getRedis, createClient, readState, uniquePrefix, windowTag } from '../helpers/redis.js'
import { memoryAlgorithms } from '../../lib/kinds/window/memory/algorithms.js'
import { ALGORITHMS, type AlgorithmName, type BlockParams, type RawDecision } from '../../lib/store/algorithms.js'
import { loadScripts } from '../helpers/lua.js'

const scripts = loadScripts()

const W = 60_000
/** Start of a window (aligned to W), around November 2023. */
const B = Math.ceil(1_700_000_000_000 / W) * W

type Tuple = [boolean, number, number, number]

interface Backend {
  name: string
  call: (algorithm: AlgorithmName, key: string, params: BlockParams, cost: number, now: number) => Promise<RawDecision>
}

function toDecision (raw: unknown): RawDecision {
  if (!Array.isArray(raw) || raw.length !== 5) throw new Error(`bad script reply ${JSON.stringify(raw)}`)
  for (const v of raw) {
    if (typeof v !== 'number' || !Number.isInteger(v)) throw new Error(`non-integer in script reply ${JSON.stringify(raw)}`)
  }
  const [allowed, remaining, resetMs, retryAfterMs, nextMs] = raw as number[]
  if (allowed !== 0 && allowed !== 1) throw new Error(`allowed is ${allowed}`)
  return { allowed: allowed === 1, remaining: remaining as number, resetMs: resetMs as number, retryAfterMs: retryAfterMs as number, nextMs: nextMs as number }
}

async function luaCall (client: Redis, algorithm: AlgorithmName, key: string, p: BlockParams, cost: number, now: number | ''): Promise<RawDecision> {
  return toDecision(await client.eval(scripts[algorithm].source, 1, key, p.limit, p.windowMs, p.burst, cost, now))
}

function luaBackend (client: Redis): Backend {
  return { name: 'lua', call: async (a, key, p, cost, now) => await luaCall(client, a, key, p, cost, now) }
}

/** The memory model behind a map that drops a state once its ttl has passed (logical clock). */
function memoryBackend (): Backend {
  const store = new Map<string, { state: unknown, expiresAt: number }>()
  return {
    name: 'memory',
    call: async (algorithm, key, params, cost, now) => {
      const entry = store.get(key)
      const current = entry !== undefined && now < entry.expiresAt ? entry.state : undefined
      const { decision, state, ttlMs } = memoryAlgorithms[algorithm].step(current, params, cost, now)
      if (state !== undefined) {
        if (ttlMs > 0) store.set(key, { state, expiresAt: now + ttlMs })
        else store.delete(key)
      }
      for (const v of [decision.remaining, decision.resetMs, decision.retryAfterMs, ttlMs]) {
        if (!Number.isInteger(v)) throw new Error(`non-integer in memory decision ${JSON.stringify(decision)}`)
      }
      return decision
    }
  }
}

function tuple (d: RawDecision): Tuple {
  return [d.allowed, d.remaining, d.resetMs, d.retryAfterMs]
}

type Stepper = (a: AlgorithmName, key: string, p: BlockParams, cost: number, now: number, expected?: Array<boolean | number | undefined>, msg?: string) => Promise<RawDecision>

/** Runs one request on a backend and checks it against the expected [allowed, remaining, resetMs, retryAfterMs] (undefined = any). */
function makeStepper (backend: Backend) {
  return (t: Test): Stepper => async (a, key, p, cost, now, expected, msg = '') => {
    const d = await backend.call(a, key, p, cost, now)
    if (expected !== undefined) {
      const got = tuple(d)
      const want = got.map((v, i) => expected[i] === undefined ? v : expected[i])
      t.same(got, want, `${a} cost ${cost} at B+${now - B} ${msg}`)
    }
    t.ok(d.remaining >= 0 && d.resetMs >= 0 && d.retryAfterMs >= 0, 'no negative numbers')
    t.equal(d.retryAfterMs === 0, d.allowed, 'retryAfterMs is 0 exactly when admitted')
    return d
  }
}

const params = (limit: number, windowMs = W, burst = limit): BlockParams => ({ limit, windowMs, burst })

test('algorithms on lua and memory', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(async () => { await client.quit() })
  const prefix = uniquePrefix('alg')
  let n = 0
  const keys: string[] = []
  const newKey = (label: string): string => {
    const key = `${prefix}:{${label}}:${n++}`
    keys.push(key)
    return key
  }
  t.teardown(async () => {
    for (let i = 0; i < keys.length; i += 500) await client.del(...keys.slice(i, i + 500))
  })

  for (const backend of [luaBackend(client), memoryBackend()]) {
    await t.test(backend.name, async (t) => {
      const stepper = makeStepper(backend)

      await t.test('fixed-window: admits 2x the limit across a window boundary', async (t) => {
        const step = stepper(t)
        const key = newKey('fw')
        const p = params(5)
        const end = B + W
        let admitted = 0
        for (let i = 0; i < 5; i++) {
          const d = await step('fixed-window', key, p, 1, end - 1000, [true, 4 - i, 1000, 0])
          if (d.allowed) admitted++
        }
        await step('fixed-window', key, p, 1, end - 1000, [false, 0, 1000, 1000], '6th in window')
        await step('fixed-window', key, p, 1, end - 1, [false, 0, 1, 1], 'retryAfter - 1 ms')
        for (let i = 0; i < 5; i++) {
          const d = await step('fixed-window', key, p, 1, end, [true, 4 - i, W, 0], 'next window')
          if (d.allowed) admitted++
        }
        await step('fixed-window', key, p, 1, end + 1, [false, 0, W - 1, W - 1])
        t.equal(admitted, 10, '10 requests (2x limit 5) admitted within 1001 ms')
      })

      await t.test('fixed-window: cost > 1 and cost > limit', async (t) => {
        const step = stepper(t)
        const key = newKey('fw')
        const p = params(5)
        const now = B + 2 * W + 10
        await step('fixed-window', key, p, 6, now, [false, 5, 0, W], 'cost > limit on a fresh key')
        await step('fixed-window', key, p, 3, now, [true, 2, W - 10, 0])
        await step('fixed-window', key, p, 3, now, [false, 2, W - 10, W - 10], 'cost 3 with 2 left')
        await step('fixed-window', key, p, 2, now + 5, [true, 0, W - 15, 0], 'cost 2 with 2 left')
        await step('fixed-window', key, p, 6, now + 5, [false, 0, W - 15, W], 'cost > limit')
        await step('fixed-window', key, p, 5, B + 3 * W, [true, 0, W, 0], 'whole limit in one request')
        await step('fixed-window', key, p, 1, B + 10 * W + 7, [true, 4, W - 7, 0], 'an old window counts as zero')
      })

      await t.test('sliding-window: weighting of the previous window', async (t) => {
        const step = stepper(t)
        const key = newKey('sw')
        const p = params(10)
        const a = 'sliding-window'
        // resetMs: a count weighs at least 1 until its window has left the trailing window, two boundaries on
        await step(a, key, p, 1, B + 1000, [true, 9, 2 * W - 1000, 0])
        for (let i = 1; i < 10; i++) await step(a, key, p, 1, B + 1000, [true, 9 - i])
        // the 11th: only in the next window, when 10 * (W - e) <= 9 * W, i.e. e >= W / 10
        await step(a, key, p, 1, B + 1000, [false, 0, undefined, W - 1000 + 6000])
        await step(a, key, p, 1, B + W, [false, 0, undefined, 6000], 'window start: estimate still 10')
        // 50% into the next window: estimate = ceil(10 * 0.5) = 5, so exactly 5 more
        const mid = B + W + W / 2
        for (let i = 0; i < 5; i++) await step(a, key, p, 1, mid, [true, 4 - i, undefined, 0], '50% elapsed')
        // cur 5, prev 10: 10 * (W - e) <= 4 * W once e >= 0.6 W = 36000
        await step(a, key, p, 1, mid, [false, 0, undefined, 6000], '6th at 50%')
        await step(a, key, p, 1, mid + 5999, [false, 0, undefined, 1], 'retryAfter - 1 ms')
        await step(a, key, p, 1, mid + 6000, [true, 0, undefined, 0], 'retryAfter: the estimate has decayed by one')
        // cur 6: 10 * (W - e) <= 3 * W once e >= 42000
        await step(a, key, p, 1, mid + 6000, [false, 0, undefined, 6000])
        await step(a, key, p, 1, mid + 11_999, [false, 0, undefined, 1], 'retryAfter - 1 ms')
        await step(a, key, p, 1, mid + 12_000, [true, 0, undefined, 0], 'retryAfter')
        // two windows later everything is forgotten
        await step(a, key, p, 1, B + 3 * W + 5, [true, 9, 2 * W - 5, 0])
      })

      await t.test('sliding-window: cost > 1, cost > limit, reset', async (t) => {
        const step = stepper(t)
        const key = newKey('sw')
        const p = params(10)
        const a = 'sliding-window'
        await step(a, key, p, 11, B + 2000, [false, 10, 0, W], 'cost > limit on a fresh key')
        await step(a, key, p, 4, B + 2000, [true, 6])
        await step(a, key, p, 4, B + 2000, [true, 2])
        // cur 8, prev 0: only the next window helps: 8 * (W - e) <= 6 * W once e >= W / 4 = 15000
        await step(a, key, p, 4, B + 2000, [false, 2, undefined, W - 2000 + 15_000])
        await step(a, key, p, 2, B + 2000, [true, 0])
        // cur 10: quota fully restored when this window has left the trailing window, two boundaries on
        await step(a, key, p, 11, B + 3000, [false, 0, 2 * W - 3000, W])
      })

      await t.test('sliding-log: exact trailing window and retryAfter', async (t) => {
        const step = stepper(t)
        const key = newKey('sl')
        const p = params(3)
        const a = 'sliding-log'
        await step(a, key, p, 1, B, [true, 2, W, 0])
        await step(a, key, p, 1, B + 10_000, [true, 1, W, 0])
        await step(a, key, p, 1, B + 20_000, [true, 0, W, 0])
        // the oldest (B) must leave the window: at B + W
        await step(a, key, p, 1, B + 30_000, [false, 0, 50_000, 30_000])
        await step(a, key, p, 1, B + W - 1, [false, 0, 20_001, 1], 'retryAfter - 1 ms')
        await step(a, key, p, 1, B + W, [true, 0, W, 0], 'retryAfter')
        await step(a, key, p, 1, B + W, [false, 0, W, 10_000])
        // cost 2 needs the two oldest (B + 10000, B + 20000) gone
        await step(a, key, p, 2, B + W, [false, 0, W, 20_000])
        await step(a, key, p, 4, B + W, [false, 0, W, W], 'cost > limit')
      })

      await t.test('sliding-log: never more than the limit in any trailing window', async (t) => {
        const key = newKey('sl')
        const p = params(4)
        const admitted: number[] = []
        // bursts of 3 every 7 s for 3 minutes
        for (let now = B; now < B + 3 * W; now += 7000) {
          for (let i = 0; i < 3; i++) {
            const d = await backend.call('sliding-log', key, p, 1, now)
            if (d.allowed) admitted.push(now)
          }
        }
        let worst = 0
        for (const end of admitted) worst = Math.max(worst, admitted.filter((s) => s > end - W && s <= end).length)
        t.equal(worst, 4, 'the busiest trailing window holds exactly the limit')
        t.ok(admitted.length >= 12, `admitted ${admitted.length}`)
      })

      await t.test('sliding-log: same-millisecond requests do not merge', async (t) => {
        const step = stepper(t)
        const key = newKey('sl')
        const p = params(5)
        const now = B + 123
        for (let i = 0; i < 5; i++) await step('sliding-log', key, p, 1, now, [true, 4 - i, W, 0])
        await step('sliding-log', key, p, 1, now, [false, 0, W, W], '6th in the same ms')
        const key2 = newKey('sl')
        await step('sliding-log', key2, p, 2, now, [true, 3, W, 0])
        await step('sliding-log', key2, p, 2, now, [true, 1, W, 0])
        await step('sliding-log', key2, p, 2, now, [false, 1, W, W])
        await step('sliding-log', key2, p, 1, now, [true, 0, W, 0])
      })

      await t.test('token-bucket: burst, refill, cost, exact retryAfter', async (t) => {
        const step = stepper(t)
        const key = newKey('tb')
        const p = params(10, W, 5) // 1 token per 6000 ms, capacity 5
        const a = 'token-bucket'
        await step(a, key, p, 1, B, [true, 4, 6000, 0], 'a new bucket is full')
        for (let i = 1; i < 5; i++) await step(a, key, p, 1, B, [true, 4 - i, 6000 * (i + 1), 0])
        await step(a, key, p, 1, B, [false, 0, 30_000, 6000], 'burst spent')
        await step(a, key, p, 1, B + 5999, [false, 0, 24_001, 1])
        await step(a, key, p, 1, B + 6000, [true, 0, 30_000, 0])
        await step(a, key, p, 2, B + 6000, [false, 0, 30_000, 12_000], 'cost 2')
        await step(a, key, p, 6, B + 6000, [false, 0, 30_000, W], 'cost > burst')
        // 30 s later the bucket is full again: a cost-5 request takes it all
        await step(a, key, p, 5, B + 36_000, [true, 0, 30_000, 0], 'refilled to the burst, not beyond')
        await step(a, key, p, 1, B + 36_000 + 10 * W, [true, 4, 6000, 0], 'long idle: full, not more')
      })

      await t.test('token-bucket: fractional refill rate is carried exactly', async (t) => {
        const step = stepper(t)
        const key = newKey('tb')
        const p = params(7, W, 2) // 1 token per 8571.43 ms, capacity 2
        const a = 'token-bucket'
        await step(a, key, p, 1, B, [true, 1, 8572, 0])
        await step(a, key, p, 1, B, [true, 0, 17_143, 0])
        await step(a, key, p, 1, B, [false, 0, 17_143, 8572])
        await step(a, key, p, 1, B + 8571, [false, 0, 8572, 1])
        // admitted 4/7 ms after the token was whole: the surplus is kept for the next one
        await step(a, key, p, 1, B + 8572, [true, 0, 17_143, 0])
        await step(a, key, p, 1, B + 8572, [false, 0, 17_143, 8571])
        await step(a, key, p, 1, B + 17_142, [false, 0, 8573, 1])
        await step(a, key, p, 1, B + 17_143, [true, 0])
      })

      await t.test('token-bucket: clock going backwards', async (t) => {
        const step = stepper(t)
        const key = newKey('tb')
        const p = params(10, W, 1)
        await step('token-bucket', key, p, 1, B, [true, 0, 6000, 0])
        await step('token-bucket', key, p, 1, B - 1000, [false, 0, 7000, 7000], 'no refill for negative elapsed')
        await step('token-bucket', key, p, 1, B + 5999, [false, 0, 1, 1])
        await step('token-bucket', key, p, 1, B + 6000, [true, 0, 6000, 0])
      })

      await t.test('gcra: burst then exactly one per emission interval', async (t) => {
        const step = stepper(t)
        const key = newKey('gcra')
        const p = params(10, W, 3) // I = 6000 ms
        const a = 'gcra'
        await step(a, key, p, 1, B, [true, 2, 6000, 0])
        await step(a, key, p, 1, B, [true, 1, 12_000, 0])
        await step(a, key, p, 1, B, [true, 0, 18_000, 0])
        await step(a, key, p, 1, B, [false, 0, 18_000, 6000], 'burst of 3 spent')
        await step(a, key, p, 4, B, [false, 0, 18_000, W], 'cost > burst')
        await step(a, key, p, 1, B + 5999, [false, 0, 12_001, 1])
        await step(a, key, p, 1, B + 6000, [true, 0, 18_000, 0])
        // sustained: one request per second for a minute, exactly one per 6 s is admitted
        const admitted: number[] = []
        for (let now = B + 7000; now <= B + 66_000; now += 1000) {
          const d = await backend.call(a, key, p, 1, now)
          if (d.allowed) admitted.push(now - B)
        }
        t.same(admitted, [12, 18, 24, 30, 36, 42, 48, 54, 60, 66].map((s) => s * 1000))
        // idle long enough: the full burst again, with cost
        await step(a, key, p, 3, B + 66_000 + 18_000, [true, 0, 18_000, 0])
      })

      await t.test('gcra: fractional emission interval', async (t) => {
        const step = stepper(t)
        const key = newKey('gcra')
        const p = params(7, W, 2) // I = 8571.43 ms
        const a = 'gcra'
        await step(a, key, p, 1, B, [true, 1])
        await step(a, key, p, 1, B, [true, 0])
        // arriving exactly at each retryAfter: admitted at B + ceil(k * W / 7), never drifting
        let now = B
        for (let k = 1; k <= 14; k++) {
          const d = await step(a, key, p, 1, now, [false])
          const due = B + Math.ceil(k * W / 7)
          t.equal(now + d.retryAfterMs, due, `k=${k}: retryAfter points at B + ceil(k * I)`)
          await step(a, key, p, 1, due - 1, [false, 0, undefined, 1])
          await step(a, key, p, 1, due, [true, 0])
          now = due
        }
        t.equal(now - B, 120_000, '14 emission intervals of 60000/7 ms take exactly 2 minutes')
      })

      await t.test('gcra and token-bucket: any interval holds at most burst + floor(dt * limit / W)', async (t) => {
        for (const a of ['gcra', 'token-bucket'] as const) {
          const key = newKey(a)
          const p = params(5, W, 3)
          const admitted: number[] = []
          for (let now = B; now <= B + 2 * W; now += 1500) {
            for (let i = 0; i < 2; i++) {
              const d = await backend.call(a, key, p, 1, now)
              if (d.allowed) admitted.push(now)
            }
          }
          let ok = true
          for (let i = 0; i < admitted.length; i++) {
            for (let j = i; j < admitted.length; j++) {
              const span = (admitted[j] as number) - (admitted[i] as number)
              if (j - i + 1 > 3 + Math.floor(span * 5 / W)) ok = false
            }
          }
          t.ok(ok, `${a}: bound holds over ${admitted.length} admitted`)
          t.equal(admitted.length, 3 + 10, `${a}: burst + rate * 2 minutes`)
        }
      })
    })
  }

  await t.test('lua only', async (t) => {
    const call = async (a: AlgorithmName, key: string, p: BlockParams, cost: number, now: number | ''): Promise<RawDecision> =>
      await luaCall(client, a, key, p, cost, now)
    /** [member, score] pairs of a sorted set, whichever RESP version the client speaks. */
    const zentries = async (key: string): Promise<Array<[string, number]>> => {
      const raw = await client.call('ZRANGE', key, '0', '-1', 'WITHSCORES') as unknown[]
      if (raw.length > 0 && Array.isArray(raw[0])) return (raw as Array<[string, unknown]>).map(([m, s]) => [String(m), Number(s)])
      const out: Array<[string, number]> = []
      for (let i = 0; i < raw.length; i += 2) out.push([String(raw[i]), Number(raw[i + 1])])
      return out
    }
    const snapshot = async (a: AlgorithmName, key: string): Promise<unknown> =>
      a === 'sliding-log' ? await zentries(key) : await client.get(key)

    await t.test('a stored value of another format (decimal text, foreign bytes, an integer that would overflow or is negative) reads as absent and is replaced, never an error', async (t) => {
      for (const a of ALGORITHMS.filter((name) => name !== 'sliding-log')) {
        for (const foreign of ['29487611:1:0', '1700000000000:5', 'x', 'abcdefghabcdefghabcdefghabcdefgh', '9223372036854775807', '-5']) {
          const key = newKey(a)
          await client.set(key, foreign, 'PX', 60_000)
          const fresh = await call(a, newKey(a), params(3, W, 3), 1, B + 10)
          const over = await call(a, key, params(3, W, 3), 1, B + 10)
          t.same(over, fresh, `${a}: ${JSON.stringify(foreign)} decides like no state`)
          const state = await readState(client, key)
          t.equal(state?.length, a === 'sliding-window' ? 3 : 2, `${a}: replaced by this format's state`)
        }
      }
    })

    await t.test('every write sets a TTL no longer than needed; rejected requests change nothing', async (t) => {
      for (const a of ALGORITHMS) {
        const key = newKey(a)
        const p = params(3, W, 3)
        const now = B + 7000
        for (let i = 0; i < 3; i++) {
          const d = await call(a, key, p, 1, now)
          t.ok(d.allowed, `${a}: admitted`)
          const pttl = await client.pttl(key)
          t.ok(pttl > 0, `${a}: PTTL ${pttl} > 0 after a write`)
          // the state matters at most 2 windows (sliding-window), W (sliding-log) or resetMs
          const bound = a === 'sliding-window' ? 2 * W - 7000 : a === 'sliding-log' ? W : d.resetMs
          t.ok(pttl <= bound, `${a}: PTTL ${pttl} <= ${bound}`)
        }
        const before = await snapshot(a, key)
        const ttlBefore = await client.pttl(key)
        for (const [cost, at] of [[1, now], [1, now + 1], [2, now + 2], [50, now + 3]] as const) {
          const d = await call(a, key, p, cost, at)
          t.notOk(d.allowed, `${a}: cost ${cost} rejected`)
        }
        t.same(await snapshot(a, key), before, `${a}: state unchanged by rejected requests`)
        t.ok(await client.pttl(key) <= ttlBefore, `${a}: TTL not extended by rejected requests`)
      }
    })

    await t.test('the TIME path (now = empty string) uses the Redis clock', async (t) => {
      const time = await client.time()
      const redisNow = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
      for (const a of ALGORITHMS) {
        const key = newKey(a)
        const hour = 3_600_000
        const p = params(2, hour, 2)
        const d1 = await call(a, key, p, 1, '')
        const d2 = await call(a, key, p, 1, '')
        const d3 = await call(a, key, p, 1, '')
        t.same([d1.allowed, d1.remaining, d2.allowed, d2.remaining, d3.allowed], [true, 1, true, 0, false], `${a}: counts on the Redis clock`)
        // sliding-window: the two units weigh until half the next window has passed (prev * (W - e) <= W)
        t.ok(d3.retryAfterMs > 0 && d3.retryAfterMs <= (a === 'sliding-window' ? 1.5 * hour : hour), `${a}: retryAfter ${d3.retryAfterMs}`)
        t.ok(await client.pttl(key) > 0, `${a}: TTL set`)
        // the state carries the Redis time
        if (a === 'fixed-window' || a === 'sliding-window') {
          const idx = (await readState(client, key))?.[0] ?? NaN
          t.ok(Math.abs(idx - (a === 'fixed-window' ? windowTag(Math.floor(redisNow / hour)) : Math.floor(redisNow / hour))) <= 1, `${a}: window index (fixed-window: its tag) ${idx} from the Redis clock`)
        } else {
          let stamp: number
          if (a === 'sliding-log') {
            stamp = (await zentries(key))[0]?.[1] ?? NaN
          } else {
            const [first, second] = (await readState(client, key) ?? [NaN, NaN]) as [number, number]
            // token-bucket keeps the ms of its last refill; gcra the TAT, two emission intervals (1 h) ahead
            stamp = a === 'token-bucket' ? second : first - hour
          }
          t.ok(Math.abs(stamp - redisNow) < 5000, `${a}: state time ${stamp} near Redis time ${redisNow}`)
        }
        // an injected clock 1 day later sees a restored quota: the stored state is stale
        const later = await call(a, key, p, 2, redisNow + 86_400_000)
        t.ok(later.allowed, `${a}: stale state counts as nothing`)
      }
    })

    await t.test('sliding-log: same-ms members are distinct entries', async (t) => {
      const key = newKey('sl')
      const p = params(5)
      for (let i = 0; i < 3; i++) await call('sliding-log', key, p, 1, B + 1)
      await call('sliding-log', key, p, 2, B + 1)
      t.equal(await client.zcard(key), 5, '5 entries for 5 units in one ms')
      const entries = await zentries(key)
      t.equal(new Set(entries.map(([m]) => m)).size, 5, 'distinct members')
      t.same(entries.map(([, s]) => s), [B + 1, B + 1, B + 1, B + 1, B + 1], 'all scored at the same ms')
    })

    await t.test('sliding-log: members stay unique when the clock goes backwards', async (t) => {
      const key = newKey('sl')
      const p = params(5)
      const t1 = B + 1000
      const t2 = B + 2000
      t.ok((await call('sliding-log', key, p, 1, t1)).allowed)
      t.ok((await call('sliding-log', key, p, 1, t2)).allowed)
      // a rejected request one window later evicts the first entry only
      t.notOk((await call('sliding-log', key, p, 6, t1 + W)).allowed)
      t.equal(await client.zcard(key), 1)
      // back to t2: count 1 gives the same "t2:2" member as the entry already there
      const d = await call('sliding-log', key, p, 1, t2)
      t.same(tuple(d), [true, 3, W, 0])
      t.equal(await client.zcard(key), 2, 'two entries at t2, not merged')
      const memory = memoryAlgorithms['sliding-log'].step([t2], p, 1, t2)
      t.same(tuple(memory.decision), tuple(d), 'memory model agrees')
    })

    await t.test('sliding-log: cost up to 10,000 is added in chunks', async (t) => {
      const key = newKey('sl')
      const p = params(10_000)
      t.same(tuple(await call('sliding-log', key, p, 10_000, B)), [true, 0, W, 0])
      t.equal(await client.zcard(key), 10_000)
      t.same(tuple(await call('sliding-log', key, p, 1, B + 5)), [false, 0, W - 5, W - 5])
      t.same(tuple(await call('sliding-log', key, p, 9_999, B + W)), [true, 1, W, 0])
      t.equal(await client.zcard(key), 9_999)
      t.same(tuple(await call('sliding-log', key, p, 2, B + W)), [false, 1, W, W])
    })

    await t.test('large numbers stay exact (limit 1e8, window 1 day)', async (t) => {
      const p = params(100_000_000, 86_400_000, 100_000_000)
      for (const a of ['token-bucket', 'gcra', 'fixed-window', 'sliding-window'] as const) {
        const key = newKey(a)
        const d1 = await call(a, key, p, 99_999_999, B)
        const d2 = await call(a, key, p, 2, B)
        const d3 = await call(a, key, p, 1, B)
        const m = memoryBackend()
        const m1 = await m.call(a, 'k', p, 99_999_999, B)
        const m2 = await m.call(a, 'k', p, 2, B)
        const m3 = await m.call(a, 'k', p, 1, B)
        t.same([d1, d2, d3].map(tuple), [m1, m2, m3].map(tuple), `${a}: lua and memory agree`)
        t.same([d1.allowed, d1.remaining, d2.allowed, d3.allowed, d3.remaining], [true, 1, false, true, 0], a)
        if (a === 'gcra' || a === 'token-bucket') {
          // one unit left and 1e8 / 86.4e6 units per ms: the second unit takes 0.864 ms
          t.equal(d2.retryAfterMs, 1, `${a}: retryAfter of cost 2`)
        }
      }
    })
  })
})
