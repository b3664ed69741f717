import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { BLOCK_FIELDS } from '../../lib/policy/block.js'
import * as errors from '../../lib/errors.js'
import { OPTION_NAMES } from '../../lib/options.js'

const read = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8')
const readme = read('README.md')
const optionsPage = read('docs/options.md')
const errorsPage = read('docs/errors.md')

test('every error code is documented in the error table (docs/errors.md)', async (t) => {
  const codes = Object.values(errors).map((value) => typeof (value as { emitted?: unknown }).emitted === 'boolean'
    ? (value as unknown as { code: string }).code // a process-warning
    : new (value as new (...args: unknown[]) => Error & { code: string })('x', 'y', 'z').code)
  t.ok(codes.length >= 10, `${codes.length} codes`)
  for (const code of codes) t.match(errorsPage, new RegExp(`\\| \`${code}\` \\|`), `${code} has a row`)
})

test('every plugin option and route block field has a row in docs/options.md', async (t) => {
  // The lists the validators accept: an option or field added there without a row fails here.
  t.ok(OPTION_NAMES.size >= 20 && BLOCK_FIELDS.size >= 10, 'the lists are the real ones')
  for (const option of OPTION_NAMES) {
    t.match(optionsPage, new RegExp(`\\| \`${option}\` \\|`), `option ${option}`)
  }
  for (const field of BLOCK_FIELDS) {
    t.match(optionsPage, new RegExp(`\\| \`${field}\` \\|`), `field ${field}`)
  }
})

test('the README names the test command and links the error codes', async (t) => {
  t.match(readme, /npm test/)
  t.match(readme, /\(docs\/errors\.md\)/)
})

test('the README stays short: at most 400 lines', async (t) => {
  const lines = readme.split('\n').length
  t.ok(lines <= 400, `${lines} lines`)
})
