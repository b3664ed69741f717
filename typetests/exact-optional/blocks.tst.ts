/*
 * config.rateLimit under exactOptionalPropertyTypes (this folder's tsconfig):
 * the documented block shapes compile, and a misspelt or mistyped field is
 * named as without it (typetests/field-names.tst.ts has the full set).
 */
import Fastify from 'fastify'
import { expect, test } from 'tstyche'
import type { RateLimitBlock } from '../../lib/index.js'

const app = Fastify()
const handler = async (): Promise<string> => 'ok'

test('block shapes compile, misspelt and mistyped fields are named', () => {
  const block: RateLimitBlock = { limit: 5, window: '1m' }
  expect(app.get('/a', { config: { rateLimit: [block, { limit: 10_000, period: 'month', timeZone: 'Europe/Berlin' }, { concurrency: 2, wait: '5s' }] } }, handler)).type.not.toRaiseError()
  expect(app.get('/b', { config: { rateLimit: { limit: 5, window: '1m', algorithm: 'gcra', burst: 10, penalty: { after: 3, for: '1m' } } } }, handler)).type.not.toRaiseError()
  expect(app.get('/c', { config: { rateLimit: { limit: 5, window: '1m', algoritm: 'gcra' } } }, handler)).type.toRaiseError('\'algoritm\' does not exist in type RateLimitWindowBlock')
  expect(app.get('/d', { config: { rateLimit: { limit: '10', window: '1m' } } }, handler)).type.toRaiseError('\'limit\' must be of type')
  expect(app.get('/e', { config: { rateLimit: { limit: 5, window: '1m', burst: undefined } } }, handler)).type.toRaiseError()
})
