import { test } from 'tap'
import type { Socket } from 'node:net'
import { setupRedisApp } from './helpers/app.js'

/*
 * batchWrites: the decisions of one event-loop turn leave in one socket
 * write. Counted on the real client socket: with batching, 40 concurrent
 * decisions are one writev; without it, more writes. Both admit exactly the limit.
 */
function countWrites (socket: Socket): { calls: number, chunks: number } {
  const counts = { calls: 0, chunks: 0 }
  const target = socket as unknown as { _write: (...args: unknown[]) => void, _writev: (chunks: unknown[], callback: unknown) => void }
  const write = target._write.bind(socket)
  const writev = target._writev.bind(socket)
  target._write = (...args: unknown[]) => { counts.calls++; counts.chunks++; write(...args) }
  target._writev = (chunks: unknown[], callback: unknown) => { counts.calls++; counts.chunks += chunks.length; writev(chunks, callback) }
  return counts
}

for (const batchWrites of [true, false]) {
  test(`batchWrites: ${batchWrites}`, async (t) => {
    const { app, redis } = await setupRedisApp(t, 'wb', { batchWrites, denyCache: false, user: (req) => req.headers['x-user'] as string | undefined })
    app.get('/x', { config: { rateLimit: { limit: 25, window: '1m', by: 'user' } } }, async () => 'ok')
    await app.ready()
    // A fresh Redis has no script loaded yet (NOSCRIPT, then EVAL): load it with one decision, so only batching is counted.
    await app.inject({ url: '/x', headers: { 'x-user': 'warm-up' } })
    await redis.ping()
    const counts = countWrites(redis.stream as Socket)
    const statuses = await Promise.all(Array.from({ length: 40 }, async () => (await app.inject({ url: '/x', headers: { 'x-user': 'u1' } })).statusCode))
    t.equal(statuses.filter((code) => code === 200).length, 25, 'exactly the limit admitted')
    t.equal(statuses.filter((code) => code === 429).length, 15)
    t.equal(counts.chunks, 40, 'one command per decision')
    if (batchWrites) t.equal(counts.calls, 1, 'all 40 decisions of the turn left in one write')
    else t.ok(counts.calls > 1, `without batching: ${counts.calls} writes`)
    t.equal(app.rateLimit.stats().degraded, 0)
  })
}

test('batchWrites must be a boolean', async (t) => {
  const { buildApp } = await import('./helpers/app.js')
  await t.rejects(buildApp({ store: 'memory', batchWrites: 'yes' as never }), { code: 'FST_RRL_INVALID_OPTION', message: /batchWrites/ })
})
