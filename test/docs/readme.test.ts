import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { BLOCK_FIELDS } from '../../lib/policy/block.js'
import * as errors from '../../lib/errors.js'
import { OPTION_NAMES } from '../../lib/options.js'

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')

test('every error code is documented in the README error table', async (t) => {
  const codes = Object.values(errors).map((value) => typeof (value as { emitted?: unknown }).emitted === 'boolean'
    ? (value as unknown as { code: string }).code // a process-warning
    : new (value as new (...args: unknown[]) => Error & { code: string })('x', 'y', 'z').code)
  t.ok(codes.length >= 10, `${codes.length} codes`)
  for (const code of codes) t.match(readme, new RegExp(`\\| \`${code}\` \\|`), `${code} has a row`)
})

test('every plugin option and route block field has a row in the README', async (t) => {
  // The lists the validators accept: an option or field added there without a README row fails here.
  t.ok(OPTION_NAMES.size >= 20 && BLOCK_FIELDS.size >= 10, 'the lists are the real ones')
  for (const option of OPTION_NAMES) {
    t.match(readme, new RegExp(`\\| \`${option}\` \\|`), `option ${option}`)
  }
  for (const field of BLOCK_FIELDS) {
    t.match(readme, new RegExp(`\\| \`${field}\` \\|`), `field ${field}`)
  }
})

test('the README names the test command', async (t) => {
  t.match(readme, /npm test/)
})
