/**
 * Property test: random arrival sequences (non-decreasing injected times,
 * costs 1..3, random parameters within the documented bounds) go through the
 * Lua script on a real Redis and through the TypeScript model; every step
 * must give the same four numbers. Also checked at every step:
 *   - the model fed stale (never expired) state decides exactly like the model
 *     fed `undefined` once the state's ttl has passed (absent == expired);
 *   - the TTL the script sets equals the model's ttlMs;
 *   - a rejected request writes nothing;
 *   - retryAfterMs is exact: on a copy of the state, the same request is
 *     rejected at now + retryAfterMs - 1 and admitted at now + retryAfterMs
 *     (on both sides);
 * Some steps (not for sliding-log) charge without deciding, as settle and
 * adjust do, so later steps run on overdrawn states.
 * And over each whole sequence the algorithm's bound: fixed and sliding
 * window never admit more than the limit in an aligned window, sliding-log
 * never more than the limit in any trailing window, token-bucket and gcra
 * never more than burst + floor(dt * limit / W) over any interval dt.
 *
 * One sequence is one EVAL (ARGV: the spec, the capacity, the spec's tail: '' or a delay's, then the steps): a wrapper runs the unmodified production batch
 * script (buildBatchScript, minus its shebang, as a Lua function) once per
 * step, one decision of one block by the batch's wire format, and copies the
 * key for the probes. The wrapper records each TTL the script sets and lengthens it by
 * a minute before it reaches Redis (Redis 7.0 expires keys by the real clock,
 * even inside a script), so the Lua side never loses state to real time while
 * the injected clock jumps around; the model side drops state when its ttl
 * passes on the injected clock.
 */
import { test } from 'tap'
import assert from 'node:assert/strict'
import fc from 'fast-check'
import { getRedis, createClient, uniquePrefix } from '../helpers/redis.js'
import { memoryAlgorithms } from '../../lib/kinds/window/memory/algorithms.js'
import { buildBatchScript } from '../../scripts/build/assemble.js'
import { specText } from '../../lib/store/redis/protocol.js'
import { READ_BLOCK_LUA } from '../helpers/lua.js'
import { shownRemaining, shownRetryMs } from '../../lib/decide/decision-math.js'
import { ALGORITHMS, maxLimitFor, type AlgorithmName, type BlockParams, type RawDecision } from '../../lib/store/algorithms.js'
import { DAY_MS, MAX_LIMIT, MAX_SLIDING_LOG_LIMIT, MAX_WINDOW_MS } from '../../lib/limits.js'

const NUM_RUNS = Number(process.env.PROPERTY_RUNS ?? 150)
const MAX_STEPS = 40

function harness (source: string): string {
  const body = source.split('\n').slice(1).join('\n')
  return `#!lua
local realRedis = redis
local calls = {}
-- each command, as the step's entry: INCRBY with its amount (it keeps the key's TTL)
local function recorded (a)
  local cmd = string.upper(a[1])
  local entry = cmd
  -- The TTL the script asked for is recorded as is, then lengthened by a
  -- minute before it reaches Redis: Redis 7.0 expires keys by the real clock
  -- even inside one script, so a 1 ms TTL could vanish between two steps on a
  -- loaded machine while the injected clock has not moved. Expiry only ever
  -- drops state that no longer matters (the test checks stale == absent).
  if cmd == 'SET' then
    for j = 3, #a do
      if string.upper(tostring(a[j])) == 'PX' then
        entry = 'SET PX ' .. string.format('%d', a[j + 1])
        a[j + 1] = tonumber(a[j + 1]) + 60000
      elseif string.upper(tostring(a[j])) == 'KEEPTTL' then
        entry = 'SET KEEPTTL'
      end
    end
  elseif cmd == 'PEXPIRE' then
    entry = 'PEXPIRE ' .. string.format('%d', a[3])
    a[3] = tonumber(a[3]) + 60000
  elseif cmd == 'INCRBY' then
    entry = cmd .. ' ' .. string.format('%d', tonumber(a[3]))
  end
  calls[#calls + 1] = entry
  return a
end
local redis = setmetatable({
  call = function (...) return realRedis.call(unpack(recorded({ ... }))) end,
  pcall = function (...) return realRedis.pcall(unpack(recorded({ ... }))) end
}, { __index = realRedis })
local function batch (KEYS, ARGV)
${body}
end
local spec, tail = ARGV[1], ARGV[3]
-- One decision of the production batch script (batch.lua's layout): '1' (cost 1), or '-2', spec 1, cost;
-- its reply (now, then the block's two to four values) read back into allowed, remaining, reset, retry, next.
${READ_BLOCK_LUA}
local function algorithm (key, cost, now)
  local head
  if cost == '1' then head = { '1' } else head = { '-2', '1', cost } end
  local r = batch({ key }, { now, '1', spec, tail, unpack(head) })
  local _, a, remaining, reset, retry, nextMs = readBlock(r, 1)
  return { a, remaining, reset, retry, nextMs }
end
-- A peek: the general decision form with mode '1' (decideAll's dry pass alone), read back alike.
local function peek (key, cost, now)
  local r = batch({ key }, { now, '1', spec, tail, '0', '1', '1', '1', cost })
  local _, a, remaining, reset, retry, nextMs = readBlock(r, 1)
  return { a, remaining, reset, retry, nextMs }
end
-- A charge without deciding: an adjustment entry of positive units (the algorithm's mode 3), answering 1.
local function forcedCharge (key, cost, now)
  local r = batch({ key }, { now, '1', spec, tail, '-1', '1', 'u', '1', cost, '' })
  return { r[2] }
end
local capacity = tonumber(ARGV[2])
local out = {}
for i = 4, #ARGV, 2 do
  local cost, now = ARGV[i], ARGV[i + 1]
  calls = {}
  -- a negative cost is a charge without deciding (mode 3: settle, adjust) of that many units
  local forced = tonumber(cost) < 0
  if forced then cost = tostring(-tonumber(cost)) end
  local r
  -- a peek first (it writes nothing, so the step's calls are the charge's alone)
  local p = { 0, 0, 0, 0, 0 }
  if not forced then p = peek(KEYS[1], cost, now) end
  calls = {}
  if forced then r = forcedCharge(KEYS[1], cost, now) else r = algorithm(KEYS[1], cost, now) end
  local row = { r[1], r[2] or 0, r[3] or 0, r[4] or 0, r[5] or 0, table.concat(calls, ','), p }
  if not forced and r[1] == 0 and tonumber(cost) <= capacity then
    for _, delta in ipairs({ -1, 0 }) do
      realRedis.call('DEL', KEYS[2])
      realRedis.call('COPY', KEYS[1], KEYS[2])
      local p = algorithm(KEYS[2], cost, string.format('%d', tonumber(now) + r[4] + delta))
      row[#row + 1] = { p[1], p[2], p[3], p[4], p[5] }
    end
  end
  out[#out + 1] = row
end
realRedis.call('DEL', KEYS[1], KEYS[2])
return out
`
}

const harnessed = harness(buildBatchScript().source)

/** `force`: a charge without deciding (an overdraft may follow), as settle and adjust send. */
interface Step { now: number, cost: number, force?: boolean }
interface Scenario { params: BlockParams, steps: Step[] }

const smallOrBig = (small: number, mid: number, max: number): fc.Arbitrary<number> => fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: small }) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: mid }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max }) },
  { weight: 1, arbitrary: fc.constant(max) }
)

/** The limit bound with a delay: 2 × burst × window + limit × delay below 2^53 (policy/shape.ts maxLimitOf). */
const delayedMax = (windowMs: number, delayMs: number): number => Math.floor(Number.MAX_SAFE_INTEGER / (2 * windowMs + delayMs))

function scenarios (algorithm: AlgorithmName, delayed: boolean): fc.Arbitrary<Scenario> {
  const maxLimit = algorithm === 'sliding-log' ? MAX_SLIDING_LOG_LIMIT : MAX_LIMIT
  const hasBurst = algorithm === 'token-bucket' || algorithm === 'gcra'
  return fc.record({
    limit: smallOrBig(6, 100, maxLimit),
    windowMs: fc.oneof(
      { weight: 3, arbitrary: fc.integer({ min: 1, max: 20 }) },
      { weight: 3, arbitrary: fc.integer({ min: 1, max: 10_000 }) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: MAX_WINDOW_MS }) },
      { weight: 1, arbitrary: fc.constant(DAY_MS) },
      { weight: 1, arbitrary: fc.integer({ min: DAY_MS, max: MAX_WINDOW_MS }) },
      { weight: 1, arbitrary: fc.constant(MAX_WINDOW_MS) }
    ),
    burst: smallOrBig(6, 100, MAX_LIMIT),
    delayMs: fc.oneof(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 60_000 }), fc.constant(60_000)),
    start: fc.integer({ min: 0, max: 4_000_000_000_000 }),
    moves: fc.array(fc.record({
      kind: fc.integer({ min: 0, max: 4 }),
      gap: fc.nat(),
      cost: fc.integer({ min: 1, max: 3 }),
      force: fc.integer({ min: 0, max: 5 })
    }), { minLength: 1, maxLength: MAX_STEPS, size: 'max' })
  }).map(({ limit: drawn, windowMs, burst: drawnBurst, delayMs, start, moves }) => {
    // Every limit the validators accept at this window (max(limit, burst) × window below 2^53 where it scales).
    const max = delayed ? Math.min(maxLimitFor(algorithm, windowMs), delayedMax(windowMs, delayMs)) : maxLimitFor(algorithm, windowMs)
    const limit = Math.min(drawn, max)
    const burst = Math.min(drawnBurst, max)
    const params: BlockParams = { limit, windowMs, burst: hasBurst ? burst : limit }
    if (delayed) Object.assign(params, { delayMs, hold: true })
    // forced charges where a settle may be declared: not sliding-log, and an overdraft that stays
    // exact; sliding-window's rule is exact for any overdraft (adjust reaches every block)
    const forcible = algorithm === 'sliding-window' || (algorithm !== 'sliding-log' && 2 * Math.max(params.limit, params.burst) * windowMs <= Number.MAX_SAFE_INTEGER)
    // gaps on the scales that matter: same ms, a few ms, one emission interval, a window, several windows
    const interval = Math.ceil(windowMs / limit) + 2
    let now = start
    const steps = moves.map(({ kind, gap, cost, force }): Step => {
      now += [0, gap % 3, gap % interval, gap % (windowMs + 2), gap % (3 * windowMs + 1)][kind] as number
      return forcible && force === 0 ? { now, cost: cost * 2, force: true } : { now, cost }
    })
    return { params, steps }
  })
}

type Lua5 = [number, number, number, number, number]
/** A step's decision, its calls, the peek before it, then a refusal's two retry probes. */
type Row = [number, number, number, number, number, string, Lua5, ...Lua5[]]

function fromLua (r: Lua5 | Row): RawDecision {
  for (let i = 0; i < 5; i++) assert.ok(Number.isInteger(r[i]), `integer reply ${JSON.stringify(r)}`)
  assert.ok(r[0] === 0 || r[0] === 1 || r[0] === 4, 'allowed is 0, 1 or 4 (a reserved turn)')
  // a reserved turn: nothing remains after it; its remaining on the wire is what was free before it
  if (r[0] === 4) return { allowed: true, remaining: 0, resetMs: r[2], retryAfterMs: 0, nextMs: r[4], waitMs: r[3], freeNow: r[1] }
  return { allowed: r[0] === 1, remaining: r[1], resetMs: r[2], retryAfterMs: r[3], nextMs: r[4] }
}

const freeze = <S>(s: S): S => (typeof s === 'object' && s !== null ? Object.freeze(s) : s)

interface Tally { steps: number, rejected: number, probed: number, nextProbed: number, expired: number, forced: number, peekedTurns: number, peekedFree: number }

/** Admitted now, not at a reserved turn. */
const atOnce = (x: RawDecision): boolean => x.allowed && x.waitMs === undefined

/**
 * A peek where the request would be held for a turn (a delay) counts the
 * turns reserved before it: its `remaining` is the most units admitted at
 * once now, and its retry the first ms the request is admitted at once.
 */
function checkPeekAtTurn (model: typeof memoryAlgorithms[AlgorithmName], params: BlockParams, d: RawDecision, cost: number, now: number, live: (at: number) => unknown, at: string): void {
  const remaining = shownRemaining(d, cost, 'not-charged')
  const retryMs = shownRetryMs(d, 'not-charged')
  assert.ok(remaining < cost, `${at}: a peek at a turn shows fewer than its cost left (${remaining})`)
  if (remaining > 0) assert.ok(atOnce(model.step(freeze(live(now)), params, remaining, now).decision), `${at}: the ${remaining} shown are admitted at once`)
  assert.equal(atOnce(model.step(freeze(live(now)), params, remaining + 1, now).decision), false, `${at}: one more than the ${remaining} shown is not`)
  assert.equal(retryMs, d.waitMs, `${at}: a peek's retry at a turn is its wait`)
  assert.equal(atOnce(model.step(freeze(live(now + retryMs - 1)), params, cost, now + retryMs - 1).decision), false, `${at}: not admitted at once 1 ms before the retry`)
  assert.ok(atOnce(model.step(freeze(live(now + retryMs)), params, cost, now + retryMs).decision), `${at}: admitted at once at the retry (${retryMs} ms)`)
}

function checkBounds (algorithm: AlgorithmName, { limit, windowMs: w, burst }: BlockParams, admitted: Step[]): void {
  if (algorithm === 'fixed-window' || algorithm === 'sliding-window') {
    const perWindow = new Map<number, number>()
    for (const { now, cost } of admitted) {
      const idx = Math.floor(now / w)
      perWindow.set(idx, (perWindow.get(idx) ?? 0) + cost)
    }
    for (const [idx, sum] of perWindow) assert.ok(sum <= limit, `${sum} admitted in window ${idx}, limit ${limit}`)
  } else if (algorithm === 'sliding-log') {
    for (const { now: end } of admitted) {
      let sum = 0
      for (const { now, cost } of admitted) if (now > end - w && now <= end) sum += cost
      assert.ok(sum <= limit, `${sum} admitted in the window ending at ${end}, limit ${limit}`)
    }
  } else {
    for (let i = 0; i < admitted.length; i++) {
      let sum = 0
      for (let j = i; j < admitted.length; j++) {
        sum += (admitted[j] as Step).cost
        const dt = BigInt((admitted[j] as Step).now - (admitted[i] as Step).now)
        const bound = BigInt(burst) + dt * BigInt(limit) / BigInt(w)
        assert.ok(BigInt(sum) <= bound, `${sum} admitted over ${dt} ms, bound ${bound}`)
      }
    }
  }
}

/** INCRBY keeps the key's TTL, as SET KEEPTTL does. */
const isCounter = (call: string): boolean => /^INCRBY /.test(call)

/**
 * What a refused step wrote: SET, ZADD or PEXPIRE, or a counter's change not
 * undone by the opposite change of the same amount (fixed-window's INCRBY,
 * then INCRBY of the opposite amount).
 */
function netWrites (calls: string[]): string[] {
  const counters = calls.filter(isCounter)
  const undone = counters.length === 2 && Number(counters[0]?.split(' ')[1]) === -Number(counters[1]?.split(' ')[1])
  return calls.filter((c) => /^(SET|ZADD|PEXPIRE)\b/.test(c) || (isCounter(c) && !undone))
}

/**
 * The write's TTL is the model's: set (SET PX, PEXPIRE), or kept (SET KEEPTTL,
 * or a counter's INCRBY) only where the key already expires exactly when the
 * model's state does.
 */
function checkTtl (calls: string[], ttlMs: number, now: number, expiresAt: number | undefined, at: string): void {
  const ttls = calls.filter((c) => /^(SET PX|PEXPIRE) /.test(c)).map((c) => Number(c.split(' ').pop()))
  if (calls.includes('SET KEEPTTL') || (ttls.length === 0 && calls.some(isCounter))) {
    assert.equal(ttls.length, 0, `${at}: KEEPTTL sets no TTL of its own (${calls.join(',')})`)
    assert.equal(expiresAt, now + ttlMs, `${at}: the kept TTL ends where the model's does`)
  } else {
    assert.deepEqual(ttls, [ttlMs], `${at}: the script's TTL equals the model's (${calls.join(',')})`)
  }
  assert.ok(ttlMs > 0, `${at}: positive TTL`)
}

/**
 * A charge without deciding (mode 3): the script answers 1 and writes one
 * state with the model's TTL; the stale copy of the model is charged alike.
 */
function forcedStep (model: typeof memoryAlgorithms[AlgorithmName], params: BlockParams, cost: number, now: number, row: Row, current: unknown, stale: unknown, expiresAt: number | undefined, at: string): { state: unknown, ttlMs: number, staleState: unknown } {
  assert.equal(row[0], 1, `${at}: a forced charge always applies`)
  const charged = model.charge?.(freeze(current), params, cost, now)
  assert.ok(charged !== undefined && charged.state !== undefined, `${at}: the model charges`)
  checkTtl(row[5] === '' ? [] : row[5].split(','), charged.ttlMs, now, expiresAt, at)
  return { state: charged.state, ttlMs: charged.ttlMs, staleState: model.charge?.(freeze(stale), params, cost, now)?.state }
}

test('Lua scripts and the memory model agree on random sequences', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(async () => { await client.quit() })
  const prefix = uniquePrefix('prop')
  let run = 0

  const variants: Array<[AlgorithmName, boolean]> = [...ALGORITHMS.map((algorithm): [AlgorithmName, boolean] => [algorithm, false]), ['gcra', true], ['token-bucket', true]]
  for (const [algorithm, delayed] of variants) {
    await t.test(delayed ? `${algorithm} with delay` : algorithm, async (t) => {
      const model = memoryAlgorithms[algorithm]
      const tally: Tally = { steps: 0, rejected: 0, probed: 0, nextProbed: 0, expired: 0, forced: 0, peekedTurns: 0, peekedFree: 0 }

      const property = fc.asyncProperty(scenarios(algorithm, delayed), async ({ params, steps }) => {
        const { limit, windowMs: w, burst } = params
        const capacity = algorithm === 'token-bucket' || algorithm === 'gcra' ? burst : limit
        const tag = `${prefix}:{${algorithm}:${run++}}`
        const args: Array<number | string> = [specText(ALGORITHMS.indexOf(algorithm) + 1, params, false, undefined), capacity, delayed ? `d${params.delayMs ?? 0}` : '']
        for (const { cost, now, force } of steps) args.push(force === true ? -cost : cost, now)
        const rows = await client.eval(harnessed, 2, `${tag}:main`, `${tag}:probe`, ...args) as Row[]
        assert.equal(rows.length, steps.length)

        // the memory store: state dropped once its ttl has passed on the injected clock
        let stored: { state: unknown, expiresAt: number } | undefined
        // the same model with state that never expires: stale must equal absent
        let stale: unknown
        const live = (at: number): unknown => stored !== undefined && at < stored.expiresAt ? stored.state : undefined
        const admitted: Step[] = []

        steps.forEach(({ now, cost, force }, i) => {
          const row = rows[i] as Row
          const at = `step ${i} (cost ${cost}${force === true ? ', forced' : ''} at +${now - (steps[0] as Step).now})`
          if (force === true) {
            const forced = forcedStep(model, params, cost, now, row, live(now), stale, live(now) === undefined ? undefined : stored?.expiresAt, at)
            tally.forced++
            stored = forced.ttlMs > 0 ? { state: forced.state, expiresAt: now + forced.ttlMs } : undefined
            stale = forced.staleState
            return
          }
          const lua = fromLua(row)
          const current = live(now)
          if (current === undefined && stored !== undefined) tally.expired++
          const m = model.step(freeze(current), params, cost, now)
          assert.deepEqual(lua, m.decision, `${at}: lua and model decide alike`)
          assert.deepEqual(fromLua(row[6]), m.decision, `${at}: a peek decides as the request does, over the wire`)
          if (m.decision.waitMs !== undefined) {
            tally.peekedTurns++
            if ((m.decision.freeNow ?? 0) > 0) tally.peekedFree++
            checkPeekAtTurn(model, params, m.decision, cost, now, live, at)
          }
          const s = model.step(freeze(stale), params, cost, now)
          assert.deepEqual(s.decision, m.decision, `${at}: stale state decides like absent state`)

          const d = m.decision
          tally.steps++
          assert.ok(d.remaining >= 0 && d.resetMs >= 0 && d.retryAfterMs >= 0, `${at}: no negative numbers`)
          assert.equal(d.retryAfterMs === 0, d.allowed, `${at}: retryAfterMs is 0 exactly when admitted`)
          if (cost > capacity) assert.deepEqual([d.allowed, d.retryAfterMs], [false, w], `${at}: cost above capacity`)

          // what the script wrote, and the TTL it set
          const calls = row[5] === '' ? [] : row[5].split(',')
          const wrote = netWrites(calls).length > 0
          assert.ok(!calls.includes('TIME'), `${at}: no TIME with an injected clock`)
          if (d.allowed) {
            assert.ok(m.state !== undefined, `${at}: the model stores a state when admitting`)
            checkTtl(calls, m.ttlMs, now, current === undefined ? undefined : stored?.expiresAt, at)
            admitted.push({ now, cost })
          } else {
            tally.rejected++
            assert.ok(!wrote, `${at}: a rejected request writes nothing (${row[5]})`)
            if (algorithm !== 'sliding-log') assert.equal(m.state, undefined, `${at}: the model keeps its state`)
          }
          // sliding-log reads its oldest entry for nextMs (one ZRANGE more than before nextMs existed);
          // fixed-window undoes a refused INCRBY with another
          const maxCalls = algorithm === 'sliding-log' ? 5 : (d.allowed || algorithm === 'fixed-window' ? 2 : 1)
          assert.ok(calls.length <= maxCalls, `${at}: ${calls.length} redis.call (${row[5]})`)

          if (m.state !== undefined) {
            stored = m.ttlMs > 0 ? { state: m.state, expiresAt: now + m.ttlMs } : undefined
          }
          if (s.state !== undefined) stale = s.state

          // retryAfterMs is exact, on copies of the state
          if (!d.allowed && cost <= capacity) {
            tally.probed++
            const probes = row.slice(7) as Lua5[]
            assert.equal(probes.length, 2, `${at}: lua probed`)
            const early = model.step(freeze(live(now + d.retryAfterMs - 1)), params, cost, now + d.retryAfterMs - 1)
            const due = model.step(freeze(live(now + d.retryAfterMs)), params, cost, now + d.retryAfterMs)
            assert.deepEqual(fromLua(probes[0] as Lua5), early.decision, `${at}: probe at retryAfter - 1 agrees`)
            assert.deepEqual(fromLua(probes[1] as Lua5), due.decision, `${at}: probe at retryAfter agrees`)
            assert.equal(early.decision.allowed, false, `${at}: still rejected 1 ms before retryAfterMs=${d.retryAfterMs}`)
            assert.equal(due.decision.allowed, true, `${at}: admitted at retryAfterMs=${d.retryAfterMs}`)
          }
          // nextMs (the RateLimit field's t): remaining + 1 units fit exactly nextMs from now, not 1 ms earlier
          if (d.remaining + 1 > capacity || d.penalized === true) {
            assert.equal(d.nextMs, 0, `${at}: nextMs is 0 when the quota is full`)
          } else {
            tally.nextProbed++
            assert.ok(d.nextMs > 0, `${at}: nextMs > 0 below a full quota`)
            // (with a delay, a refusal's retry is when it would be held: earlier than one more unit)
            assert.ok(d.allowed || cost > capacity || delayed || d.nextMs <= d.retryAfterMs, `${at}: one more unit comes no later than the retry`)
            const more = d.remaining + 1
            const before = model.step(freeze(live(now + d.nextMs - 1)), params, more, now + d.nextMs - 1)
            const then = model.step(freeze(live(now + d.nextMs)), params, more, now + d.nextMs)
            // admitted now: a reserved turn is not yet the unit
            assert.equal(atOnce(before.decision), false, `${at}: ${more} units not admitted at once 1 ms before nextMs=${d.nextMs}`)
            assert.equal(atOnce(then.decision), true, `${at}: ${more} units admitted at nextMs=${d.nextMs}`)
          }
        })
        if (!delayed) checkBounds(algorithm, params, admitted)
      })

      await fc.assert(property, { numRuns: NUM_RUNS })
      t.pass(`${NUM_RUNS} sequences, ${tally.steps} steps, ${tally.rejected} rejected, ${tally.probed} retryAfter probes, ${tally.nextProbed} nextMs probes, ${tally.expired} expired states`)
      t.ok(tally.rejected > NUM_RUNS, 'the sequences reject often enough to matter')
      t.ok(tally.probed > NUM_RUNS / 2, 'retryAfter was probed')
      t.ok(tally.nextProbed > NUM_RUNS / 2, 'nextMs was probed')
      t.ok(tally.expired > 0, 'some states expired on the injected clock')
      if (algorithm !== 'sliding-log') t.ok(tally.forced > NUM_RUNS / 2, `${tally.forced} charges without deciding (overdrafts among them)`)
      if (delayed) t.ok(tally.peekedTurns > NUM_RUNS / 2, `${tally.peekedTurns} peeks at a reserved turn checked against the model`)
      if (delayed) t.ok(tally.peekedFree > 0, `${tally.peekedFree} of them with units free before the turn (a cost above them: the reply's four-integer form)`)
    })
  }
})

/**
 * The sliding-window rule itself, in BigInt, as the oracle: a request of `cost` at `t` is admitted
 * iff cur + cost <= limit and prev × (W − e) <= (limit − cur − cost) × W (e: ms into t's window).
 * Every number of a decision follows from it by search, not by formula: remaining is the most units
 * it admits now, retryAfterMs the first ms it admits the request, nextMs the first it admits one unit
 * more than remaining, resetMs the first it admits the whole limit.
 */
interface Counts { idx: bigint, cur: number, prev: number }

const windowOf = (t: number, w: number): bigint => BigInt(t) / BigInt(w)

function countsAt (state: Counts | undefined, t: number, w: number): [number, number] {
  const idx = windowOf(t, w)
  if (state === undefined) return [0, 0]
  if (state.idx === idx) return [state.cur, state.prev]
  return state.idx === idx - 1n ? [0, state.cur] : [0, 0]
}

function ruleAdmits (state: Counts | undefined, limit: number, w: number, units: number, t: number): boolean {
  const [cur, prev] = countsAt(state, t, w)
  const e = BigInt(t) - windowOf(t, w) * BigInt(w)
  return cur + units <= limit && BigInt(prev) * (BigInt(w) - e) <= BigInt(limit - cur - units) * BigInt(w)
}

/** The first ms from `from` at which the rule admits `units` (within a window it admits from some ms on; two windows on, everything is zero). */
function firstAdmitted (state: Counts | undefined, limit: number, w: number, units: number, from: number): number {
  const first = Number(windowOf(from, w)) * w
  for (let j = 0; j < 3; j++) {
    let lo = j === 0 ? from : first + j * w
    let hi = first + (j + 1) * w - 1
    if (!ruleAdmits(state, limit, w, units, hi)) continue
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2)
      if (ruleAdmits(state, limit, w, units, mid)) hi = mid
      else lo = mid + 1
    }
    return lo
  }
  throw new Error(`${units} units never admitted`)
}

/** The most units the rule admits at `t` (0 when not even none fits: an overdraft). */
function mostAdmitted (state: Counts | undefined, limit: number, w: number, t: number): number {
  if (!ruleAdmits(state, limit, w, 0, t)) return 0
  let lo = 0
  let hi = limit
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2)
    if (ruleAdmits(state, limit, w, mid, t)) lo = mid
    else hi = mid - 1
  }
  return lo
}

function ruleStep (state: Counts | undefined, limit: number, w: number, cost: number, t: number): { decision: RawDecision, state: Counts | undefined } {
  const allowed = ruleAdmits(state, limit, w, cost, t)
  const [cur, prev] = countsAt(state, t, w)
  const after = allowed ? { idx: windowOf(t, w), cur: cur + cost, prev } : state
  const remaining = mostAdmitted(after, limit, w, t)
  const wait = (units: number): number => firstAdmitted(after, limit, w, units, t) - t
  const retryAfterMs = allowed ? 0 : cost > limit ? w : wait(cost)
  return { decision: { allowed, remaining, resetMs: wait(limit), retryAfterMs, nextMs: remaining >= limit ? 0 : wait(remaining + 1) }, state: after }
}

/** A charge without deciding (settle, adjust): to the current window, kept up to twice the limit. */
function ruleCharge (state: Counts | undefined, limit: number, w: number, cost: number, t: number): Counts {
  const [cur, prev] = countsAt(state, t, w)
  return { idx: windowOf(t, w), cur: Math.min(2 * limit, cur + cost), prev }
}

const asCounts = (state: unknown): Counts | undefined => {
  if (state === undefined) return undefined
  const { idx, cur, prev } = state as { idx: number, cur: number, prev: number }
  return { idx: BigInt(idx), cur, prev }
}

test('sliding-window: the Lua and the model answer what the exact rule answers, at window boundaries', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(async () => { await client.quit() })
  const prefix = uniquePrefix('swrule')
  const model = memoryAlgorithms['sliding-window']
  const tally = { steps: 0, boundary: 0, refused: 0, probed: 0, overdrawn: 0, widest: 0, wideOverdrawn: 0 }
  let run = 0

  const arbitrary = fc.record({
    // limits 1–5, and now and then the largest the window takes (limit × W just below 2^53 for long windows)
    limit: fc.oneof({ weight: 9, arbitrary: fc.integer({ min: 1, max: 5 }) }, { weight: 1, arbitrary: fc.constant(0) }),
    windowMs: fc.oneof(
      fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 10_000 }), fc.constant(10_000), fc.constant(60_000),
      fc.constant(DAY_MS), fc.integer({ min: DAY_MS, max: MAX_WINDOW_MS }), fc.constant(MAX_WINDOW_MS)
    ),
    first: fc.integer({ min: 1, max: 100_000 }),
    moves: fc.array(fc.record({
      kind: fc.integer({ min: 0, max: 3 }),
      delta: fc.integer({ min: -3, max: 3 }),
      gap: fc.nat(),
      cost: fc.nat(),
      force: fc.integer({ min: 0, max: 5 })
    }), { minLength: 1, maxLength: MAX_STEPS, size: 'max' })
  }).map(({ limit: drawn, windowMs: w, first, moves }) => {
    const limit = drawn === 0 ? maxLimitFor('sliding-window', w) : drawn
    // start just before a boundary; then to the next boundary ± 3 ms, a few ms on, the window's last ms, or anywhere within two windows
    let now = first * w - 2
    const steps = moves.map(({ kind, delta, gap, cost, force }): Step => {
      const next = (Math.floor(now / w) + 1) * w
      const to = [next + delta, now + gap % 4, next - 1 - gap % 3, now + gap % (2 * w + 1)][kind] as number
      now = Math.max(now, to)
      // costs 1 to limit + 1 (above the capacity now and then); for the largest limits, any size
      const units = 1 + cost % (limit + 1)
      return force === 0 ? { now, cost: units, force: true } : { now, cost: units }
    })
    return { limit, w, steps }
  })

  // Always run: an overdraft of twice the largest limit, so prev × W is beyond 2^53 in the next
  // window, decided at its start, half way, and its last ms (the rule admits again near its end).
  const overdrawn = (w: number): { limit: number, w: number, steps: Step[] } => {
    const limit = maxLimitFor('sliding-window', w)
    const start = 60 * w
    const next = start + w
    return {
      limit,
      w,
      steps: [
        { now: start + 5, cost: limit, force: true }, { now: start + 6, cost: limit, force: true },
        { now: next, cost: 1 }, { now: next + Math.floor(w / 2), cost: 1 }, { now: next + w - 1, cost: 1 }, { now: next + w - 1, cost: limit }
      ]
    }
  }
  const examples = [[overdrawn(MAX_WINDOW_MS)], [overdrawn(DAY_MS)], [overdrawn(MAX_WINDOW_MS - 7)]] as Array<[{ limit: number, w: number, steps: Step[] }]>

  await fc.assert(fc.asyncProperty(arbitrary, async ({ limit, w, steps }) => {
    const tag = `${prefix}:{${run++}}`
    const args: Array<number | string> = [specText(ALGORITHMS.indexOf('sliding-window') + 1, { limit, windowMs: w, burst: limit }, false, undefined), limit, '']
    for (const { cost, now, force } of steps) args.push(force === true ? -cost : cost, now)
    const rows = await client.eval(harnessed, 2, `${tag}:main`, `${tag}:probe`, ...args) as Row[]
    const params = { limit, windowMs: w, burst: limit }
    let state: Counts | undefined
    steps.forEach(({ now, cost, force }, i) => {
      const row = rows[i] as Row
      const at = `limit ${limit}, W ${w}, step ${i} (cost ${cost}${force === true ? ', forced' : ''} at ${now % w} ms into window ${Math.floor(now / w)})`
      const [, prev] = countsAt(state, now, w)
      if (prev > limit) tally.overdrawn++
      if (BigInt(prev) * BigInt(w) > 2n ** 53n) tally.wideOverdrawn++
      if (force === true) {
        assert.equal(row[0], 1, `${at}: a forced charge always applies`)
        const charged = model.charge?.(freeze(state === undefined ? undefined : { ...state, idx: Number(state.idx) }), params, cost, now)
        state = ruleCharge(state, limit, w, cost, now)
        assert.deepEqual(asCounts(charged?.state), state, `${at}: the model charges as the rule does`)
        return
      }
      const expected = ruleStep(state, limit, w, cost, now)
      const m = model.step(freeze(state === undefined ? undefined : { ...state, idx: Number(state.idx) }), params, cost, now)
      assert.deepEqual(fromLua(row), expected.decision, `${at}: the Lua answers the rule's numbers`)
      assert.deepEqual(m.decision, expected.decision, `${at}: the model answers the rule's numbers`)
      tally.steps++
      const e = now % w
      if (e < 3 || e >= w - 3) tally.boundary++
      if (limit * w > 2 ** 52) tally.widest++
      if (!expected.decision.allowed) {
        tally.refused++
        if (cost <= limit) {
          // the Lua itself, on a copy of the state: refused 1 ms before retryAfterMs, admitted at it
          tally.probed++
          const [early, due] = row.slice(7) as Lua5[]
          const retry = now + expected.decision.retryAfterMs
          assert.equal(fromLua(early as Lua5).allowed, false, `${at}: refused at retryAfterMs - 1`)
          assert.equal(fromLua(due as Lua5).allowed, true, `${at}: admitted at retryAfterMs`)
          assert.deepEqual(fromLua(early as Lua5), ruleStep(state, limit, w, cost, retry - 1).decision, `${at}: the probe before is the rule's`)
          assert.deepEqual(fromLua(due as Lua5), ruleStep(state, limit, w, cost, retry).decision, `${at}: the probe at it is the rule's`)
        }
      }
      state = expected.state
    })
  }), { numRuns: NUM_RUNS, examples })
  t.pass(`${NUM_RUNS} histories, ${tally.steps} decisions (${tally.boundary} within 3 ms of a boundary, ${tally.widest} with limit × W above 2^52), ${tally.refused} refused, ${tally.probed} probed, ${tally.overdrawn} on an overdrawn previous window, ${tally.wideOverdrawn} with prev × W above 2^53`)
  t.ok(tally.boundary > NUM_RUNS, 'decisions at window boundaries')
  t.ok(tally.probed > NUM_RUNS, 'retryAfterMs probed on the Lua')
  t.ok(tally.overdrawn > NUM_RUNS / 10, 'overdrawn previous windows (up to twice the limit)')
  t.ok(tally.widest > NUM_RUNS / 10, 'limit × W near 2^53')
  t.ok(tally.wideOverdrawn >= 12, 'previous windows overdrawn beyond what a double holds exactly when multiplied by W')
})
