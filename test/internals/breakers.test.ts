/**
 * The circuit breaker's state machine on the injected clock: every outcome of
 * a probe releases it, and a probe that never reports is released after
 * `timeout` plus one cooldown. Through Fastify and a real Redis:
 * test/circuit-breaker.test.ts.
 */
import { test } from 'tap'
import { CircuitBreaker, storeHealth } from '../../lib/store/redis/breakers.js'
import {
  FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_REDIS_CIRCUIT_OPEN, FST_RRL_REDIS_TIMEOUT, FST_RRL_REDIS_UNAVAILABLE, FST_RRL_SCRIPT_ERROR, FST_RRL_STORE_OVERLOADED
} from '../../lib/errors.js'
import { TestClock } from '../helpers/app.js'

const TIMEOUT = 50
const COOLDOWN = 250
const timedOut = new FST_RRL_REDIS_TIMEOUT(TIMEOUT)

/** A breaker opened by two timeouts, its cooldown over: the next allow() is the probe. */
function cooledDown (): { breaker: CircuitBreaker, clock: TestClock } {
  const clock = new TestClock()
  const breaker = new CircuitBreaker({ failures: 2, cooldownMs: COOLDOWN }, TIMEOUT, clock.read)
  for (let i = 0; i < 2; i++) {
    breaker.allow()
    breaker.report(timedOut)
  }
  clock.advance(COOLDOWN)
  return { breaker, clock }
}

test('storeHealth: what each store failure says about Redis', async (t) => {
  t.equal(storeHealth(timedOut), 'unhealthy')
  t.equal(storeHealth(new FST_RRL_REDIS_UNAVAILABLE('client is reconnecting')), 'unhealthy')
  t.equal(storeHealth(new FST_RRL_SCRIPT_ERROR('WRONGTYPE Operation against a key holding the wrong kind of value')), 'answered')
  t.equal(storeHealth(new FST_RRL_BAD_SCRIPT_REPLY()), 'answered')
  t.equal(storeHealth(new FST_RRL_STORE_OVERLOADED(10)), 'not-asked')
  t.equal(storeHealth(new FST_RRL_REDIS_CIRCUIT_OPEN(5, 100)), 'not-asked')
  t.equal(storeHealth(new TypeError('a local bug')), 'not-asked')
})

test('opens after `failures` unhealthy outcomes in a row; a decision in between resets the count', async (t) => {
  const clock = new TestClock()
  const breaker = new CircuitBreaker({ failures: 2, cooldownMs: COOLDOWN }, TIMEOUT, clock.read)
  breaker.report(timedOut)
  breaker.success()
  breaker.report(timedOut)
  t.ok(breaker.allow() && !breaker.open, 'one failure since the last success: closed')
  breaker.report(new FST_RRL_STORE_OVERLOADED(10))
  breaker.report(timedOut)
  t.ok(breaker.open, 'an overload is no failure of Redis, and no success either: two timeouts in a row open it')
  t.notOk(breaker.allow(), 'open: no decision asks Redis')
  t.equal(breaker.retryInMs, COOLDOWN)
  clock.advance(COOLDOWN - 1)
  t.notOk(breaker.allow(), 'still cooling down')
})

test('after the cooldown exactly one probe; each of its outcomes releases it', async (t) => {
  const outcomes: Array<[string, (breaker: CircuitBreaker) => void, { open: boolean, next: boolean }]> = [
    ['a decision closes it', (b) => { b.success() }, { open: false, next: true }],
    ['WRONGTYPE (Redis answered for one key) closes it', (b) => { b.report(new FST_RRL_SCRIPT_ERROR('WRONGTYPE')) }, { open: false, next: true }],
    ['a bad reply (Redis answered) closes it', (b) => { b.report(new FST_RRL_BAD_SCRIPT_REPLY()) }, { open: false, next: true }],
    ['a timeout opens it for another cooldown', (b) => { b.report(timedOut) }, { open: true, next: false }],
    ['unavailable opens it for another cooldown', (b) => { b.report(new FST_RRL_REDIS_UNAVAILABLE('closed')) }, { open: true, next: false }],
    ['an overload (Redis never asked) lets the next decision probe', (b) => { b.report(new FST_RRL_STORE_OVERLOADED(10)) }, { open: true, next: true }],
    ['a local error lets the next decision probe', (b) => { b.report(new TypeError('bug')) }, { open: true, next: true }]
  ]
  for (const [name, report, expected] of outcomes) {
    const { breaker } = cooledDown()
    t.ok(breaker.allow(), `${name}: the probe is let through`)
    t.notOk(breaker.allow(), `${name}: only one`)
    report(breaker)
    t.equal(breaker.open, expected.open, `${name}: open ${String(expected.open)}`)
    t.equal(breaker.allow(), expected.next, `${name}: the next decision asks Redis: ${String(expected.next)}`)
  }
})

test('a failed probe waits one more cooldown, then probes again', async (t) => {
  const { breaker, clock } = cooledDown()
  breaker.allow()
  breaker.report(timedOut)
  t.equal(breaker.retryInMs, COOLDOWN)
  clock.advance(COOLDOWN)
  t.ok(breaker.allow(), 'the next probe')
})

test('a probe that never reports is released after timeout + one cooldown, not before', async (t) => {
  const { breaker, clock } = cooledDown()
  t.ok(breaker.allow(), 'the probe, which never reports')
  clock.advance(TIMEOUT + COOLDOWN - 1)
  t.notOk(breaker.allow(), 'still pending 1 ms before timeout + cooldown')
  clock.advance(1)
  t.ok(breaker.allow(), 'released: a new probe')
  t.notOk(breaker.allow(), 'and only one')
  breaker.success()
  t.notOk(breaker.open, 'which closes it')
})
