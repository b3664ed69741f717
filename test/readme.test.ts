import { test } from 'tap'
import { readFileSync } from 'node:fs'
import * as errors from '../lib/errors.js'

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')

test('every error code is documented in the README error table', async (t) => {
  const codes = Object.values(errors).map((value) => typeof (value as { emitted?: unknown }).emitted === 'boolean'
    ? (value as unknown as { code: string }).code // a process-warning
    : new (value as new (...args: unknown[]) => Error & { code: string })('x', 'y', 'z').code)
  t.ok(codes.length >= 10, `${codes.length} codes`)
  for (const code of codes) t.match(readme, new RegExp(`\\| \`${code}\` \\|`), `${code} has a row`)
})

test('every plugin option and route block field has a row in the README', async (t) => {
  for (const option of ['redis', 'store', 'prefix', 'defaultLimit', 'onRedisError', 'timeout', 'headers', 'user', 'apiKey', 'ipv6Subnet', 'hashSecret', 'clock', 'globalLimits', 'denyCache', 'mode', 'tier', 'policies', 'printPolicies', 'metrics', 'batchWrites', 'configKey']) {
    t.match(readme, new RegExp(`\\| \`${option}\` \\|`), `option ${option}`)
  }
  for (const field of ['limit', 'window', 'algorithm', 'burst', 'by', 'cost', 'onRedisError', 'name', 'mode', 'refundOn']) {
    t.match(readme, new RegExp(`\\| \`${field}\` \\|`), `field ${field}`)
  }
})

test('the README names the test command', async (t) => {
  t.match(readme, /npm test/)
})
