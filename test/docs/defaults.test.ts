import { test } from 'tap'
import { readFileSync } from 'node:fs'
import * as limits from '../../lib/limits.js'
import { BLOCK_DEFAULTS, DAY_MS, DEFAULT_LEASE_MS, DEFAULT_PENALTY_MAX_MS, DEFAULTS } from '../../lib/limits.js'
import { resolveOptions } from '../../lib/options/index.js'
import { OPTION_NAMES } from '../../lib/policy/field-names.js'
import { parseWindow } from '../../lib/policy/duration.js'

/*
 * One defaults and limits table (lib/limits.ts): the "default" column of
 * docs/options.md shows each entry as a user writes it, an option without an
 * entry is documented without a default, passing the documented default
 * resolves to what passing nothing does, and every range the pages state is
 * the table's.
 */

const read = (name: string): string => readFileSync(new URL(`../../docs/${name}`, import.meta.url), 'utf8')
const page = read('options.md')

/** `| `name` | default | meaning |` rows of one section of docs/options.md, by name: [default, meaning]. */
function rowsOf (heading: string): Map<string, [string, string]> {
  const section = page.split(`## ${heading}`)[1]?.split('\n## ')[0] ?? ''
  return new Map([...section.matchAll(/^\| `(\w+)` \| (.+?) \| (.+) \|$/gm)].map((row) => [row[1] as string, [row[2] as string, row[3] as string]]))
}
const options = rowsOf('Plugin options')
const fields = rowsOf('Route block: `config.rateLimit`')
const documented = new Map([...options].map(([name, [cell]]) => [name, cell]))

/** A default as the docs write it: `'rl'`, `50`, `{ max: 10000 }`. */
function written (value: unknown): string {
  if (typeof value === 'string') return `'${value}'`
  if (typeof value === 'object' && value !== null) {
    return `{ ${Object.entries(value).map(([key, inner]) => `${key}: ${written(inner)}`).join(', ')} }`
  }
  return String(value)
}

test('docs/options.md shows every default of the table, and no default the table lacks', async (t) => {
  t.ok(documented.size >= 25, `${documented.size} options read from the table`)
  for (const [name, value] of Object.entries(DEFAULTS)) {
    t.equal(documented.get(name), `\`${written(value)}\``, `${name}: ${written(value)}`)
  }
  for (const [name, cell] of documented) {
    if (name in DEFAULTS) continue
    t.match(cell, /^(none|`fastify\.redis`)/, `${name} is documented without a default (${cell})`)
  }
  for (const name of Object.keys(DEFAULTS)) t.ok(OPTION_NAMES.has(name), `${name} is an option`)
})

test('passing each documented default resolves to what passing nothing does', async (t) => {
  const unset = resolveOptions({ store: 'memory' }) as unknown as Record<string, unknown>
  for (const [name, value] of Object.entries(DEFAULTS)) {
    if (name === 'store') continue
    const given = resolveOptions({ store: 'memory', [name]: value }) as unknown as Record<string, unknown>
    const field = name === 'denyCache' ? 'denyCacheMax' : name
    t.same(given[field], unset[field], `${name}: ${written(value)}`)
  }
  t.equal(resolveOptions({}).store, DEFAULTS.store, 'store')
  t.equal(parseWindow(DEFAULTS.lease), DEFAULT_LEASE_MS, 'the lease the policy compiler falls back to is the documented one')
})

test('docs/options.md shows each block field default of the table', async (t) => {
  t.ok(fields.size >= 20, `${fields.size} block fields read from the table`)
  for (const [name, value] of Object.entries(BLOCK_DEFAULTS)) {
    t.ok(fields.get(name)?.[0].startsWith(`\`${written(value)}\``), `${name}: ${written(value)}`)
  }
  t.equal(parseWindow('1d'), DEFAULT_PENALTY_MAX_MS, "penalty.max's documented default, '1d'")
})

/** 10,000,000 as the pages write counts. */
const count = (value: number): string => value.toLocaleString('en-US')
/** A duration as the pages write bounds: `60 s`, `1 day`, `366 days`. */
const spoken = (ms: number): string => ms % DAY_MS === 0 ? (ms === DAY_MS ? '1 day' : `${ms / DAY_MS} days`) : `${ms / 1000} s`

test('every range the pages state is the one in lib/limits.ts', async (t) => {
  const {
    MAX_ALLOW_ENTRIES, MAX_BATCH, MAX_BREAKER_FAILURES, MAX_CHANGE_TEXT_LENGTH, MAX_CONCURRENCY, MAX_CONFIG_KEY_LENGTH, MAX_COST, MAX_DELAY_MS,
    MAX_DENY_CACHE, MAX_DURATION_MS, MAX_FLEET, MAX_GLOBAL_BLOCKS, MAX_IDENTITY_TIMEOUT_MS, MAX_IN_FLIGHT, MAX_IPV6_SUBNET, MAX_KEYS,
    MAX_LEASE_MS, MAX_LIMIT, MAX_PENALTY_AFTER, MAX_PENALTY_BACKOFF, MAX_PENDING, MAX_POLICY_NAME_LENGTH, MAX_PREFIX_LENGTH, MAX_ROUTE_BLOCKS,
    MAX_SLIDING_LOG_LIMIT, MAX_TIER_NAME_LENGTH, MAX_TIMEOUT_MS, MAX_WAIT_MS, MAX_WINDOW_MS, MIN_IPV6_SUBNET, MIN_LEASE_MS, MIN_SECRET_BYTES,
    MIN_WINDOW_MS, SKIP_TIMEOUT_MS, LONG_HOLD_MS, DEFAULT_PENALTY_BACKOFF
  } = limits
  const option = (name: string): string => options.get(name)?.[1] ?? ''
  const field = (name: string): string => fields.get(name)?.[1] ?? ''
  const stated: Array<[string, string, string]> = [
    ['option prefix', option('prefix'), `1–${MAX_PREFIX_LENGTH} characters`],
    ['option timeout', option('timeout'), `(1–${MAX_TIMEOUT_MS})`],
    ['option identityTimeout', option('identityTimeout'), `(1–${MAX_IDENTITY_TIMEOUT_MS})`],
    ['option ipv6Subnet', option('ipv6Subnet'), `(${MIN_IPV6_SUBNET}–${MAX_IPV6_SUBNET})`],
    ['option globalLimits', option('globalLimits'), `(at most ${MAX_GLOBAL_BLOCKS})`],
    ['option denyCache', option('denyCache'), `\`max\`: 1–${count(MAX_DENY_CACHE)} entries`],
    ['option denyCache (quotas)', option('denyCache'), LONG_HOLD_MS === 1000 ? 'at most about a second' : `at most ${LONG_HOLD_MS} ms`],
    ['option maxBatch', option('maxBatch'), `(1–${MAX_BATCH})`],
    ['option maxInFlight', option('maxInFlight'), `(1–${MAX_IN_FLIGHT})`],
    ['option fleetSize', option('fleetSize'), `(1–${count(MAX_FLEET)})`],
    ['option maxKeys', option('maxKeys'), `(1–${count(MAX_KEYS)})`],
    ['option circuitBreaker', option('circuitBreaker'), `\`failures\`: 1–${count(MAX_BREAKER_FAILURES)}; \`cooldown\`: up to ${spoken(MAX_DURATION_MS)}`],
    ['option maxDelayed', option('maxDelayed'), `(0–${count(MAX_PENDING)})`],
    ['option maxPending', option('maxPending'), `(1–${count(MAX_PENDING)})`],
    ['option hashSecret', option('hashSecret'), `at least ${MIN_SECRET_BYTES} bytes`],
    ['option configKey', option('configKey'), `1–${MAX_CONFIG_KEY_LENGTH} characters`],
    ['option allowList', option('allowList'), `at most ${count(MAX_ALLOW_ENTRIES)} entries`],
    ['option allowList (timeout)', option('allowList'), `takes over ${SKIP_TIMEOUT_MS} ms`],
    ['option lease', option('lease'), `${spoken(MIN_LEASE_MS)} to ${spoken(MAX_LEASE_MS)}`],
    ['field limit', field('limit'), `1–${count(MAX_LIMIT)}; sliding log 1–${count(MAX_SLIDING_LOG_LIMIT)}`],
    ['field window', field('window'), `from ${MIN_WINDOW_MS} ms to ${spoken(MAX_WINDOW_MS)}`],
    ['field delay', field('delay'), `up to ${spoken(MAX_DELAY_MS)}`],
    ['field wait', field('wait'), `up to ${spoken(MAX_WAIT_MS)}`],
    ['field concurrency', field('concurrency'), `1 to ${count(MAX_CONCURRENCY)}`],
    ['field skip', field('skip'), `after ${SKIP_TIMEOUT_MS} ms`],
    ['field penalty.after', field('penalty'), `\`after\` (1–${count(MAX_PENALTY_AFTER)})`],
    ['field penalty.backoff', field('penalty'), `(default ${DEFAULT_PENALTY_BACKOFF}, at most ${MAX_PENALTY_BACKOFF})`],
    ['field penalty.for', field('penalty'), `\`for\` (up to ${spoken(MAX_DURATION_MS)})`],
    ['field name', field('name'), `(1–${MAX_POLICY_NAME_LENGTH} printable ASCII)`],
    ['blocks per route', page, `A route may declare an array of blocks (at most ${MAX_ROUTE_BLOCKS})`],
    ['tier names', read('algorithms.md'), `Tier names are 1–${MAX_TIER_NAME_LENGTH} characters`],
    ['cost', read('errors.md'), `an integer from 1 to ${count(MAX_COST)}`],
    ['actor and reason', read('api.md'), `at most ${MAX_CHANGE_TEXT_LENGTH} characters each`]
  ]
  for (const [what, text, expected] of stated) t.ok(text.includes(expected), `${what}: ${expected}`)
})

test('docs/console.md shows the console page\'s defaults and ranges as lib/limits.ts holds them', async (t) => {
  const { CONSOLE_DEFAULTS, MIN_CONSOLE_REFRESH_MS, MAX_CONSOLE_REFRESH_MS, MAX_AUDIT_READ, MAX_CONSOLE_TTL_MS, MAX_CHANGE_TEXT_LENGTH } = limits
  const consolePage = read('console.md').split('## The console page')[1] ?? ''
  const rows = new Map([...consolePage.matchAll(/^\| `(\w+)` \| (.+?) \| (.+) \|$/gm)].map((row) => [row[1] as string, [row[2] as string, row[3] as string]]))
  t.ok(rows.size >= 6, `${rows.size} console options read`)
  for (const [name, value] of Object.entries(CONSOLE_DEFAULTS)) t.equal(rows.get(name)?.[0], `\`${written(value)}\``, `${name}: ${written(value)}`)
  for (const [name, [cell]] of rows) if (!(name in CONSOLE_DEFAULTS)) t.equal(cell, 'none', `${name} is documented without a default`)
  const { resolveConsole } = await import('../../lib/console/page/options.js')
  const given = resolveConsole({ ...CONSOLE_DEFAULTS, authorize: () => true } as never)
  const unset = resolveConsole({ authorize: () => true })
  t.same({ ...given, authorize: undefined, actor: undefined }, { ...unset, authorize: undefined, actor: undefined }, 'passing each documented default resolves to what passing nothing does')
  const stated: Array<[string, string]> = [
    [rows.get('refresh')?.[1] ?? '', `${MIN_CONSOLE_REFRESH_MS} ms to ${spoken(MAX_CONSOLE_REFRESH_MS)}`],
    [rows.get('audit')?.[1] ?? '', `(1–${MAX_AUDIT_READ})`],
    [rows.get('actor')?.[1] ?? '', `At most ${MAX_CHANGE_TEXT_LENGTH} characters`],
    [consolePage, `A ttl set on the page is 1 s to ${spoken(MAX_CONSOLE_TTL_MS)}`]
  ]
  for (const [text, expected] of stated) t.ok(text.replace(/\s+/g, ' ').includes(expected), expected)
})
