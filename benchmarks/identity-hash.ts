/*
 * The per-request cost of hashing an identity value (a user id, an API key, a
 * header: every identity part but the IP), measured directly: the plugin's
 * hasher (lib/keys/layout.ts identityHasher) over 1,000 distinct 40-character
 * values in a tight loop, median of rounds, beside the `createHash` form it
 * replaced and HMAC-SHA256 (`hashSecret`) in the same run. Redis does nothing
 * per request for it. Runs only on a quiet machine (the load gate of
 * benchmarks/quiet.ts); a run that started above it is marked not quotable.
 *
 *   npx tsx benchmarks/identity-hash.ts [iterations]
 */
import { createHash } from 'node:crypto'
import { identityHasher, type ValueHasher } from '../lib/keys/layout.js'
import { nsPerCall } from './common.js'
import { loadAverage, waitForQuiet } from './quiet.js'

const ITERATIONS = Number(process.argv[2] ?? 500_000)
const ROUNDS = 7
const MAX_LOAD = 1.5
const values = Array.from({ length: 1000 }, (_, i) => `key_live_${String(i).padStart(4, '0')}_abcdefghijklmnopqrstuvwx`)

function measure (label: string, hasher: ValueHasher): number {
  const { median, rounds } = nsPerCall(ROUNDS, ITERATIONS, (i) => hasher(values[i % 1000] as string).length)
  console.log(`${label.padEnd(52)} ${median.toFixed(0).padStart(6)} ns/value (rounds ${rounds.map((s) => s.toFixed(0)).join(' ')})`)
  return median
}

async function main (): Promise<void> {
  const gate = await waitForQuiet('identity hashing', { maxLoad: MAX_LOAD, waitS: 180 })
  const createHashForm: ValueHasher = (value) => createHash('sha256').update(value).digest('base64url').slice(0, 22)
  const plugin = identityHasher(undefined)
  for (const value of values) {
    if (plugin(value) !== createHashForm(value)) throw new Error(`the two SHA-256 forms differ for ${value}`)
  }
  const before = measure('SHA-256 by createHash (before)', createHashForm)
  const now = measure('SHA-256 by crypto.hash (the plugin, no hashSecret)', plugin)
  const hmac = measure('HMAC-SHA256 (the plugin, with hashSecret)', identityHasher(Buffer.alloc(32, 7)))
  const loadEnd = loadAverage()
  const quotable = gate.gate === 'quiet' && loadEnd < MAX_LOAD
  console.log(`\ncrypto.hash ${(now / before).toFixed(2)}x createHash's time (${(before - now).toFixed(0)} ns less per value); HMAC ${(hmac / before).toFixed(2)}x`)
  console.log(`load average ${gate.loadStart.toFixed(2)} at the start, ${loadEnd.toFixed(2)} at the end: ${quotable ? 'quotable' : 'NOT quotable (load at or above ' + String(MAX_LOAD) + ')'}`)
}

await main()
