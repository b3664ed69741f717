/**
 * The hand-inlined hot paths of scripts/*.lua, held equal to the helpers they
 * stand for. Each inlined region is marked in its fragment:
 *
 *   --@inline countIn: …        the helpers the region inlines
 *   --| <the helpers' form>     the same step written with the helpers
 *   <the inlined code>
 *   --@end
 *
 * The test builds a twin of each production script with every region
 * replaced by its helpers' form, runs both in one EVAL on twin keys with the
 * same arguments, and requires the same replies, the same Redis commands
 * (arguments and TTLs included) and the same stored bytes (DUMP) at every
 * step. So an inlined path can be made faster, never different. Last, the
 * prelude's claim that floor(a / b) and ceil(a / b) are exact integer
 * division below 2^53 is checked against BigInt in Redis's own Lua.
 */
import { test } from 'tap'
import fc from 'fast-check'
import { getRedis, createClient, uniquePrefix } from '../helpers/redis.js'
import { loadScripts } from '../helpers/lua.js'
import { testRun } from '../helpers/app.js'
import { buildBatchScript, FRAGMENT_NAMES, parseFragment, readSources, type FragmentName, type ScriptSources } from '../../scripts/build/assemble.js'
import { frameBatch, type EncodedCall } from '../../lib/store/redis/protocol.js'
import { ALGORITHMS, type AlgorithmName } from '../../lib/store/algorithms.js'
import { MAX_SLIDING_LOG_LIMIT } from '../../lib/limits.js'

const NUM_RUNS = Number(process.env.PROPERTY_RUNS ?? 100)

interface Region { names: string[], helperForm: string[], code: string[] }

/** The marked regions of one fragment's text, and the text with each replaced by its helpers' form. */
function regionsOf (text: string): { regions: Region[], deinlined: string } {
  const regions: Region[] = []
  const out: string[] = []
  let current: Region | undefined
  let inForm = false
  for (const line of text.split('\n')) {
    const trimmed = line.trim()
    if (trimmed.startsWith('--@inline ')) {
      current = { names: trimmed.slice('--@inline '.length).split(':')[0]?.trim().split(/\s+/) ?? [], helperForm: [], code: [] }
      inForm = true
      continue
    }
    if (current === undefined) {
      out.push(line)
      continue
    }
    if (inForm && trimmed.startsWith('--|')) {
      current.helperForm.push(line.replace(/--\| ?/, ''))
      continue
    }
    inForm = false
    if (trimmed === '--@end') {
      regions.push(current)
      out.push(...current.helperForm)
      current = undefined
      continue
    }
    current.code.push(line)
  }
  if (current !== undefined) throw new Error(`an --@inline region of ${current.names.join(' ')} has no --@end`)
  return { regions, deinlined: out.join('\n') }
}

function deinlinedSources (): { sources: ScriptSources, twin: ScriptSources, marked: Map<FragmentName, Region[]> } {
  const sources = readSources()
  const twin = { ...sources }
  const marked = new Map<FragmentName, Region[]>()
  for (const name of FRAGMENT_NAMES) {
    const { regions, deinlined } = regionsOf(sources[name].text)
    if (regions.length === 0) continue
    marked.set(name, regions)
    twin[name] = parseFragment(name, deinlined)
  }
  return { sources, twin, marked }
}

const { sources, twin, marked } = deinlinedSources()

test('every marked inline names helpers its fragment defines and its helpers\' form calls', async (t) => {
  // Each kept because its count showed at least 10 % of its algorithm's script instructions (benchmarks/results/2026-12-06-inlines.md).
  t.same([...marked.keys()].sort(), ['fixed-window', 'sliding-log', 'token-bucket'], 'the three fragments with inlined hot paths are marked')
  for (const [name, regions] of marked) {
    for (const region of regions) {
      t.ok(region.code.some((line) => line.trim() !== ''), `${name}: the region of ${region.names.join(' ')} holds code`)
      t.not(region.code.join('\n').trim(), region.helperForm.join('\n').trim(), `${name}: the region differs from its helpers' form`)
      for (const helper of region.names) {
        const defined = [name, 'reply'].some((where) => new RegExp(`local function ${helper} \\(`).test(sources[where as FragmentName].text))
        t.ok(defined, `${name}: ${helper} is a helper of the fragment (or of reply.lua)`)
        t.match(region.helperForm.join('\n'), new RegExp(`\\b${helper}\\(`), `${name}: the helpers' form calls ${helper}`)
      }
    }
  }
})

/**
 * A recorder of every command a script body sends (all arguments after the
 * key, TTLs as asked), which lengthens TTLs by a minute before they reach
 * Redis: the injected clock, not the real one, decides what is stale.
 */
const RECORDER = `local realRedis = redis
local calls = {}
local function recorded (a)
  local parts = { string.upper(a[1]) }
  for j = 3, #a do parts[#parts + 1] = tostring(a[j]) end
  calls[#calls + 1] = table.concat(parts, ' ')
  local cmd = parts[1]
  for j = 3, #a do
    if cmd == 'SET' and string.upper(tostring(a[j])) == 'PX' then a[j + 1] = tonumber(a[j + 1]) + 60000 end
  end
  if cmd == 'PEXPIRE' then a[3] = tonumber(a[3]) + 60000 end
  return a
end
local redis = setmetatable({
  call = function (...) return realRedis.call(unpack(recorded({ ... }))) end,
  pcall = function (...) return realRedis.pcall(unpack(recorded({ ... }))) end
}, { __index = realRedis })
local function taken ()
  local text = table.concat(calls, ',')
  calls = {}
  return text
end
`

function bodyOf (source: string): string {
  return source.split('\n').slice(1).join('\n')
}

/** Both script bodies as functions `production` and `twin` of one EVAL, with the recorder, then `driver`. */
function twinHarness (production: string, deinlined: string, driver: string): string {
  return `#!lua
${RECORDER}
local function production (KEYS, ARGV)
${bodyOf(production)}
end
local function twin (KEYS, ARGV)
${bodyOf(deinlined)}
end
${driver}`
}

/** Production on KEYS[1], the twin on KEYS[2], one step per 7 ARGV (the standalone script's). */
function algorithmHarness (production: string, deinlined: string): string {
  return twinHarness(production, deinlined, `local out = {}
for i = 1, #ARGV, 7 do
  local args = { ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6] }
  local a = production({ KEYS[1] }, args)
  local ca = taken()
  local b = twin({ KEYS[2] }, args)
  local cb = taken()
  local same = realRedis.call('DUMP', KEYS[1]) == realRedis.call('DUMP', KEYS[2])
  out[#out + 1] = { cjson.encode(a), ca, cjson.encode(b), cb, same and 1 or 0 }
end
return out
`)
}

interface Step { cost: number, dt: number, mode: number, back: number }

const step: fc.Arbitrary<Step> = fc.record({
  // a cost is at least 1 (policy/rules.ts isCost): the inlined paths rely on it (gcra: 0 < nd)
  cost: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 12 })),
  dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 }), fc.integer({ min: -50, max: 0 })),
  mode: fc.oneof({ arbitrary: fc.constant(0), weight: 6 }, { arbitrary: fc.integer({ min: 1, max: 3 }), weight: 2 }),
  back: fc.integer({ min: 0, max: 800 })
})

function stepArgs (algorithm: AlgorithmName, limit: number, windowMs: number, burst: number, steps: readonly Step[]): string[] {
  const args: string[] = []
  let now = 1_900_000_000_000
  for (const { cost, dt, mode, back } of steps) {
    now += dt
    const units = algorithm === 'sliding-log' ? Math.min(cost, MAX_SLIDING_LOG_LIMIT) : cost
    args.push(String(limit), String(windowMs), String(burst), String(units), String(now), String(mode), String(now - back))
  }
  return args
}

test('each algorithm\'s inlined path does what its helpers\' form does: replies, commands and stored bytes', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  t.teardown(() => redis.quit())
  const production = loadScripts(sources)
  const deinlined = loadScripts(twin)
  for (const algorithm of ALGORITHMS.filter((name) => marked.has(name))) {
    const harness = algorithmHarness(production[algorithm].source, deinlined[algorithm].source)
    t.not(production[algorithm].source, deinlined[algorithm].source, `${algorithm}: the twin differs from production`)
    let steps = 0
    await fc.assert(fc.asyncProperty(
      fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 2000 }), fc.integer({ min: 0, max: 10 }), fc.array(step, { minLength: 1, maxLength: 30 }),
      async (limit, windowMs, extraBurst, list) => {
        const prefix = uniquePrefix('inl')
        const keys = [`${prefix}:{k}:a`, `${prefix}:{k}:b`]
        const rows = await redis.eval(harness, 2, ...keys, ...stepArgs(algorithm, limit, windowMs, limit + extraBurst, list)) as Array<[string, string, string, string, number]>
        await redis.del(...keys)
        for (const [a, ca, b, cb, same] of rows) {
          steps++
          if (a !== b || ca !== cb || same !== 1) {
            throw new Error(`${algorithm} limit ${limit} window ${windowMs}: production ${a} [${ca}] vs helpers ${b} [${cb}], same state: ${same}`)
          }
        }
      }
    ), { numRuns: NUM_RUNS })
    t.ok(steps > NUM_RUNS, `${algorithm}: ${steps} steps answered and stored alike`)
  }
})

test('the harness sees a difference: a helpers\' form one unit off is caught', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  t.teardown(() => redis.quit())
  const wrong = { ...twin, gcra: parseFragment('gcra', twin.gcra.text.replace('return 1, left(nd, cap, w), ceil', 'return 1, left(nd, cap, w) + 1, ceil')) }
  t.not(wrong.gcra.text, twin.gcra.text, 'the mutation applies')
  const harness = algorithmHarness(loadScripts(sources).gcra.source, loadScripts(wrong).gcra.source)
  const prefix = uniquePrefix('inm')
  const rows = await redis.eval(harness, 2, `${prefix}:{k}:a`, `${prefix}:{k}:b`, ...stepArgs('gcra', 5, 1000, 5, [{ cost: 1, dt: 0, mode: 0, back: 0 }])) as Array<[string, string, string, string, number]>
  await redis.del(`${prefix}:{k}:a`, `${prefix}:{k}:b`)
  t.not(rows[0]?.[0], rows[0]?.[2], 'the replies differ')
})

/** The batch script twice: production on the first half of KEYS, the twin on the second, the same ARGV. */
function batchHarness (production: string, deinlined: string): string {
  return twinHarness(production, deinlined, `local n = #KEYS / 2
local a, b = {}, {}
for i = 1, n do a[i], b[i] = KEYS[i], KEYS[n + i] end
local ra = production(a, ARGV)
local ca = taken()
local rb = twin(b, ARGV)
local cb = taken()
local same = 1
for i = 1, n do
  if realRedis.call('DUMP', a[i]) ~= realRedis.call('DUMP', b[i]) then same = 0 end
end
return { cjson.encode(ra), ca, cjson.encode(rb), cb, same }
`)
}

test('the batch loop\'s inlined emit answers as emit does: straight decisions, packed and not', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  t.teardown(() => redis.quit())
  const production = buildBatchScript(sources).source
  const deinlined = buildBatchScript(twin).source
  t.not(production, deinlined, 'the twin differs from production')
  const harness = batchHarness(production, deinlined)
  const run = fc.record({
    algorithm: fc.constantFrom(...ALGORITHMS),
    limit: fc.integer({ min: 1, max: 10 }),
    // windows past 2^26 ms (18.6 h) give resets that do not pack
    windowMs: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.integer({ min: 2 ** 26 - 10, max: 2 * 86_400_000 })),
    cost: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 12 }))
  })
  let calls = 0
  await fc.assert(fc.asyncProperty(fc.array(fc.array(run, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 8 }), async (batches) => {
    const prefix = uniquePrefix('inb')
    let now = 1_900_000_000_000
    for (const list of batches) {
      now += 37
      const encoded: EncodedCall[] = list.map((block, i) => ({
        kind: 'decide',
        blocks: [{ run: testRun({ ...block, shadow: false }), key: `${prefix}:{k}:${i}`, cost: block.cost }],
        keys: [`${prefix}:{k}:${i}`],
        mode: ''
      }))
      const args = frameBatch(encoded, now)
      const count = Number(args[0])
      const keys = args.slice(1, 1 + count).map(String)
      const twinKeys = keys.map((key) => key + ':twin')
      const [ra, ca, rb, cb, same] = await redis.eval(harness, 2 * count, ...keys, ...twinKeys, ...args.slice(1 + count)) as [string, string, string, string, number]
      calls++
      if (ra !== rb || ca !== cb || same !== 1) throw new Error(`batch ${JSON.stringify(list)}: production ${ra} [${ca}] vs emit ${rb} [${cb}], same state: ${same}`)
      await redis.del(...keys, ...twinKeys)
    }
  }), { numRuns: NUM_RUNS })
  t.ok(calls >= NUM_RUNS, `${calls} batch calls answered alike`)
})

test('the prelude\'s integer division: floor(a / b) and ceil(a / b) are exact below 2^53 (in Redis\'s Lua)', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  t.teardown(() => redis.quit())
  const script = `local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = string.format('%d', math.floor(a / b))
  out[#out + 1] = string.format('%d', math.ceil(a / b))
end
return out`
  const big = fc.bigInt({ min: -(2n ** 53n) + 1n, max: 2n ** 53n - 1n })
  const divisor = fc.oneof(fc.bigInt({ min: 1n, max: 1000n }), fc.bigInt({ min: 1n, max: 2n ** 53n - 1n }))
  let checked = 0
  await fc.assert(fc.asyncProperty(fc.array(fc.tuple(big, divisor), { minLength: 1, maxLength: 50 }), async (pairs) => {
    const answers = await redis.eval(script, 0, ...pairs.flatMap(([a, b]) => [String(a), String(b)])) as string[]
    pairs.forEach(([a, b], i) => {
      const floor = a >= 0n ? a / b : -((-a + b - 1n) / b)
      const ceil = a >= 0n ? (a + b - 1n) / b : -((-a) / b)
      checked++
      if (answers[2 * i] !== String(floor) || answers[2 * i + 1] !== String(ceil)) {
        throw new Error(`${a} / ${b}: Lua ${answers[2 * i]}, ${answers[2 * i + 1]}; exact ${floor}, ${ceil}`)
      }
    })
  }), { numRuns: NUM_RUNS })
  t.ok(checked >= NUM_RUNS, `${checked} divisions exact`)
})
