/**
 * `npm run bench:held`: the memory one held request costs (a block's `delay`,
 * docs/shaping.md); `npm run bench:held -- --wait`: one waiting for a slot
 * (a concurrency block's `wait`, one slot held throughout). One process, the memory store, a frozen clock: 2,000
 * requests over real loopback sockets (one connection each, as a flood of
 * callers would open) are held for their turns; the
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
const WAIT = process.argv.includes('--wait')
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with node --expose-gc')

function sample (): { heap: number, rss: number } {
  gc?.()
  const { heapUsed, rss } = process.memoryUsage()
  return { heap: heapUsed, rss }
}

const app = Fastify({ logger: false })
await app.register(rateLimit, { store: 'memory', clock: () => 1_800_000_000_000, maxDelayed: HELD })
let open: () => void = () => {}
const gate = new Promise<void>((resolve) => { open = resolve })
if (WAIT) {
  // One slot, held by the first request until the end; every other request waits for it.
  app.get('/held', { config: { rateLimit: { concurrency: 1, wait: '60s', by: 'ip' } } }, async (req) => {
    if (req.headers['x-hold'] !== undefined) await gate
    return 'ok'
  })
} else {
  // 100 per second, 60 s of turns: every request beyond the first hundred is held (2,000 take 20 s of turns).
  app.get('/held', { config: { rateLimit: { algorithm: 'gcra', limit: 100, window: '1s', delay: '60s' } } }, async () => 'ok')
}
const base = await app.listen({ port: 0, host: '127.0.0.1', backlog: 4096 })
const agent = new Agent({ connections: HELD + 100 })
const send = async (headers: Record<string, string> = {}): Promise<number> => {
  const res = await request(`${base}/held`, { dispatcher: agent, headers })
  await res.body.dump()
  return res.statusCode
}

const holder = WAIT ? send({ 'x-hold': '1' }) : Promise.resolve(200)
if (WAIT) {
  while (app.rateLimit.stats().allowed < 1) await new Promise((resolve) => setTimeout(resolve, 10))
} else {
  for (let i = 0; i < 100; i++) await send()
}
const before = sample()
const answers = Array.from({ length: HELD }, async () => await send())
const count = (): number => WAIT ? app.rateLimit.stats().waiting : app.rateLimit.stats().delayed
while (count() < HELD) await new Promise((resolve) => setTimeout(resolve, 50))
const during = sample()
// The earliest turns (10 ms apart) may have come already: divide by what is held now.
const heldNow = WAIT ? app.rateLimit.stats().waiting : app.rateLimit.stats().held
const closing = app.close()
open()
await closing
const statuses = await Promise.all(answers)
await holder
const after = sample()
await agent.close()

const per = (a: number, b: number): string => ((b - a) / heldNow).toFixed(0)
console.log(JSON.stringify({
  kind: WAIT ? 'waiting for a slot (wait)' : 'held for a turn (delay)',
  sent: HELD,
  heldWhenSampled: heldNow,
  answered503: statuses.filter((s) => s === 503).length,
  heapBytesPerHeld: Number(per(before.heap, during.heap)),
  rssBytesPerHeld: Number(per(before.rss, during.rss)),
  heapAfterCloseBytesPerHeld: Number(per(before.heap, after.heap)),
  note: 'heap and RSS of this one process (server, sockets and the undici client) ÷ requests held'
}))
