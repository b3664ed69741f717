import { test } from 'tap'
import { readFileSync } from 'node:fs'
import * as errors from '../../lib/errors.js'
import { BLOCK_FIELDS, HINTED_NAMES, OPTION_NAMES } from '../../lib/policy/field-names.js'

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

test('every name with a "did you mean" entry is in the table of docs/errors.md, in its column', async (t) => {
  const section = errorsPage.split('## Unknown options and fields')[1] ?? ''
  const rows = [...section.matchAll(/^\| (.+?) \| (.+?) \| (.+?) \|$/gm)].slice(2)
  t.ok(HINTED_NAMES.block.length >= 20 && HINTED_NAMES.option.length >= 20, 'the tables are the real ones')
  for (const [place, column] of [['block', 2], ['option', 3]] as const) {
    for (const name of HINTED_NAMES[place]) {
      const row = rows.find((cells) => (cells[1] as string).includes(`\`${name}\``) && !(cells[column] as string).startsWith('—'))
      t.ok(row, `${place} ${name}`)
    }
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
