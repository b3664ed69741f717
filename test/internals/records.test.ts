import { test, type Test } from 'tap'
import type { RecordHash } from '../../lib/store/port.js'
import { MemoryStore } from '../../lib/store/memory/store.js'
import { RedisStore } from '../../lib/store/redis/store.js'
import { setupModelStore, TestClock } from '../helpers/app.js'
import { createClient, getRedis } from '../helpers/redis.js'

/*
 * The store port's records capability (Store.records: lib/store/port.ts
 * RecordHash), which bans and overrides (lib/fleet/) persist through: the
 * same contract on the Redis store and the memory store, on the store's
 * clock. A lapsed record is deleted only by the compare-and-delete, which
 * checks the expiry against the store's clock and that nobody replaced it.
 */

const HOUR = 3_600_000

async function contract (t: Test, records: RecordHash, clock: TestClock): Promise<void> {
  t.equal(records.now(), clock.now, 'now() is the store clock')
  t.equal(await records.stamp(), clock.now, 'stamp() too')
  await records.write('a', '{"v":1}')
  await records.write('b', '{"v":2}')
  const read = await records.read()
  t.same([...read.fields].sort(), [['a', '{"v":1}'], ['b', '{"v":2}']], 'read() returns every id\'s JSON')
  t.equal(read.at, clock.now, 'and the store clock when read')

  const expiresAt = clock.now + HOUR
  t.equal(await records.removeLapsed('a', '{"v":1}', expiresAt), false, 'not lapsed on the store clock: kept')
  clock.advance(HOUR)
  t.equal(await records.removeLapsed('a', '{"v":0}', expiresAt), false, 'lapsed, but replaced since it was read: kept')
  t.equal(await records.removeLapsed('a', '{"v":1}', expiresAt), true, 'lapsed and unchanged: deleted')
  t.same([...(await records.read()).fields.keys()], ['b'], 'only b is left')

  t.equal(await records.remove('b'), true, 'remove() says there was one')
  t.equal(await records.remove('b'), false, 'and that there was none the second time')
  t.equal((await records.read()).fields.size, 0, 'the hash is empty')
}

test('the memory store\'s records: the contract on its clock, one hash per key', async (t) => {
  const clock = new TestClock()
  const store = new MemoryStore(clock.read)
  t.teardown(() => { store.close() })
  await contract(t, store.records('rl:bans'), clock)
  await store.records('rl:bans').write('x', '{}')
  t.same([...(await store.records('rl:bans').read()).fields.keys()], ['x'], 'records(key) twice is one hash')
  t.equal((await store.records('rl:overrides').read()).fields.size, 0, 'another key is another hash')
})

test('the Redis store\'s records: the contract on the clock option, which stands in for TIME', async (t) => {
  const { redisStore, clock, prefix } = await setupModelStore(t, 'records')
  await contract(t, redisStore.records(`${prefix}:bans`), clock)
})

async function redisMs (redis: ReturnType<typeof createClient>): Promise<number> {
  const [seconds, micros] = await redis.time()
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

test('the Redis store\'s records without the clock option: stamped, judged and deleted by Redis TIME', async (t) => {
  const { redisStore: model, prefix } = await setupModelStore(t, 'records-time')
  const admin = createClient(await getRedis())
  t.teardown(() => { admin.disconnect() })
  const store = new RedisStore(model.client, { timeout: 1000, maxBatch: 128, maxInFlight: 1, maxPending: 100, coalesce: true, onBatch: undefined })
  const records = store.records(`${prefix}:bans`)
  const before = await redisMs(admin)
  const stamped = await records.stamp()
  const after = await redisMs(admin)
  t.ok(stamped >= before && stamped <= after, `stamp() is Redis TIME (${before} <= ${stamped} <= ${after})`)
  t.ok(records.now() >= stamped, 'now() carries it on from the last read (before any read it counts from 0)')
  await records.write('a', '{"v":1}')
  t.equal(await records.removeLapsed('a', '{"v":1}', after + HOUR), false, 'an expiry an hour ahead of Redis TIME: kept')
  t.equal(await records.removeLapsed('a', '{"v":1}', before - 1), true, 'one behind it: deleted')
  t.equal(await admin.hlen(`${prefix}:bans`), 0, 'gone from Redis')
})
