import { test } from 'tap'
import type { FastifyRequest } from 'fastify'
import { Redis } from 'ioredis'
import { ALGORITHMS } from '../../lib/store/algorithms.js'
import { compileIdentity } from '../../lib/keys/identity.js'
import { keyHead, keyTail, routeSegment } from '../../lib/keys/layout.js'
import { MAX_KEY_BYTES } from '../../lib/limits.js'
import { RedisStore } from '../../lib/store/redis/store.js'
import { clientPort } from '../../lib/store/redis/client/detect.js'
import { storeRequest, testRun } from '../helpers/app.js'
import { startRedisServer } from '../helpers/redis.js'

/*
 * 100,000 distinct callers must cost under 25 MiB of Redis memory. Keys are
 * built by the plugin's own identity and key functions (user identity, hashed:
 * the longest usual key), and each gets one decision through the Redis store
 * as a flood of requests gets it (coalesced, 128 decisions per call) on a
 * private redis-server, measured with INFO memory.
 *
 * Run here for the default algorithm and for the one with the largest state
 * per caller (a sorted set). Measured once for all five (Redis 7.0.15): fixed
 * window 17.4 MiB, sliding window 17.3, sliding log 20.4, token bucket 18.8,
 * GCRA 18.8. Set RRL_MEMORY_ALL=1 to measure all five.
 */

const CALLERS = 100_000
const BUDGET = 25 * 1024 * 1024
const WINDOW_MS = 3_600_000 // nothing expires while the test runs
const SUFFIX: Record<(typeof ALGORITHMS)[number], string> = { 'fixed-window': 'FC', 'sliding-window': 'SW', 'sliding-log': 'sl', 'token-bucket': 'TB', gcra: 'GC' }

async function usedMemory (redis: Redis): Promise<number> {
  const info = await redis.info('memory')
  const match = /^used_memory:(\d+)/m.exec(info)
  if (match?.[1] === undefined) throw new Error('no used_memory in INFO memory')
  return Number(match[1])
}

test(`${CALLERS.toLocaleString('en')} distinct identities cost under 25 MiB of Redis memory`, async (t) => {
  const server = await startRedisServer()
  const redis = new Redis(server.url)
  t.teardown(async () => { redis.disconnect(); await server.stop() })
  // Latency is not under test: a generous timeout, so a loaded machine cannot degrade a decision.
  const store = new RedisStore(clientPort(redis)!, { timeout: 10_000, maxBatch: 128, maxInFlight: 1, maxPending: 10_000, coalesce: true, onBatch: undefined })
  await store.warmUp()
  const identity = compileIdentity('user', {
    user: (request) => request.headers['x-user'] as string | undefined,
    ipv6Subnet: 64,
    onPartError: () => { throw new Error('unexpected identity error') }
  }, 'GET /orders/:id')
  if (typeof identity === 'string') throw new Error(identity)
  const head = keyHead('rl', routeSegment('GET', '/orders/:id'))
  const figures: string[] = []

  const algorithms = process.env.RRL_MEMORY_ALL === '1' ? ALGORITHMS : (['sliding-window', 'sliding-log'] as const)
  for (const algorithm of algorithms) {
    await redis.flushall() // the keys; the library stays loaded
    const runs = [testRun({ algorithm, limit: 100, windowMs: WINDOW_MS, shadow: false })]
    const tail = keyTail(SUFFIX[algorithm] + WINDOW_MS)
    const before = await usedMemory(redis)
    let longest = 0
    for (let start = 0; start < CALLERS; start += 10_000) {
      const decisions = []
      for (let i = start; i < start + 10_000; i++) {
        const key = head + identity.resolve({ headers: { 'x-user': `user-${i}@example.com` } } as unknown as FastifyRequest) + tail
        if (key.length > longest) longest = key.length
        decisions.push(store.decide(storeRequest(runs, [key], [1]), 'charge'))
      }
      const refused = (await Promise.all(decisions)).filter(({ decisions: [decision] }) => decision?.allowed !== true).length
      if (refused > 0) throw new Error(`${algorithm}: ${refused} first decisions were refused`)
    }
    t.equal(await redis.dbsize(), CALLERS, `${algorithm}: one key per caller`)
    const used = (await usedMemory(redis)) - before
    const sample = await redis.call('MEMORY', 'USAGE', head + identity.resolve({ headers: { 'x-user': 'user-7@example.com' } } as unknown as FastifyRequest) + tail) as number
    const line = `${algorithm}: ${(used / 1024 / 1024).toFixed(2)} MiB for ${CALLERS.toLocaleString('en')} callers (${Math.round(used / CALLERS)} B each; MEMORY USAGE of one key ${sample} B; keys ${longest} bytes)`
    figures.push(line)
    t.ok(used < BUDGET, line)
    t.ok(longest <= MAX_KEY_BYTES)
  }
  t.comment(figures.join('\n'))
})
