import { test } from 'tap'
import { Lanes } from '../../lib/store/redis/lanes.js'

/* Group commit's bookkeeping (lib/store/redis/lanes.ts): pure, no Redis. */

const job = (key: string): { keys: string[] } => ({ keys: [key] })

test('standalone: one lane for every key; full while a call is in flight; waiting jobs come back in arrival order', (t) => {
  const lanes = new Lanes(false, 1)
  const lane = lanes.of(job('rl:{a}:x'))
  t.equal(lanes.of(job('rl:{b}:x')), lane, 'any two keys share the connection\'s lane')
  t.ok(lanes.open(lane))
  lane.sent()
  t.notOk(lanes.open(lane), 'full at maxInFlight')
  const waiting = [job('rl:{a}:1'), job('rl:{b}:2'), job('rl:{c}:3')]
  lane.wait(waiting.slice(0, 2))
  lane.wait(waiting.slice(2))
  t.same(lanes.release(lane, false), waiting, 'released: the jobs that waited, oldest first')
  t.ok(lanes.open(lane))
  t.equal(lanes.size, 1, 'the standalone lane is kept')
  t.end()
})

test('Cluster: a lane per hash tag, dropped when idle; a waiting job keeps the lane shut to newcomers', (t) => {
  const lanes = new Lanes(true, 2)
  const a = lanes.of(job('rl:{a}:x'))
  const b = lanes.of(job('rl:{b}:x'))
  t.not(a, b, 'two hash tags, two lanes')
  t.equal(lanes.of(job('rl:{a}:y')), a, 'same tag, same lane')
  a.sent()
  a.sent()
  a.wait([job('rl:{a}:1')])
  t.equal(lanes.release(a, false)?.length, 1, 'room again: the waiting job goes')
  a.wait([job('rl:{a}:2')])
  t.notOk(lanes.open(a), 'a job waiting: a newcomer joins it rather than overtakes')
  t.same(lanes.release(a, true), [job('rl:{a}:2')], 'abandoned to silence: every waiting job, whatever the room')
  t.equal(lanes.size, 1, 'lane a is idle and dropped; b (never sent) is left to the next of()')
  t.end()
})
