import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { DEFAULT_LEASE_MS, DEFAULTS } from '../../lib/limits.js'
import { resolveOptions } from '../../lib/options/index.js'
import { OPTION_NAMES } from '../../lib/policy/field-names.js'
import { parseWindow } from '../../lib/policy/duration.js'

/*
 * One defaults table (lib/limits.ts): the "default" column of
 * docs/options.md shows each entry as a user writes it, an option without an
 * entry is documented without a default, and passing the documented default
 * resolves to what passing nothing does.
 */

const page = readFileSync(new URL('../../docs/options.md', import.meta.url), 'utf8')
const section = page.split('## Plugin options')[1]?.split('\n## ')[0] ?? ''
const documented = new Map([...section.matchAll(/^\| `(\w+)` \| (.+?) \| .+ \|$/gm)].map((row) => [row[1] as string, row[2] as string]))

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
