/*
 * Issue 19: the `redis` option is structural (RedisClientLike), so the
 * published types import no client package, and every supported client's
 * own type is accepted as it is, with no cast.
 */
import Fastify from 'fastify'
import { Cluster as IoCluster, Redis as IoRedis } from 'ioredis'
import { Redis as IoRedis5 } from 'ioredis5'
import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey'
import { createClient, createCluster, createSentinel } from 'redis'
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5'
import { describe, expect, test } from 'tstyche'
import rateLimit, { type RedisClientLike } from '../lib/index.js'

const app = Fastify()

describe('the redis option takes every supported client', () => {
  test('ioredis 6 and 5, iovalkey: Redis and Cluster', () => {
    expect(app.register(rateLimit, { redis: new IoRedis() })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: new IoCluster([]) })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: new IoRedis5() })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: new Valkey() })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: new ValkeyCluster([]) })).type.not.toRaiseError()
  })

  test('node-redis 6 and 5: client, cluster, sentinel', () => {
    expect(app.register(rateLimit, { redis: createClient() })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: createCluster({ rootNodes: [] }) })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: createSentinel({ name: 'mymaster', sentinelRootNodes: [] }) })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: createClient5() })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: createCluster5({ rootNodes: [] }) })).type.not.toRaiseError()
  })

  test('what is not a client is refused at compile time', () => {
    expect(app.register(rateLimit, { redis: 'redis://localhost' })).type.toRaiseError()
    expect(app.register(rateLimit, { redis: { url: 'redis://x' } })).type.toRaiseError()
  })

  test('the type names no client package', () => {
    expect<RedisClientLike>().type.toBe<{ sendCommand: (...args: never[]) => unknown }>()
  })
})
