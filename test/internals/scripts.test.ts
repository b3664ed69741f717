/**
 * Checks on the Lua files themselves: keys reached only through KEYS[1], a TTL
 * on every write, the clock read in one place (statically); on the scripts
 * assembled from them, the Redis 7 shebang and a SHA equal to what Redis
 * computes; and, on a real Redis, which commands each script actually calls
 * on each path (a wrapper records every redis.call while running the
 * unmodified assembled script).
 */
import { test } from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { getRedis, createClient, readState, uniquePrefix } from '../helpers/redis.js'
import { ALGORITHMS, type AlgorithmName } from '../../lib/store/algorithms.js'
import { buildBatchScript, parseFragment, readSources } from '../../scripts/build/assemble.js'
import { luacheckConfig } from '../helpers/luacheckrc.js'
import { buildMultiScript, loadScripts } from '../helpers/lua.js'
import { LIBRARY_FILE, SCRIPT_FILE } from '../../lib/store/redis/lua.js'

const dir = new URL('../../scripts/', import.meta.url)
const files = readSources()
const sources = Object.fromEntries(ALGORITHMS.map((name) => [name, files[name].text])) as Record<AlgorithmName, string>
const scripts = loadScripts(files)
/** The drivers and the prelude every script starts with, beside the algorithm files. */
const SHARED = ['batch.lua', 'batch-specs.lua', 'batch-loop.lua', 'clock.lua', 'concurrency.lua', 'multi.lua', 'paths.lua', 'penalty.lua', 'prelude.lua', 'reply.lua', 'spec.lua']

/** Commands the scripts may use, by what they do to the key. */
const READS = new Set(['GET', 'MGET', 'ZCARD', 'ZRANGE', 'ZRANGEBYSCORE', 'ZREVRANGEBYSCORE', 'ZCOUNT', 'ZSCORE', 'HGET', 'HMGET', 'PTTL', 'EXISTS'])
const REMOVALS = new Set(['ZREMRANGEBYSCORE', 'ZREMRANGEBYRANK', 'ZREM', 'DEL', 'UNLINK', 'HDEL'])
const EXPIRES = new Set(['PEXPIRE', 'EXPIRE', 'PEXPIREAT'])
const WRITES = new Set(['SET', 'ZADD', 'HSET', 'HMSET', 'HINCRBY', 'INCR', 'INCRBY', 'DECR', 'DECRBY', 'APPEND', 'SETRANGE', 'SADD', 'LPUSH', 'RPUSH', 'ZINCRBY'])
/** Writes that keep an existing key's TTL (and leave a key they create without one). */
const COUNTERS = new Set(['INCR', 'INCRBY', 'DECR', 'DECRBY'])
const NO_KEY = new Set(['TIME'])
// The reply's packed pair (reply.lua): an admitted block's resetMs * PACK + nextMs, both below PACK.
const PACK = 2 ** 26
const packed = (resetMs: number, nextMs: number): number => resetMs * PACK + nextMs

/** Removes `--` comments (the scripts keep no `--` inside string literals). */
function stripComments (src: string): string {
  return src.split('\n').map((line) => line.replace(/--.*$/, '')).join('\n')
}

interface LuaCall { index: number, args: string[] }

/** Every redis.call / redis.pcall (the prelude's locals `call` and `pcallRedis`) with its top-level argument expressions. */
function redisCalls (src: string): LuaCall[] {
  const out: LuaCall[] = []
  const re = /(?:\bredis\.p?call|(?<![.\w])(?:call|pcallRedis))\s*\(/g
  let m: RegExpExecArray | null
  while ((m = re.exec(src)) !== null) {
    const args: string[] = []
    let cur = ''
    let depth = 1
    let quote: string | null = null
    for (let i = m.index + m[0].length; i < src.length; i++) {
      const c = src[i] as string
      if (quote !== null) {
        cur += c
        if (c === '\\') cur += src[++i] ?? ''
        else if (c === quote) quote = null
        continue
      }
      if (c === '"' || c === "'") quote = c
      else if (c === '(' || c === '{' || c === '[') depth++
      else if (c === ')' || c === '}' || c === ']') {
        depth--
        if (depth === 0) break
      } else if (c === ',' && depth === 1) {
        args.push(cur.trim())
        cur = ''
        continue
      }
      cur += c
    }
    args.push(cur.trim())
    out.push({ index: m.index, args })
  }
  return out
}

function literal (expr: string | undefined): string | undefined {
  const m = /^(['"])([A-Za-z]+)\1$/.exec(expr ?? '')
  return m?.[2]?.toUpperCase()
}

test('the scripts directory holds one file per algorithm, the drivers and the prelude, and the two generated files', async (t) => {
  const found = readdirSync(dir).filter((f) => f.endsWith('.lua')).sort()
  t.same(found, [...ALGORITHMS.map((a) => `${a}.lua`), ...SHARED, LIBRARY_FILE, SCRIPT_FILE].sort())
})

/** Where the top-level helper a position sits in is called, when it sits in one (`local function name (`). */
function helperCalls (src: string, index: number): number[] | undefined {
  const entry = src.search(/^return function \(key,/m)
  if (entry < 0 || index > entry) return undefined
  const helpers = [...src.matchAll(/^local function (\w+) \(/gm)].filter((m) => m.index < index)
  const name = helpers.at(-1)?.[1]
  if (name === undefined) return undefined
  return [...src.matchAll(new RegExp(`(?<!function )\\b${name}\\s*\\(`, 'g'))].map((m) => m.index)
}

/** Whether an expiry on `key` follows `from` before the next return. */
function expiryFollows (src: string, calls: LuaCall[], from: number, key: string | undefined): boolean {
  const nextReturn = src.slice(from).search(/\breturn\b/)
  const end = nextReturn < 0 ? src.length : from + nextReturn
  return calls.some((c) => c.index > from && c.index < end && EXPIRES.has(literal(c.args[0]) ?? '') && c.args[1] === key)
}

for (const name of ALGORITHMS) {
  test(`${name}.lua: static checks`, async (t) => {
    const raw = sources[name]
    const firstLine = scripts[name].source.split('\n')[0] as string
    t.match(firstLine, /^#!lua(\s|$)/, 'the assembled script starts with the Redis 7 shebang')
    t.notMatch(firstLine, /flags=/, 'no script flags needed')
    t.notOk(raw.includes('allow-cross-slot-keys'), 'never allow-cross-slot-keys')

    const src = stripComments(raw)
    // the one key is the function's first parameter, `key` (the driver passes KEYS[k]); numbers, never ARGV
    t.match(src, /return function \(key, limit, w, \w+, cost, now, mode\b/, 'the algorithm is a function of (key, limit, w, burst, cost, now, mode)')
    t.notMatch(src, /\bKEYS\b/, 'no KEYS reference: the key is the parameter')
    t.notMatch(src, /\bARGV\b/, 'no ARGV reference: the driver passes numbers')
    t.equal([...src.matchAll(/(^|[^\w.])key\s*=(?!=)/gm)].length, 0, 'the key parameter is never reassigned')
    const isKey = (expr: string | undefined): boolean => expr === 'key'

    const calls = redisCalls(src)
    t.ok(calls.length > 0, 'found redis.call sites')
    let writes = 0
    for (const call of calls) {
      const cmd = literal(call.args[0])
      t.ok(cmd !== undefined, `command name is a string literal: ${call.args[0]}`)
      if (cmd === undefined) continue
      const known = NO_KEY.has(cmd) || READS.has(cmd) || REMOVALS.has(cmd) || EXPIRES.has(cmd) || WRITES.has(cmd)
      t.ok(known, `${cmd} is a command this test knows how to classify`)
      if (NO_KEY.has(cmd)) continue
      t.ok(isKey(call.args[1]), `${cmd}: the key argument ${call.args[1]} is the key parameter`)
      for (const arg of call.args.slice(2)) {
        t.notOk(/KEYS/.test(arg), `${cmd}: no key in a value position`)
      }
      if (cmd === 'SET') {
        writes++
        const px = call.args.findIndex((a) => literal(a) === 'PX')
        const keep = call.args.findIndex((a) => literal(a) === 'KEEPTTL')
        t.ok((px > 1 && call.args[px + 1] !== undefined) !== (keep > 1), 'SET carries PX <ms> or KEEPTTL, not both')
        // KEEPTTL only beside a SET PX of the same state: the first write in a window sets the TTL the others keep
        if (keep > 1) t.ok(calls.some((other) => literal(other.args[0]) === 'SET' && other.args.some((a) => literal(a) === 'PX') && other.args[2] === call.args[2]), 'KEEPTTL beside a SET PX of the same state')
      } else if (COUNTERS.has(cmd)) {
        writes++
        // like KEEPTTL: a counter keeps the TTL the window's first write (a SET PX of the key) set; the
        // runtime checks (below, algorithms-property.test.ts) hold that a created key always gets it
        t.ok(calls.some((other) => literal(other.args[0]) === 'SET' && other.args[1] === call.args[1] && other.args.some((a) => literal(a) === 'PX')), `${cmd} beside a SET PX of ${call.args[1]}`)
      } else if (WRITES.has(cmd)) {
        writes++
        // a PEXPIRE on the same key must follow before the script can return
        // (after every call of the helper the write sits in, when it sits in one)
        const sites = helperCalls(src, call.index) ?? [call.index]
        t.ok(sites.length > 0 && sites.every((site) => expiryFollows(src, calls, site, call.args[1])), `${cmd} is followed by an expiry on ${call.args[1]} before returning`)
      }
    }
    t.ok(writes > 0, 'the script writes its state')
    // the clock is the prelude's: TIME only when ARGV[5] is empty
    t.equal(calls.filter((c) => literal(c.args[0]) === 'TIME').length, 0, 'no TIME call of its own')
    t.notOk(/\btostring\s*\(/.test(src), 'numbers are formatted with string.format, not tostring (%.14g would round)')
  })
}

test('clock.lua: the one TIME call site, only when now is empty', async (t) => {
  const src = stripComments(files.clock.text)
  const timeCalls = redisCalls(src).filter((c) => literal(c.args[0]) === 'TIME')
  t.equal(timeCalls.length, 1, 'one TIME call site')
  const guard = src.search(/if\s+arg\s*==\s*nil\s+or\s+arg\s*==\s*''\s+then/)
  const branchEnd = src.indexOf('end', guard)
  t.ok(guard >= 0 && (timeCalls[0]?.index ?? -1) > guard && (timeCalls[0]?.index ?? Infinity) < branchEnd, 'TIME sits inside the empty-now branch')
  t.notOk(/\btostring\s*\(/.test(src), 'numbers are formatted with string.format, not tostring (%.14g would round)')
  t.equal(redisCalls(src).length, 1, 'no other redis.call')
  t.match(scripts['fixed-window'].source, /\bnowMs\(ARGV\[5\]\)/, 'a standalone algorithm script\'s now is ARGV[5]')
  t.match(buildBatchScript().source, /local now = nowMs\(ARGV\[1\]\)/, 'the batch script\'s now is ARGV[1], read once')
})

/**
 * Wraps a script body in a function and runs it with a `redis` whose `call`
 * and `pcall` record each command before passing it to the real one. The body is the
 * assembled script minus its shebang line, unchanged.
 */
function recordingHarness (source: string): string {
  const body = source.split('\n').slice(1).join('\n')
  return `#!lua
local realRedis = redis
local calls = {}
local function record (a)
  calls[#calls + 1] = string.upper(a[1])
  if string.upper(a[1]) == 'SET' then
    for j = 3, #a do
      if string.upper(tostring(a[j])) == 'PX' then calls[#calls] = 'SET PX ' .. string.format('%d', a[j + 1]) end
      if string.upper(tostring(a[j])) == 'KEEPTTL' then calls[#calls] = 'SET KEEPTTL' end
    end
  elseif string.upper(a[1]) == 'PEXPIRE' then
    calls[#calls] = 'PEXPIRE ' .. string.format('%d', a[3])
  end
end
local redis = setmetatable({
  call = function (...)
    record({ ... })
    return realRedis.call(...)
  end,
  pcall = function (...)
    record({ ... })
    return realRedis.pcall(...)
  end
}, { __index = realRedis })
local function algorithm (KEYS, ARGV)
${body}
end
local r = algorithm({ KEYS[1] }, ARGV)
return { r[1], r[2], r[3], r[4], r[5], table.concat(calls, ',') }
`
}

test('redis.call per path, on a real Redis', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(async () => { await client.quit() })
  const prefix = uniquePrefix('scr')
  const W = 60_000
  const B = Math.ceil(1_700_000_000_000 / W) * W
  const keys: string[] = []
  t.teardown(async () => { if (keys.length > 0) await client.del(...keys) })

  const run = async (name: AlgorithmName, key: string, args: Array<number | string>): Promise<{ reply: number[], calls: string[] }> => {
    const out = await client.eval(recordingHarness(scripts[name].source), 1, key, ...args) as unknown[]
    return { reply: out.slice(0, 5) as number[], calls: String(out[5]).split(',') }
  }

  // fixed-window (format 3): the window's first charge INCRBY + SET PX, then one INCRBY that keeps the TTL;
  // a refusal's INCRBY is undone by INCRBY -cost; a peek (mode 1) and a cost above the limit only read.
  {
    const key = `${prefix}:{fixed-window}`
    keys.push(key, `${key}:clock`)
    const first = await run('fixed-window', key, [10, W, 1, 1, B + 1000])
    t.same(first.calls, ['INCRBY', `SET PX ${W - 1000}`], 'fixed-window: the window\'s first charge = INCRBY + SET PX')
    t.same(first.reply, [1, 9, W - 1000, 0, W - 1000])
    const again = await run('fixed-window', key, [10, W, 1, 1, B + 2000])
    t.same(again.calls, ['INCRBY'], 'fixed-window: admitted again in the window = one INCRBY')
    t.same(again.reply, [1, 8, W - 2000, 0, W - 2000])
    const pttl = await client.pttl(key)
    t.ok(pttl > W - 2000 - 5000 && pttl <= W - 1000, `fixed-window: the kept TTL ${pttl} is the window's`)
    const reject = await run('fixed-window', key, [2, W, 1, 1, B + 3000])
    t.same(reject.calls, ['INCRBY', 'INCRBY'], 'fixed-window: rejected = INCRBY undone by INCRBY -1')
    t.same(reject.reply, [0, 0, W - 3000, W - 3000, W - 3000])
    t.same(await readState(client, key), [B / W % 8_388_593, 2], 'fixed-window: a refusal leaves the count as it was')
    const peek = await run('fixed-window', key, [10, W, 1, 1, B + 3000, '1'])
    t.same(peek.calls, ['GET'], 'fixed-window: a peek = GET only')
    t.same(peek.reply, [1, 7, W - 3000, 0, W - 3000])
    const tooBig = await run('fixed-window', key, [10, W, 1, 11, B + 3000])
    t.same(tooBig.calls, ['GET'], 'fixed-window: a cost above the limit = GET only')
    const clock = await run('fixed-window', `${key}:clock`, [10, W, 1, 1, ''])
    t.equal(clock.calls[0], 'TIME', 'fixed-window: TIME first when now is empty')
    t.equal(clock.calls[1], 'INCRBY')
    t.match(clock.calls[2], /^SET PX \d+$/)
    t.equal(clock.calls.length, 3, 'fixed-window: 3 calls on the TIME path')
  }

  const simple: Array<[AlgorithmName, number]> = [['sliding-window', 2 * W - 1000], ['token-bucket', 6000], ['gcra', 6000]]
  for (const [name, ttl] of simple) {
    const key = `${prefix}:{${name}}`
    keys.push(key)
    // limit 10 / W, burst 1
    const admit = await run(name, key, [10, W, 1, 1, B + 1000])
    t.same(admit.calls, ['GET', `SET PX ${ttl}`], `${name}: admitted = GET + SET PX (2 calls)`)
    t.equal(admit.reply[0], 1)
    if (name === 'sliding-window') {
      // in the stored window the TTL is kept: the window's end has not moved
      const again = await run(name, key, [10, W, 1, 1, B + 2000])
      t.same(again.calls, ['GET', 'SET KEEPTTL'], `${name}: admitted again in the window = GET + SET KEEPTTL`)
      const pttl = await client.pttl(key)
      t.ok(pttl > 0 && pttl <= ttl, `${name}: the kept TTL ${pttl} is the window's`)
    }
    const reject = await run(name, key, [1, W, 1, 1, B + 1000])
    t.same(reject.calls, ['GET'], `${name}: rejected = GET only (1 call)`)
    t.equal(reject.reply[0], 0)
    const clock = await run(name, `${key}:clock`, [10, W, 1, 1, ''])
    keys.push(`${key}:clock`)
    t.equal(clock.calls[0], 'TIME', `${name}: TIME first when now is empty`)
    t.same(clock.calls.slice(1, 2), ['GET'])
    t.match(clock.calls[2], /^SET PX \d+$/)
    t.equal(clock.calls.length, 3, `${name}: 3 calls on the TIME path`)
  }

  const key = `${prefix}:{sliding-log}`
  keys.push(key, `${key}:clock`)
  const admit = await run('sliding-log', key, [3, W, 3, 1, B])
  t.same(admit.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZADD', `PEXPIRE ${W}`], 'sliding-log: admitted = 4 calls')
  await run('sliding-log', key, [3, W, 3, 1, B + 1])
  await run('sliding-log', key, [3, W, 3, 1, B + 2])
  const reject = await run('sliding-log', key, [3, W, 3, 1, B + 3])
  t.same(reject.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZRANGE'], 'sliding-log: rejected = 3 calls (retry, reset and next from one ZRANGE)')
  t.same(reject.reply, [0, 0, W - 1, W - 3, W - 3])
  const tooBig = await run('sliding-log', key, [3, W, 3, 4, B + 3])
  t.same(tooBig.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZRANGE'], 'sliding-log: cost > limit = 3 calls (reset only)')
  const clock = await run('sliding-log', `${key}:clock`, [3, W, 3, 1, ''])
  t.same(clock.calls, ['TIME', 'ZREMRANGEBYSCORE', 'ZCARD', 'ZADD', `PEXPIRE ${W}`], 'sliding-log: TIME path')
  const big = await run('sliding-log', `${key}:big`, [10_000, W, 10_000, 2500, B])
  keys.push(`${key}:big`)
  t.same(big.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZADD', 'ZADD', 'ZADD', `PEXPIRE ${W}`], 'sliding-log: cost 2500 = 3 ZADD chunks')
  t.equal(await client.zcard(`${key}:big`), 2500)
  // a refusal behind a long log (16 entries or more after the next one to free) reads each entry it needs alone
  const long = `${key}:long`
  keys.push(long)
  for (let i = 0; i < 20; i++) await run('sliding-log', long, [20, W, 20, 1, B + i])
  const behind = await run('sliding-log', long, [20, W, 20, 1, B + 20])
  t.same(behind.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZRANGE', 'ZRANGE', 'ZRANGE'], 'sliding-log: a long log\'s refusal = one ZRANGE per entry read')
  t.same(behind.reply, [0, 0, W - 1, W - 20, W - 20], 'sliding-log: reset from the newest entry, retry and next from the oldest')
  // entries are read by member ("<ms>:<seq>"), not WITHSCORES; one of another form by its score
  const foreign = `${key}:foreign`
  keys.push(foreign)
  await client.zadd(foreign, B - 5, 'not-ours')
  const odd = await run('sliding-log', foreign, [3, W, 3, 1, B])
  t.same(odd.calls, ['ZREMRANGEBYSCORE', 'ZCARD', 'ZRANGE', 'ZSCORE', 'ZADD', `PEXPIRE ${W}`], 'sliding-log: a foreign member costs one ZSCORE')
  t.same(odd.reply, [1, 1, W, 0, W - 5], 'sliding-log: the next unit frees when the foreign entry expires')
  const full = await run('sliding-log', foreign, [3, W, 3, 2, B + 1])
  t.same(full.reply, [0, 1, W - 1, W - 6, W - 6], 'sliding-log: a refusal reads the foreign entry by its score too')
})

test('the scripts load and run by SHA, the SHA computed at startup equal to what SCRIPT LOAD returns', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(async () => { await client.quit() })
  const prefix = uniquePrefix('sha')
  for (const name of ALGORITHMS) {
    const sha = await client.script('LOAD', scripts[name].source) as string
    t.equal(sha, scripts[name].sha, `${name}: SCRIPT LOAD`)
    const key = `${prefix}:{${name}}`
    const reply = await client.evalsha(sha, 1, key, 5, 1000, 5, 1, '') as unknown[]
    // allowed, remaining, resetMs, retryAfterMs, nextMs (the fifth since the RateLimit field's t became "until one more unit")
    t.equal(reply.length, 5, `${name}: five numbers`)
    t.ok(reply.every((v) => typeof v === 'number' && Number.isInteger(v)), `${name}: integers ${JSON.stringify(reply)}`)
    t.equal(reply[0], 1, `${name}: admitted`)
    await client.del(key)
  }
  // One straight decision in the batch script: `now` first (the time it charged at, from Redis TIME
  // here), then the decision (batch.lua: remaining * 4 + allowed, resetMs, retryAfterMs unless
  // admitted, nextMs; admitted within PACK ms, remaining * 4 + 3 and resetMs * PACK + nextMs), or the error text alone.
  const script = buildBatchScript()
  t.equal(await client.script('LOAD', script.source), script.sha, 'the batch script: SCRIPT LOAD')
  for (const [i, name] of ALGORITHMS.entries()) {
    const key = `${prefix}:{lone-${name}}`
    // ARGV: now ('' = Redis TIME), one spec (algorithm|limit|windowMs|burst|shadow|penalty) and its empty tail, the decision at spec 1 with cost 1
    const spec = `${i + 1}|5|1000|5||`
    const before = Date.now()
    const [now, ...reply] = await client.evalsha(script.sha, 1, key, '', 1, spec, '', 1) as unknown[]
    t.ok(Number.isInteger(now) && Math.abs((now as number) - before) < 1000, `${name} (one decision): Redis TIME in ms first (${String(now)})`)
    t.equal(reply.length, 2, `${name} (one decision): two numbers when admitted within PACK`)
    t.equal(reply[0], 4 * 4 + 3, `${name} (one decision): admitted, 4 left, resetMs and nextMs packed`)
    const resetMs = Math.floor(reply[1] as number / PACK)
    // sliding-window: a count weighs until its window has left the trailing one, up to two windows on
    // (and nextMs, one unit short of full, is resetMs)
    const maxReset = name === 'sliding-window' ? 2000 : 1000
    t.ok(resetMs > 0 && resetMs <= maxReset && (reply[1] as number) % PACK <= maxReset, `${name} (one decision): resetMs ${resetMs}, nextMs ${(reply[1] as number) % PACK}`)
    await client.del(key)
    await client.hset(key, 'not', 'a state')
    const [, ...failed] = await client.evalsha(script.sha, 1, key, '', 1, spec, '', 1) as unknown[]
    t.equal(failed.length, 1, `${name} (one decision): a failing decision answers one value after now …`)
    t.match(String(failed[0]), /WRONGTYPE/, `${name} (one decision): … the error text`)
    await client.del(key)
  }
  for (const [what, script] of [['batch', buildBatchScript()], ['multi', buildMultiScript()]] as const) {
    t.match(script.source, /^#!lua\n/, `${what}: the Redis 7 shebang`)
    t.equal(await client.script('LOAD', script.source), script.sha, `${what}: SCRIPT LOAD`)
  }
  // One fixed-window block by the batch script's wire format: now 1500 (injected, so both calls share one window),
  // one spec (algorithm 1, limit 5, 1000 ms, burst 5, enforced, no penalty; no period), then spec 1 (cost 1).
  const key = `${prefix}:{batch}`
  const batch = await client.evalsha(buildBatchScript().sha, 1, key, '1500', 1, '1|5|1000|5||', '', 1) as unknown[]
  t.same(batch, [1500, 4 * 4 + 3, packed(500, 500)], 'batch: now (the injected 1500) first, then decision 1 ran and admitted, 4 left: two numbers, 500 ms to the window\'s end')
  const costly = await client.evalsha(buildBatchScript().sha, 1, key, '1500', 1, '1|5|1000|5||', '', -2, 1, 3) as unknown[]
  t.equal(costly[1], 1 * 4 + 3, 'batch: -2, spec, cost charges that cost (3 of the 4 left)')
  await client.del(key)
  // A window of 100,000,000 ms (27.8 h): 99,998,500 ms to its end is beyond PACK, so the three-number form.
  const long = await client.evalsha(buildBatchScript().sha, 1, key, '1500', 1, '1|5|100000000|5||', '', 1) as unknown[]
  t.same(long, [1500, 4 * 4 + 1, 99_998_500, 99_998_500], 'batch: admitted beyond PACK: remaining * 4 + 1, resetMs, nextMs')
  await client.del(key)
  // A calendar period's spec: the boundaries 1000:5000:12000:20000 (periods of 4, 7 and 8 s); now picks one.
  const periodKey = `${prefix}:{period}`
  const at = async (now: number): Promise<unknown[]> => (await client.evalsha(buildBatchScript().sha, 1, periodKey, String(now), 1, '1|2|1000|2||', '1000:5000:12000:20000', 1) as unknown[]).slice(1)
  // Per block: remaining * 4 + allowed, resetMs, retryAfterMs unless admitted, nextMs (admitted: packed, see above).
  t.same(await at(4000), [1 * 4 + 3, packed(1000, 1000)], 'the previous period [1000, 5000): 1 s to its end')
  t.same(await readState(client, periodKey), [1000, 1], 'the state names the period by its start')
  t.same(await at(5000), [1 * 4 + 3, packed(7000, 7000)], 'the current period [5000, 12000): a fresh count, 7 s to its end')
  t.same(await at(19_000), [1 * 4 + 3, packed(1000, 1000)], 'the next period [12000, 20000)')
  t.same(await at(19_500), [0 * 4 + 3, packed(500, 500)])
  t.same(await at(19_600), [0 * 4 + 0, 400, 400, 400], 'refused until the next period\'s end: four values')
  const outside = await at(20_000)
  t.equal(outside.length, 1, 'beyond the periods sent: that decision fails, alone')
  t.match(String(outside[0]), /now is outside the calendar periods sent/)
  await client.del(periodKey)
})

test('the Lua build: .luacheckrc is what the declarations give; an undeclared or doubly declared local is refused; the prelude binds what it declares', async (t) => {
  t.equal(readFileSync(new URL('../../.luacheckrc', import.meta.url), 'utf8'), luacheckConfig(), '.luacheckrc matches the fragments\' declarations (npx tsx test/helpers/luacheckrc.ts rewrites it)')
  const missing = { ...files, 'batch-loop': parseFragment('batch-loop', `--@requires nowhere\n${files['batch-loop'].text}`) }
  t.throws(() => buildBatchScript(missing), /batch-loop requires nowhere, which no part before it provides/)
  const twice = { ...files, spec: parseFragment('spec', `--@provides emit\n${files.spec.text}`) }
  t.throws(() => buildBatchScript(twice), /spec provides emit, already in scope/)
  t.throws(() => parseFragment('x', '--@export y\n'), /unknown declaration --@export/)
  // A local nobody reads is dead code left for tests (as multi() was): every provided name is read by another fragment.
  const read = new Set(['libraryFunctions', ...Object.values(files).flatMap((f) => [...f.requires, ...f.updates])])
  t.same(Object.values(files).flatMap((f) => f.provides.filter((name) => !read.has(name)).map((name) => `${f.name}: ${name}`)), [], 'every provided local is required or updated by a fragment')
  const client = createClient(await getRedis())
  t.teardown(() => { client.disconnect() })
  const count = await client.eval(`${files.prelude.text}\nreturn #{ libraryFunctions() }`, 0)
  t.equal(count, files.prelude.binds.length, 'libraryFunctions returns one value per --@binds name')
})
