/*
 * `npm run bench:penalty`: the Redis CPU one decision costs with and without a
 * `penalty` on its block, through the real RedisStore (batches of 100
 * decisions, sliding window, 10,000 keys, all admitted), on a private
 * redis-server. Redis CPU is INFO cpu (user + sys) before and after, divided
 * by decisions; 5 interleaved rounds, medians. A ratio within one run, never
 * an assertion.
 */
import { Redis } from 'ioredis'
import { RedisStore } from '../lib/store/redis/store.js'
import { clientPort } from '../lib/store/redis/client/detect.js'
import { storeRequest, testRun } from '../test/helpers/app.js'
import { startServer } from '../test/helpers/topologies.js'
const server = await startServer([], { label: 'pcost' })
const client = new Redis({ port: server.port })
const store = new RedisStore(clientPort(client)!, { timeout: 1000, maxBatch: 128, maxInFlight: 1, maxPending: 100000, coalesce: true, onBatch: undefined })
await store.warmUp()
const cpu = async () => { const info = await client.info('cpu'); const u = Number(/used_cpu_user:([\d.]+)/.exec(info)![1]); const s = Number(/used_cpu_sys:([\d.]+)/.exec(info)![1]); return (u + s) * 1e6 }
const plain = testRun({ algorithm: 'sliding-window', limit: 1_000_000, windowMs: 60_000, shadow: false })
const penal = testRun({ algorithm: 'sliding-window', limit: 1_000_000, windowMs: 60_000, shadow: false, penalty: { after: 3, forMs: 60000, backoff: 2, maxMs: 86400000, arg: '3:60000:2:86400000' } })
async function round (run: typeof plain, label: string) {
  const N = 50_000
  const before = await cpu()
  for (let i = 0; i < N; i += 100) await Promise.all(Array.from({ length: 100 }, (_, j) => store.decide(storeRequest([run], [`p:{${label}|${(i + j) % 10000}}:sw`], [1]), 'charge')))
  return ((await cpu()) - before) / N
}
const plainRounds: number[] = []
const penaltyRounds: number[] = []
for (let r = 0; r < 5; r++) {
  plainRounds.push(await round(plain, 'a' + r))
  penaltyRounds.push(await round(penal, 'b' + r))
}
const median = (values: number[]): number => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)] as number
const shown = (values: number[]): number[] => values.map((x) => +x.toFixed(2))
console.log(JSON.stringify({ redisUsPerDecision: { plain: median(plainRounds), penalty: median(penaltyRounds) }, rounds: { plain: shown(plainRounds), penalty: shown(penaltyRounds) } }))
client.disconnect()
await server.stop()
