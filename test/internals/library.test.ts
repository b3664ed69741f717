/**
 * The Redis Functions library (lib/store/redis/library.ts) against the
 * scripts it is assembled from (scripts.ts): random batches and lone
 * decisions, framed as the store frames them, sent to twin keys by EVALSHA
 * and by FCALL in the same step, must get the same replies, and leave the
 * same state. Then the library's versioning: a changed source is a new
 * library with new function names, loaded beside the old one, and a second
 * load of the same library is recognised as already there.
 */
import { test } from 'tap'
import fc from 'fast-check'
import { ALGORITHMS } from '../../lib/store/algorithms.js'
import { adjustCall, decideCall, frameBatch, splitBatchReply, type EncodedCall } from '../../lib/store/redis/protocol.js'
import { buildBatchScript, readSources } from '../../scripts/build/assemble.js'
import { buildLibrary } from '../../scripts/build/library.js'
import { isFunctionMissing, isLibraryLoaded } from '../../lib/store/redis/client/port.js'
import { penaltyKey, type BlockRun } from '../../lib/store/port.js'
import type { Redis } from 'ioredis'
import { privateRedis } from '../helpers/redis.js'
import { storeRequest, testRun } from '../helpers/app.js'

const NUM_RUNS = Number(process.env.PROPERTY_RUNS ?? 60)
const noop = (): void => {}

const run = fc.record({
  algorithm: fc.constantFrom(...ALGORITHMS),
  limit: fc.integer({ min: 1, max: 5 }),
  windowMs: fc.integer({ min: 5000, max: 20_000 }),
  shadow: fc.boolean(),
  penalty: fc.option(fc.record({ after: fc.integer({ min: 1, max: 3 }), forMs: fc.integer({ min: 5000, max: 30_000 }) }), { nil: undefined, freq: 2 })
}).map(({ penalty, ...block }): BlockRun => testRun({
  ...block,
  penalty: penalty === undefined ? undefined : { after: penalty.after, forMs: penalty.forMs, backoff: 1, maxMs: penalty.forMs, arg: `${penalty.after}:${penalty.forMs}:1:${penalty.forMs}` }
}))

/** A call on key numbers (0…3): a decision or peek of 1-2 blocks, or a signed adjustment of one. */
const call = fc.oneof(
  fc.record({ kind: fc.constant('decide' as const), blocks: fc.array(fc.tuple(fc.nat(3), fc.integer({ min: 1, max: 3 })), { minLength: 1, maxLength: 2 }), peek: fc.boolean() }),
  fc.record({ kind: fc.constant('adjust' as const), key: fc.nat(3), units: fc.integer({ min: -2, max: 2 }).filter((n) => n !== 0), chargedAgoMs: fc.option(fc.nat(3000), { nil: undefined }) })
)
/** One charge of one block alone: what the lone functions take (when its block has no penalty). */
const straight = fc.record({ kind: fc.constant('decide' as const), blocks: fc.tuple(fc.tuple(fc.nat(3), fc.integer({ min: 1, max: 3 }))), peek: fc.constant(false) })
const step = fc.record({ advanceMs: fc.nat(4000), calls: fc.oneof(fc.array(call, { minLength: 1, maxLength: 4 }), fc.tuple(straight).map((one): Call[] => one)) })

/** A key's type and value, and its PTTL (-2 absent, -1 none). */
async function stateOf (admin: Redis, key: string): Promise<{ state: string, pttl: number }> {
  const type = await admin.type(key)
  const value = type === 'string'
    ? (await admin.getBuffer(key))?.toString('hex')
    : type === 'zset' ? await admin.zrange(key, '0', '-1', 'WITHSCORES') : type === 'none' ? null : type
  return { state: JSON.stringify([type, value]), pttl: await admin.pttl(key) }
}

/** The same state, and the same expiry to within the few ms between the twins' writes by the real clock. */
async function sameState (admin: Redis, a: string, b: string): Promise<boolean> {
  const [x, y] = [await stateOf(admin, a), await stateOf(admin, b)]
  return x.state === y.state && (x.pttl < 0 || y.pttl < 0 ? x.pttl === y.pttl : Math.abs(x.pttl - y.pttl) <= 250)
}

type Call = typeof call extends fc.Arbitrary<infer T> ? T : never

/** The store's encoding of a generated call at `now`, on keys under `side`; each generated block on key n uses route run n. */
function encode (c: Call, runs: readonly BlockRun[], side: string, now: number): EncodedCall {
  const key = (n: number): string => `${side}:{k}:${n}`
  if (c.kind === 'adjust') return adjustCall([{ kind: 'units', run: runs[c.key] as BlockRun, key: key(c.key), units: c.units, chargedAt: c.chargedAgoMs === undefined ? undefined : now - c.chargedAgoMs }], noop, noop)
  const blocks = c.blocks.filter(([n], i) => c.blocks.findIndex(([m]) => m === n) === i)
  return decideCall(storeRequest(blocks.map(([n]) => runs[n] as BlockRun), blocks.map(([n]) => key(n)), blocks.map(([, cost]) => cost)), c.peek ? 'peek' : 'charge', noop, noop)
}

test('FCALL of the library answers as EVALSHA of the script, step by step', async (t) => {
  const { admin } = await privateRedis(t)
  const library = buildLibrary()
  const batch = buildBatchScript()
  await admin.call('FUNCTION', 'LOAD', library.source)
  await admin.script('LOAD', batch.source)
  let scenario = 0
  await fc.assert(fc.asyncProperty(fc.array(run, { minLength: 4, maxLength: 4 }), fc.array(step, { minLength: 1, maxLength: 12 }), async (runs, steps) => {
    const a = `fx${++scenario}:a`
    const b = `fx${scenario}:b`
    let now = 1_900_000_000_000
    for (const { advanceMs, calls } of steps) {
      now += advanceMs
      const viaScript = calls.map((c) => encode(c, runs, a, now))
      const viaFunction = calls.map((c) => encode(c, runs, b, now))
      const scripted = await admin.evalsha(batch.sha, ...frameBatch(viaScript, now) as [number])
      const called = await admin.call('FCALL', library.batch, ...frameBatch(viaFunction, now).map(String))
      if (JSON.stringify(scripted) !== JSON.stringify(called)) return false
    }
    for (let n = 0; n < 4; n++) {
      for (const key of [`{k}:${n}`, penaltyKey(`{k}:${n}`)]) {
        if (!await sameState(admin, `${a}:${key}`, `${b}:${key}`)) return false
      }
    }
    return true
  }), { numRuns: NUM_RUNS })
  t.pass(`${scenario} scenarios: every reply and every stored state the same`)
})

test('a changed source is a new library with new function names, loaded beside the old; the same library twice is recognised', async (t) => {
  const { admin } = await privateRedis(t)
  const current = buildLibrary()
  const sources = readSources()
  const changed = buildLibrary({ ...sources, batch: { ...sources.batch, text: `${sources.batch.text}\n-- a later version\n` } })
  t.not(changed.name, current.name)
  t.not(changed.batch, current.batch)
  t.match(current.name, /^frrl_[0-9a-f]{12}$/)
  t.equal(current.batch, `${current.name}_batch`, 'the function name carries the version')
  await admin.call('FUNCTION', 'LOAD', current.source)
  await admin.call('FUNCTION', 'LOAD', changed.source)
  const again: unknown = await admin.call('FUNCTION', 'LOAD', current.source).then(() => undefined, (error: unknown) => error)
  t.ok(isLibraryLoaded(again), `a second load of the same version is "already exists" (${String(again)})`)
  const args = ['1', 'v:{k}:0', '1900000000000', '1', `${ALGORITHMS.indexOf('fixed-window') + 1}|5|60000|5||`, '', '1']
  t.same(await admin.call('FCALL', current.batch, ...args), await admin.call('FCALL', changed.batch, ...args.map((arg) => arg.replace('v:', 'w:'))), 'both versions answer')
  const missing: unknown = await admin.call('FCALL', 'frrl_000000000000_batch', '0').then(() => undefined, (error: unknown) => error)
  t.ok(isFunctionMissing(missing), `an unknown version's function is "Function not found" (${String(missing)})`)
})

test('splitBatchReply reads the compact reply: five values per block (an admitted one sent as two integers), an error text fails its call alone, any other layout fails every call', async (t) => {
  const { admin } = await privateRedis(t)
  const library = buildLibrary()
  await admin.call('FUNCTION', 'LOAD', library.source)
  const run = testRun({ algorithm: 'fixed-window', limit: 1, windowMs: 60_000, shadow: false })
  const calls = ['s:{k}:1', 's:{k}:1', 's:{k}:bad'].map((key) => decideCall(storeRequest([run], [key], [1]), 'charge', noop, noop))
  await admin.hset('s:{k}:bad', 'not', 'a state')
  const now = 1_900_000_000_000
  const reply = await admin.call('FCALL', library.batch, ...frameBatch(calls, now).map(String))
  const { at, results: [admitted, refused, failed] } = splitBatchReply(calls, reply)
  t.equal(at, now, 'the call\'s now comes first: the time its charges were made at')
  t.same(admitted, [1, 0, 20_000, 0, 20_000], 'admitted: allowed, remaining, resetMs, retryAfterMs 0 (not sent), nextMs (resetMs and nextMs sent packed in one integer)')
  t.same(refused, [0, 0, 20_000, 20_000, 20_000], 'refused: its retryAfterMs sent')
  t.ok(failed instanceof Error && (failed as { code?: string }).code === 'FST_RRL_SCRIPT_ERROR' && /WRONGTYPE/.test(failed.message), `the bad key's decision alone failed (${String(failed)})`)
  // 7 = remaining 1, allowed 3: resetMs and nextMs packed in the next value, which must be a whole number >= 0.
  // Packed (two integers) and three-integer admitted blocks side by side: a 2-day window's reset is beyond 2^26 ms.
  const dayRun = testRun({ algorithm: 'fixed-window', limit: 5, windowMs: 2 * 86_400_000, shadow: false })
  const mixed = [run, dayRun, run].map((r, i) => decideCall(storeRequest([r], [`s:{k}:mixed${i}`], [1]), 'charge', noop, noop))
  const toEnd = 2 * 86_400_000 - now % (2 * 86_400_000)
  t.ok(toEnd >= 2 ** 26, `the day window's reset (${toEnd} ms) is beyond the packed form`)
  t.same(splitBatchReply(mixed, await admin.call('FCALL', library.batch, ...frameBatch(mixed, now).map(String))).results, [
    [1, 0, 20_000, 0, 20_000],
    [1, 4, toEnd, 0, toEnd],
    [1, 0, 20_000, 0, 20_000]
  ], 'each block read in its own form, in order')
  for (const source of ['return { 1, 7, -1, 7, 1 }', 'return { 1, 7 }', "return { 1, 7, 'x' }", 'return { 1, 6, 1, 2 }', "return { 1, 5, 'x', 1 }", 'return { 1, 5, 1 }', "return { 'x', 7, 1 }", 'return { 7, 1 }']) {
    const other = await admin.eval(source, 0)
    const split = splitBatchReply(calls.slice(0, 2), other).results
    t.ok(split.every((r) => r instanceof Error && (r as { code?: string }).code === 'FST_RRL_BAD_SCRIPT_REPLY'), `${source}: every call fails as a bad reply`)
  }
})
