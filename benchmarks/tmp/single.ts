import { Redis } from 'ioredis'
import { startCallgrind, instructionMeter, type Dump } from '../instructions.js'
import { buildBatchScript, loadScripts } from '../../lib/store/redis/scripts.js'
const server = await startCallgrind()
const admin = new Redis(server.url)
const client = new Redis(server.url)
const meter = instructionMeter(server, admin, new Map<number, Dump>())
const N = 2000
async function run (label: string, source: string, argv: (i: number) => Array<string | number>): Promise<void> {
  const sha = String(await client.script('LOAD', source))
  for (let i = 0; i < 500; i++) await client.evalsha(sha, ...(argv(i) as [number]))
  const f = await meter(N, async () => {
    for (let n = 0; n < N; n += 100) {
      const p = client.pipeline()
      for (let i = n; i < n + 100; i++) p.evalsha(sha, ...(argv(i) as [number]))
      await p.exec()
    }
  })
  console.log(label.padEnd(60), Math.round(f.instructions!.script), Math.round(f.instructions!.total))
}
await run('batch, 1 sw decision', buildBatchScript().source, (i) => [1, `k{${i % 500}}:SW60000`, '', 1, 2, 100000000, 60000, 100000000, '', '', '', 1])
await run('standalone sliding-window', loadScripts()['sliding-window'].source, (i) => [1, `k{${i % 500}}:SW60000`, 100000000, 60000, 100000000, 1, '', ''])
await run('frl-like INCR+PTTL', "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) return { c, ARGV[1] } end return { c, redis.call('PTTL', KEYS[1]) }", (i) => [1, `f{${i % 500}}`, 3600000])
admin.disconnect(); client.disconnect(); server.stop()
