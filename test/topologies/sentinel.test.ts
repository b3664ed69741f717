import { test } from 'tap'
import { Redis } from 'ioredis'
import { buildApp } from '../helpers/app.js'
import { RECOMMENDED_OPTIONS, startSentinel, waitFor, type ManagedSentinel } from '../helpers/topologies.js'

/*
 * A master, a replica and one sentinel, started once for this file. The plugin's
 * client finds the master through Sentinel with the options docs/operations.md
 * recommends. Under ~50 requests/s, `SENTINEL FAILOVER` promotes the replica:
 * every request is answered within the timeout, enforcement resumes, and the
 * over-admission (requests admitted beyond the limit) is measured.
 */
const TIMEOUT = 50
const MARGIN = 150
// Reached at ~4 s (25 requests/s per route), so admissions are still being counted when the failover hits at 2 s.
const LIMIT = 100
const RUN_MS = 6000
const FAILOVER_AT_MS = 2000
const EVERY_MS = 20 // 50 requests/s, alternating the two routes

let topology: ManagedSentinel

test('setup: master, replica, sentinel', async (t) => {
  const started = Date.now()
  topology = await startSentinel()
  t.equal(await topology.masterPort(), topology.master.port)
  t.comment(`figures ${JSON.stringify({ sentinelStartMs: Date.now() - started })}`)
})

test('SENTINEL FAILOVER under ~50 requests/s: bounded decisions, enforcement resumes, over-admission measured', async (t) => {
  const redis = new Redis({
    sentinels: topology.sentinels,
    name: topology.name,
    failoverDetector: true,
    ...RECOMMENDED_OPTIONS
  })
  redis.on('error', () => {})
  const app = await buildApp({ redis, prefix: 'fo', timeout: TIMEOUT })
  const block = { algorithm: 'fixed-window' as const, limit: LIMIT, window: '1h' }
  app.get('/open', { config: { rateLimit: { ...block, onRedisError: 'open' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { ...block, onRedisError: 'closed' } } }, async (req) => req.rateLimit)
  app.get('/warm', { config: { rateLimit: false } }, async () => 'warm')
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  await waitFor('client ready through Sentinel', () => redis.status === 'ready', 5000, 10)
  await app.inject('/warm')

  interface Row { at: number, path: string, status: number, degraded: boolean, ms: number }
  const rows: Row[] = []
  const started = performance.now()
  let failoverAt = -1
  let failoverReply = ''
  for (let i = 0; performance.now() - started < RUN_MS && i < 1000; i++) {
    const tickAt = started + i * EVERY_MS
    const wait = tickAt - performance.now()
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    if (failoverAt < 0 && performance.now() - started >= FAILOVER_AT_MS) {
      failoverAt = performance.now() - started
      // Not awaited on the request path: the sentinel answers OK at once and promotes in the background.
      topology.admin(topology.sentinel.port).call('SENTINEL', 'FAILOVER', topology.name).then((r) => { failoverReply = String(r) }, (e: Error) => { failoverReply = e.message })
    }
    const path = i % 2 === 0 ? '/open' : '/closed'
    const t0 = performance.now()
    const res = await app.inject(path)
    const ms = performance.now() - t0
    const degraded = res.statusCode === 503 || (res.statusCode === 200 && res.json().degraded === true)
    rows.push({ at: t0 - started, path, status: res.statusCode, degraded, ms })
  }
  t.equal(failoverReply, 'OK', 'SENTINEL FAILOVER accepted')
  await waitFor('sentinel names the new master', async () => (await topology.masterPort()) === topology.replica.port, 5000)

  const worst = Math.max(...rows.map((r) => r.ms))
  t.ok(rows.length > 250, `${rows.length} decisions in ${RUN_MS} ms`)
  t.ok(worst < TIMEOUT + MARGIN, `every decision answered within the timeout: worst ${worst.toFixed(1)} ms`)

  const figures: Record<string, unknown> = { requests: rows.length, worstMs: Math.round(worst * 10) / 10, failoverAtMs: Math.round(failoverAt) }
  for (const path of ['/open', '/closed']) {
    const mine = rows.filter((r) => r.path === path)
    const before = mine.filter((r) => r.at < failoverAt)
    const enforcedBefore = before.filter((r) => !r.degraded)
    // A loaded CI machine may miss the 50 ms timeout now and then, failover or not: tolerated, counted, reported.
    t.ok(before.length > 40 && before.length - enforcedBefore.length <= 3 && enforcedBefore.every((r) => r.status === 200), `${path}: ${enforcedBefore.length} of ${before.length} decisions before the failover enforced and admitted`)
    const admitted = mine.filter((r) => r.status === 200).length
    const degraded = mine.filter((r) => r.degraded).length
    // Enforcement has resumed at the first decision after the failover's first degraded one
    // from which five decisions in a row are enforced (0 when the failover degraded nothing).
    const after = mine.filter((r) => r.at >= failoverAt)
    const firstDegraded = after.findIndex((r) => r.degraded)
    let resumeMs = 0
    if (firstDegraded >= 0) {
      const j = after.findIndex((r, k) => k > firstDegraded && after.slice(k, k + 5).length === 5 && after.slice(k, k + 5).every((x) => !x.degraded))
      resumeMs = j < 0 ? Infinity : (after[j] as Row).at - failoverAt
    }
    const lateDegraded = after.filter((r) => r.degraded && r.at - failoverAt > resumeMs).length
    t.ok(resumeMs < 2000, `${path}: enforcement resumed ${resumeMs.toFixed(0)} ms after SENTINEL FAILOVER`)
    t.equal(after.slice(-10).filter((r) => r.status === 429).length, 10, `${path}: the last decisions are 429s: the limit holds on the new master`)
    // Over-admission: degraded fail-open admissions plus writes the demoted master accepted and then lost.
    t.ok(admitted - LIMIT <= LIMIT / 2, `${path}: admitted ${admitted} for a limit of ${LIMIT}`)
    if (path === '/closed') t.equal(mine.filter((r) => r.status === 200 && r.degraded).length, 0, 'fail-closed never admits a degraded request')
    figures[path] = { decisions: mine.length, admitted, limit: LIMIT, overAdmission: admitted - LIMIT, degraded, degradedBeforeFailover: before.length - enforcedBefore.length, degradedAfterResume: lateDegraded, statuses: countBy(mine.map((r) => r.status)), resumeMs: Math.round(resumeMs) }
  }
  // What the new master holds: the count replicated before the failover, plus what was written after.
  const keys = await topology.admin(topology.replica.port).keys('fo:*')
  figures.keysOnNewMaster = keys.length
  t.comment(`figures ${JSON.stringify(figures)}`)
})

function countBy (values: number[]): Record<number, number> {
  const out: Record<number, number> = {}
  for (const v of values) out[v] = (out[v] ?? 0) + 1
  return out
}

test('teardown: sentinel topology stopped', async (t) => {
  await topology.stop()
  t.pass()
})
