/*
 * The per-request cost of runtime overrides (lib/fleet/overrides.ts Overrides.apply),
 * measured directly rather than as a req/s difference: the exact call the
 * route hook makes, on a freshly assembled key, in a tight loop, median of
 * rounds, minus the same loop (key assembly included) around an identity function. Redis does nothing per request for overrides.
 *
 *   npx tsx benchmarks/overrides.ts [iterations]
 */
import Fastify from 'fastify'
import { Overrides } from '../lib/fleet/overrides.js'
import { blocksForTier, compilePolicy, type CompileContext, type RouteBlock } from '../lib/policy/policy.js'
import { assembleKeys, blockId } from '../lib/keys/layout.js'
import { MemoryRecords } from '../lib/store/memory/records.js'
import { nsPerCall } from './common.js'

const ITERATIONS = Number(process.argv[2] ?? 2_000_000)
const ROUNDS = 7

const context: CompileContext = { prefix: 'rl', onRedisError: 'open', user: undefined, apiKey: undefined, ipv6Subnet: 64, hashSecret: undefined, mode: 'enforce', cluster: false, fleetSize: undefined, onPartError: () => {} }
const policy = compilePolicy({ limit: 100, window: '1m' }, { method: 'GET', url: '/orders/:id', source: 'declared' }, context)
const log = Fastify({ logger: false }).log
/** 1,000 callers' identities; each call assembles a fresh key, as a route hook does (its hash is then computed by the lookup). */
const identities = Array.from({ length: 1000 }, (_, i) => [`ip=10.0.${i >> 8}.${i & 255}`])

/** The route's blocks with one caller's keys, as the route hook's records carry them (one key per block). */
function recordsOf (keys: readonly string[]): Array<RouteBlock & { key: string }> {
  return blocksForTier(policy, undefined).map((block, i) => ({ ...block, key: keys[i] ?? '' }))
}

function measure (label: string, apply: (blocks: ReadonlyArray<RouteBlock & { key: string }>) => readonly unknown[]): number {
  const { median, rounds } = nsPerCall(ROUNDS, ITERATIONS, (i) => apply(recordsOf(assembleKeys(policy, identities[i % 1000] as string[]))).length)
  console.log(`${label.padEnd(58)} ${median.toFixed(1).padStart(6)} ns/call (rounds ${rounds.map((s) => s.toFixed(1)).join(' ')})`)
  return median
}

async function main (): Promise<void> {
  const base = measure('loop alone (key assembly, identity function)', (blocks) => blocks)
  // The memory store's records (no Redis): judged by the host clock, as in one process.
  const none = new Overrides(new MemoryRecords(Date.now), log)
  const empty = measure('no override in force', (blocks) => none.apply(policy, blocks))
  const some = new Overrides(new MemoryRecords(Date.now), log)
  // 1,000 callers of other routes have their own overrides: every request misses twice.
  for (let i = 0; i < 1000; i++) await some.set({ id: `rl:{GET:/other|ip=10.1.0.${i}}:SW60000`, blockId: 'rl:{GET:/other|*}:SW60000', block: 'other', route: 'GET /other', identity: null, limit: 5, expiresAt: null, actor: 'bench', reason: 'bench', setAt: 0 })
  const miss = measure('1,000 overrides in force, none for this route', (blocks) => some.apply(policy, blocks))
  await some.set({ id: blockId(policy, 0), blockId: blockId(policy, 0), block: policy.name, route: policy.route, identity: null, limit: 500, expiresAt: Date.now() + 3_600_000, actor: 'bench', reason: 'bench', setAt: 0 })
  const hit = measure('1,001 overrides, this block overridden (a hit, ttl checked)', (blocks) => some.apply(policy, blocks))
  console.log(`\nper request, net of the loop: none ${(empty - base).toFixed(1)} ns, miss ${(miss - base).toFixed(1)} ns, hit ${(hit - base).toFixed(1)} ns (target < 1000 ns)`)
}

await main()
