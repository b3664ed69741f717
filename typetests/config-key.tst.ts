/*
 * A configKey of the app's own (docs/migration.md): the app types the key
 * with CheckedRouteRateLimit (RouteRateLimit, its fields named as for
 * config.rateLimit) and the decorator with RateLimitApi.
 */
import type { FastifyInstance } from 'fastify'
import { expect, test } from 'tstyche'
import rateLimit, { type CheckedRouteRateLimit, type RateLimitApi, type RouteRateLimit } from '../lib/index.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    redisRateLimit?: CheckedRouteRateLimit<this, 'redisRateLimit'>
    plainRateLimit?: RouteRateLimit
  }
  interface FastifyInstance {
    redisRateLimit: RateLimitApi
  }
}

declare const app: FastifyInstance
const handler = async (): Promise<string> => 'ok'

test('configKey registers, and the app\'s own key takes what config.rateLimit takes', () => {
  expect(app.register(rateLimit, { configKey: 'redisRateLimit' })).type.not.toRaiseError()
  expect(app.get('/a', { config: { redisRateLimit: { limit: 5, window: '1 minute', algorithm: 'gcra', burst: 10 } } }, handler)).type.not.toRaiseError()
  expect(app.get('/b', { config: { redisRateLimit: [{ limit: 10, window: '1s' }, { limit: 1000, window: '1h' }] } }, handler)).type.not.toRaiseError()
  expect(app.get('/c', { config: { redisRateLimit: false } }, handler)).type.not.toRaiseError()
  expect(app.get('/d', { config: { redisRateLimit: { limit: 5 } } }, handler)).type.toRaiseError()
  expect(app.get('/e', { config: { redisRateLimit: { limit: 5, window: '1m', algorithm: 'leaky-bucket' } } }, handler)).type.toRaiseError()
  expect(app.get('/f', { config: { redisRateLimit: true } }, handler)).type.toRaiseError()
  expect(app.get('/g', { config: { redisRateLimit: { limit: 5, window: '1m', burts: 10 } } }, handler)).type.toRaiseError('\'burts\' does not exist in type RateLimitWindowBlock')
  expect(app.get('/h', { config: { redisRateLimit: [{ limit: 5, window: '1m' }, { concurrency: 2, wiat: '1s' }] } }, handler)).type.toRaiseError('\'wiat\' does not exist in type RateLimitConcurrencyBlock')
  expect(app.get('/i', { config: { rateLimit: false, redisRateLimit: { limit: 5, window: '1m' } } }, handler)).type.not.toRaiseError()
})

test('a key typed RouteRateLimit takes the same blocks; a misspelt optional field compiles there', () => {
  expect(app.get('/a', { config: { plainRateLimit: { limit: 5, window: '1 minute', algorithm: 'gcra', burst: 10 } } }, handler)).type.not.toRaiseError()
  expect(app.get('/b', { config: { plainRateLimit: { limit: 5, window: '1m', burts: 10 } } }, handler)).type.not.toRaiseError()
})

test('the decorator under the app\'s name', () => {
  expect(app.redisRateLimit).type.toBe<RateLimitApi>()
  expect(app.redisRateLimit.consume('GET /a', { ip: '203.0.113.7' })).type.not.toRaiseError()
})
