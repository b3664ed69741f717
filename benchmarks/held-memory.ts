/**
 * `npm run bench:held`: the memory one held request costs (a block's `delay`,
 * docs/shaping.md). One process, the memory store, a frozen clock: 2,000
 * requests over real loopback sockets (keep-alive off, so each is its own
 * connection as a flood of callers would be) are held for their turns; the
 * heap and RSS are read (after a GC) before, while all are held, and after
 * close() answered them. The figure is the difference ÷ requests, Node and
 * the sockets included: what a caller pays to be shaped instead of refused.
 *
 * Run with `node --expose-gc --import=tsx benchmarks/held-memory.ts` (the
 * npm script does).
 */
import Fastify from 'fastify'
import { Agent, request } from 'undici'
import rateLimit from '../lib/index.js'

const HELD = Number(process.env.HELD ?? 2000)
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with node --expose-gc')

function sample (): { heap: number, rss: number } {
  gc?.()
  const { heapUsed, rss } = process.memoryUsage()
  return { heap: heapUsed, rss }
}

const app = Fastify({ logger: false })
await app.register(rateLimit, { store: 'memory', clock: () => 1_800_000_000_000, maxDelayed: HELD })
// 1,000 per second, 60 s of turns: every request beyond the first thousand is held.
app.get('/held', { config: { rateLimit: { algorithm: 'gcra', limit: 1000, window: '1s', delay: '60s' } } }, async () => 'ok')
const base = await app.listen({ port: 0, host: '127.0.0.1', backlog: 4096 })
const agent = new Agent({ connections: HELD + 1000, pipelining: 0 })
const send = async (): Promise<number> => {
  const res = await request(`${base}/held`, { dispatcher: agent, headers: { connection: 'close' } })
  await res.body.dump()
  return res.statusCode
}

for (let i = 0; i < 1000; i++) await send()
const before = sample()
const answers = Array.from({ length: HELD }, send)
while (app.rateLimit.stats().held < HELD) await new Promise((resolve) => setTimeout(resolve, 50))
const during = sample()
await app.close()
const statuses = await Promise.all(answers)
const after = sample()
await agent.close()

const per = (a: number, b: number): string => ((b - a) / HELD).toFixed(0)
console.log(JSON.stringify({
  held: HELD,
  answered503: statuses.filter((s) => s === 503).length,
  heapBytesPerHeld: Number(per(before.heap, during.heap)),
  rssBytesPerHeld: Number(per(before.rss, during.rss)),
  heapAfterCloseBytesPerHeld: Number(per(before.heap, after.heap)),
  note: 'heap and RSS of this one process (server, sockets and the undici client) ÷ requests held'
}))
