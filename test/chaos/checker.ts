/**
 * Compares what clients and instances saw in one run with the reference model
 * of each block, allowing only for what the docs declare (test/chaos/README.md
 * lists every invariant and its allowance). Times are wall-clock ms on this
 * host, which Redis TIME also reads.
 *
 * A request's charge happened inside [lo, hi]: lo is when the instance read
 * it; the dispatcher writes a turn's decisions in that turn's setImmediate and
 * Redis runs them on arrival, so hi is lo + CHARGE_MS (+ lag) unless a Redis fault
 * overlapped the decision (then: when the decision was known, or the fault's
 * end for a decision that degraded, since Redis may still run its call).
 */
import { CLIENT_TIMEOUT_MS, type ClientRecord, type Run } from './runner.js'
import { modelAdmits, type ModelEvent } from './model.js'
import { hashValue } from '../../lib/util/hash.js'
import { keySlot } from '../../lib/store/redis/cluster-slots.js'
import { DEFAULTS, OVERRIDE, ROUTES, routeById, type ChaosRoute } from './routes.js'
import type { ChaosRequest } from './schedule.js'
import type { ServerRecord } from './fleet.js'

export interface Violation {
  invariant: string
  /** Count, order and state invariants fail a seed anywhere; `time` ones only in strict runs. */
  kind: 'state' | 'time'
  detail: string
}

/**
 * Bound on the time from an instance reading a request to Redis running its call, with no Redis fault
 * about, on a quiet core. The event-loop lag the instance measured is added where it applies: CI runs
 * three files at once on two cores, where a turn can wait longer than this (seed 5 failed once there).
 */
const CHARGE_MS = 30
/** A give-back is certainly applied this long after its response closed (its call waits for the next turn's flush), plus the measured lag. */
const GIVE_BACK_MS = 150
/** How long after a Redis fault its effects may still show: one cooldown, two timeouts and a margin. */
const AFTERMATH_MS = DEFAULTS.cooldownMs + 2 * DEFAULTS.timeoutMs + 300
/** A fleet record reaches every instance by its second poll after it was set (plus a margin). */
const RECORD_MS = 2 * DEFAULTS.pollMs + 300
const REDIS_FAULTS = new Set(['redis-stop', 'client-pause', 'redis-restart', 'wrong-type', 'node-hang'])

type Outcome = 'admitted' | 'refused' | 'banned' | 'degraded-open' | 'degraded-closed' | 'unknown' | 'never-arrived'

interface Obs {
  r: ChaosRequest
  route: ChaosRoute
  s: ServerRecord | undefined
  outcome: Outcome
  lo: number
  hi: number
  /** When the response closed (undefined: never known). */
  end: number | undefined
  /** Units given back (settle below the reservation, refundOn), or charged (settle above). */
  delta: number
  /** Event-loop lag its instance measured around its end: added to CHARGE_MS and GIVE_BACK_MS for what runs after it. */
  after: number
}

export interface CheckOptions {
  /** Extra ms each request may take beyond its documented bound; Infinity skips the time invariant. */
  timeSlackMs: number
}

export function check (run: Run, options: CheckOptions): Violation[] {
  const out: Violation[] = []
  const add: Add = (invariant, detail, kind = 'state') => { out.push({ invariant, kind, detail }) }
  const redisFaults = run.faults.filter((f) => REDIS_FAULTS.has(f.fault.kind))
  const faultNear: FaultNear = (from, to, after = 0) => redisFaults.find((f) => f.start <= to && f.end + after >= from)
  const resets = run.faults.flatMap((f) => f.fault.kind === 'redis-restart'
    ? [[f.start, f.end] as const]
    // A planted key loses its state at once and takes none until it expires (every call on it fails): one reset.
    : f.fault.kind === 'wrong-type' ? [[f.start, f.start + 100] as const] : [])
  const restarts = run.faults.filter((f) => f.fault.kind === 'redis-restart')
  const label = (o: Obs): string => `#${o.r.id} +${(o.s?.t0 ?? run.start + o.r.at) - run.start} ms ${o.route.id} ${o.r.user} on instance ${o.r.inst}`

  for (const message of run.unhandled) add('no-unhandled', message)
  for (const message of run.errors) add('harness', message)
  const servers = new Map(run.servers.map((s) => [s.id, s]))
  const lagOf = instanceLag(run.servers)
  const all = run.clients.map((c) => observe(run, c, servers.get(c.id), faultNear, lagOf))
  dump(run, all, label)
  checkRequests(run, all, options, faultNear, add, label)
  checkBans(run, all, restarts, add, label)
  checkNodeIsolation(run, all, add, label)
  checkDeploys(run, all, add, label)
  for (const route of ROUTES) {
    for (const user of run.schedule.users) {
      const stream = all.filter((o) => o.route === route && o.r.user === user)
      if (route.algorithm === 'concurrency') checkSlots(run, stream, faultNear, restarts, add, label)
      else checkRates(run, route, user, stream, all, faultNear, resets, restarts, add, label)
    }
  }
  return out
}

/** One request as the checker sees it: its outcome, when its charge ran, its give-back. */
function observe (run: Run, c: ClientRecord, s: ServerRecord | undefined, faultNear: FaultNear, lagOf: LagOf): Obs {
  const r = run.schedule.requests[c.id] as ChaosRequest
  const route = routeById.get(r.route) as ChaosRoute
  let outcome: Outcome
  if (s === undefined) outcome = c.error === 'ECONNREFUSED' ? 'never-arrived' : 'unknown'
  else if (s.status === 429) outcome = 'refused'
  else if (s.status === 403) outcome = 'banned'
  else if (s.status === 503 && closingAt(run, s.inst, s.tEnd)) outcome = 'unknown' // answered by the plugin's (or Fastify's) close: possibly charged, given back at close
  else if (s.status === 503) outcome = 'degraded-closed'
  else if (s.tDec === undefined || (s.status === 500 && !r.throws)) outcome = 'unknown' // no decision seen, or the plugin failed it
  else outcome = s.degraded ? 'degraded-open' : 'admitted'
  const lo = s?.t0 ?? c.sent
  const decided = s?.tDec ?? s?.tEnd ?? c.answered ?? c.sent + CLIENT_TIMEOUT_MS
  const fault = faultNear(lo, decided)
  let hi = fault === undefined ? Math.min(decided, lo + CHARGE_MS + (s?.lagMs ?? 0)) : decided
  if (fault !== undefined && (outcome === 'degraded-open' || outcome === 'degraded-closed' || outcome === 'unknown')) hi = Math.max(hi, fault.end + DEFAULTS.timeoutMs)
  let delta = 0
  if (s !== undefined && outcome === 'admitted') {
    if (route.settle === true) delta = (r.use ?? 0) - r.cost
    else if (route.refundOn === true && s.status >= 500) delta = -r.cost
  }
  // What a loaded core adds after the response closed (a release, a give-back, a settle's charge wait for a turn).
  const after = s === undefined ? 0 : Math.max(s.lagMs, lagOf(s.inst, s.tEnd, s.tEnd + GIVE_BACK_MS))
  return { r, route, s, outcome, lo, hi, end: s?.tEnd, delta, after }
}

/** Whether `inst` was closing (a deploy: from app.close() until it returned, plus a turn) at `at`. */
function closingAt (run: Run, inst: number, at: number): boolean {
  return run.faults.some((f) => f.fault.kind === 'deploy' && f.fault.inst === inst && f.start <= at && at <= (f.closedAt ?? f.end) + 50)
}

type LagOf = (inst: number, from: number, to: number) => number

/** The worst event-loop lag an instance measured over requests overlapping [from, to]. */
function instanceLag (records: readonly ServerRecord[]): LagOf {
  const byInst = new Map<number, ServerRecord[]>()
  for (const s of records) byInst.set(s.inst, [...(byInst.get(s.inst) ?? []), s])
  return (inst, from, to) => {
    let max = 0
    for (const s of byInst.get(inst) ?? []) if (s.t0 <= to && s.tEnd >= from && s.lagMs > max) max = s.lagMs
    return max
  }
}

/** CHAOS_DUMP=<route>:<user> prints that stream as the checker sees it. */
function dump (run: Run, all: Obs[], label: (o: Obs) => string): void {
  const wanted = process.env.CHAOS_DUMP
  if (wanted === undefined) return
  for (const o of all) {
    if (`${o.route.id}:${o.r.user}` !== wanted) continue
    process.stderr.write(`${label(o)} ${o.outcome} cost ${o.r.cost} delta ${o.delta} lo ${o.lo - run.start} hi ${o.hi - run.start} end ${o.end === undefined ? '-' : o.end - run.start} status ${o.s?.status ?? run.clients[o.r.id]?.error}\n`)
  }
}

/** Per request: answered, no 500 it did not throw, within its time bound; then degraded decisions on a healthy Redis. */
function checkRequests (run: Run, all: Obs[], options: CheckOptions, faultNear: FaultNear, add: Add, label: (o: Obs) => string): void {
  const downAt = (inst: number, from: number, to: number): boolean => (run.down[inst] ?? []).some(([a, b]) => a <= to && b >= from)
  const degraded: Obs[] = []
  for (const o of all) {
    const c = run.clients[o.r.id]!
    if (c.error === 'timeout' && !downAt(o.r.inst, c.sent, c.sent + CLIENT_TIMEOUT_MS)) add('answered', `${label(o)}: no response within ${CLIENT_TIMEOUT_MS} ms`)
    if (o.s !== undefined && o.s.status >= 500 && o.s.status !== 503 && !(o.s.status === 500 && o.r.throws)) add('no-500', `${label(o)}: status ${o.s.status}`)
    if (o.s !== undefined && ![200, 403, 429, 500, 503].includes(o.s.status)) add('status', `${label(o)}: status ${o.s.status}`)
    // Answered within the decision bound, plus the handler, plus the lag the instance measured.
    if (c.answered !== undefined && o.s !== undefined && Number.isFinite(options.timeSlackMs)) {
      const handler = o.outcome === 'admitted' || o.outcome === 'degraded-open' ? o.r.sleepMs : 0
      // A request admitted at a reserved turn is held up to its route's delay, and so is one held there that its
      // instance's close answers 503 (seed 704174186); one that finds no slot waits up to its route's wait.
      const heldForTurn = o.outcome === 'admitted' || o.s.status === 503
      const held = (heldForTurn ? o.route.delayMs ?? 0 : 0) + (o.route.waitMs ?? 0)
      const bound = 2 * DEFAULTS.timeoutMs + handler + held + o.s.lagMs + options.timeSlackMs
      // From when the instance read it: a request sent while its instance's event loop was stalled waits unread, which the lag from t0 on does not see (seed 625838288).
      const took = c.answered - Math.max(c.sent, o.s.t0)
      if (took > bound) add('time-bound', `${label(o)}: answered after ${took} ms, bound ${bound} ms (handler ${handler}, lag ${o.s.lagMs})`, 'time')
    }
    if ((o.outcome === 'degraded-open' || o.outcome === 'degraded-closed') && faultNear(o.lo - AFTERMATH_MS, o.hi) === undefined) degraded.push(o)
  }
  /*
   * Once Redis faults are over (plus one cooldown and two timeouts), nothing
   * degrades. On a healthy Redis a decision degrades only when a core is
   * starved past the 50 ms timeout: a time bound. A breaker left open degrades
   * (nearly) every decision of its instance from then on: that is state, found
   * as at least 4 degraded decisions that are 80 % of the instance's
   * healthy-time decisions from the first of them on.
   */
  for (let inst = 0; inst < run.schedule.instances; inst++) {
    const own = degraded.filter((o) => o.r.inst === inst)
    if (own.length === 0) continue
    const first = own[0]!.lo
    const decided = all.filter((o) => o.r.inst === inst && o.lo >= first && o.s?.tDec !== undefined && o.outcome !== 'banned' && faultNear(o.lo - AFTERMATH_MS, o.hi) === undefined)
    const stuck = own.length >= 4 && own.length >= 0.8 * decided.length
    for (const o of own) add('no-degraded-when-healthy', `${label(o)}: ${o.outcome} (status ${o.s?.status}) with no Redis fault since ${AFTERMATH_MS} ms${stuck ? `; ${own.length} of this instance's ${decided.length} decisions since degraded` : ''}`, stuck ? 'state' : 'time')
  }
}

/**
 * One Cluster master hung: a stream (route and caller: one hash tag, so one
 * master) whose key was on another master as the hang began is decided as
 * usual; none of its decisions inside the hang may degrade. A breaker shared
 * by the whole store degraded most of them (state); one or two can be a core
 * starved past the timeout (time).
 */
function checkNodeIsolation (run: Run, all: Obs[], add: Add, label: (o: Obs) => string): void {
  for (const hang of run.faults.filter((f) => f.fault.kind === 'node-hang')) {
    const hungNode = (hang.fault as { node: number }).node % 3
    // Where each stream's key was (fixed: no other Redis fault, so no migration, overlaps the hang). A slot
    // migrated before the hang is left out: a client writes to its old master until a MOVED or its periodic
    // slots refresh (seed 1416759617: a key moved off the master that then hung, its next call written there).
    const migrated = new Set(run.faults.flatMap((f) => f.fault.kind === 'migrate' && f.start < hang.start ? [Number(/slot (\d+)/.exec(f.note ?? '')?.[1] ?? -1)] : []))
    const nodeOf = (o: Obs): number | undefined => (hang.keys ?? []).find(({ key }) => key.includes(`{GET:${o.route.url}|`) && key.includes(hashValue(o.r.user)) && !migrated.has(keySlot(key)))?.node
    // From two timeouts in (decisions written before the hang are answered) to its end, with no other Redis fault about.
    const from = hang.start + 2 * DEFAULTS.timeoutMs
    const healthy = all.filter((o) => o.route.host === undefined && o.s?.tDec !== undefined && o.lo >= from && o.s.tDec <= hang.end &&
      nodeOf(o) !== undefined && nodeOf(o) !== hungNode &&
      !run.faults.some((f) => f !== hang && REDIS_FAULTS.has(f.fault.kind) && f.start <= o.hi && f.end + AFTERMATH_MS >= o.lo))
    const degraded = healthy.filter((o) => o.outcome === 'degraded-open' || o.outcome === 'degraded-closed')
    const stuck = degraded.length >= 3 && degraded.length >= 0.1 * healthy.length
    for (const o of degraded) add('healthy-node-never-degrades', `${label(o)}: ${o.outcome} while master ${hungNode} hung; its key is on master ${nodeOf(o) ?? '?'} (${degraded.length} of ${healthy.length} decisions on healthy masters degraded)`, stuck ? 'state' : 'time')
  }
}

/**
 * Deploys and bounds. A request held (delay) or waiting (wait) on an instance
 * when its close began is answered by the close, never admitted after it; a
 * cleanly closed instance leaves nothing in the fleet's queues (checked once
 * the traffic is over, unless an instance was killed: its entries wait out
 * their lease); and no instance ever holds and keeps waiting more than its
 * maxDelayed, at any sampled instant.
 */
function checkDeploys (run: Run, all: Obs[], add: Add, label: (o: Obs) => string): void {
  for (const deploy of run.faults.filter((f) => f.fault.kind === 'deploy' && f.closedAt !== undefined)) {
    const inst = (deploy.fault as { inst: number }).inst
    for (const o of all) {
      if (o.r.inst !== inst || o.s?.tDec === undefined || o.s.status >= 300 || o.lo >= deploy.start) continue
      if (o.route.delayMs === undefined && o.route.waitMs === undefined) continue
      if (o.s.tDec > deploy.start + 2 * DEFAULTS.timeoutMs + o.s.lagMs + 50) add('held-answered-at-close', `${label(o)}: held or waiting when its instance began to close (+${deploy.start - run.start} ms), admitted ${o.s.tDec - deploy.start} ms after`)
    }
  }
  if (run.queueEntries > 0 && !run.faults.some((f) => f.fault.kind === 'instance-kill')) add('queues-empty-after-traffic', `${run.queueEntries} entries left in the fleet's slot queues after the traffic, with no instance killed`)
  const bound = run.schedule.maxDelayed
  if (bound !== undefined) {
    const over = run.servers.filter((s) => s.peakHeld > bound)
    if (over.length > 0) add('bound-holds', `instance ${over[0]!.inst} held and kept waiting ${Math.max(...over.map((s) => s.peakHeld))} requests at once, maxDelayed ${bound}`)
  }
}

/**
 * A refusal on a delaying or waiting route by an instance whose maxDelayed
 * was full: documented (docs/shaping.md: past the bound, decisions go without
 * delay or wait), not judged by the model. Full: at least maxDelayed requests
 * of the instance on such routes held, waiting or being decided (a place is
 * taken before the store call) when q arrived.
 */
function refusedAtBound (run: Run, q: Obs, all: Obs[]): boolean {
  const bound = run.schedule.maxDelayed
  if (bound === undefined || (q.route.delayMs === undefined && q.route.waitMs === undefined)) return false
  let taken = 0
  for (const r of all) {
    if (r === q || r.r.inst !== q.r.inst || (r.route.delayMs === undefined && r.route.waitMs === undefined) || r.lo > q.lo) continue
    if ((r.s?.tDec ?? r.end ?? Infinity) >= q.lo) taken++
  }
  return taken >= bound
}

type Add = (invariant: string, detail: string, kind?: 'state' | 'time') => void
type FaultNear = (from: number, to: number, after?: number) => { start: number, end: number } | undefined

function checkBans (run: Run, all: Obs[], restarts: Run['faults'], add: Add, label: (o: Obs) => string): void {
  const bans = run.faults.filter((f) => f.fault.kind === 'ban' && f.setAt !== undefined)
  for (const o of all) {
    // Unknown outcomes (no decision seen) are judged by `answered` and `no-500`.
    if (o.s === undefined || o.outcome === 'unknown') continue
    const own = bans.filter((b) => b.fault.kind === 'ban' && b.fault.user === o.r.user)
    // A restart without persistence loses the ban with the rest of the data.
    const lostAt = (b: typeof own[number]): number => Math.min(b.clearedAt ?? Infinity, ...restarts.filter((x) => x.start > b.setAt!).map((x) => x.start))
    const certain = own.some((b) => o.lo >= b.setAt! + RECORD_MS && o.hi < lostAt(b))
    const possible = own.some((b) => o.hi >= b.start && o.lo <= lostAt(b) + RECORD_MS)
    if (certain && o.outcome !== 'banned') add('ban-honoured', `${label(o)}: status ${o.s.status} although ${o.r.user} was banned ${o.lo - own[0]!.setAt!} ms before`)
    if (!possible && o.outcome === 'banned') add('no-ban-without-ban', `${label(o)}: 403 with no ban in force`)
  }
}

function checkSlots (run: Run, stream: Obs[], faultNear: FaultNear, restarts: Run['faults'], add: Add, label: (o: Obs) => string): void {
  const lease = DEFAULTS.leaseMs
  const killedAt = (o: Obs): number => Math.min(...(run.down[o.r.inst] ?? []).map(([a]) => a).filter((a) => a >= o.lo), Infinity)
  for (const q of stream) {
    // Never more than N (= 1) in flight: two admissions held their slots at once.
    if (q.outcome === 'admitted' && q.s?.tDec !== undefined) {
      const other = stream.find((r) => r !== q && r.outcome === 'admitted' && r.s?.tDec !== undefined && r.s.tDec < q.s!.tDec! && r.s.tEnd > q.s!.tDec! + CHARGE_MS + r.after)
      // A Redis restart between the two decisions lost the slot (no persistence): declared, like any state lost there.
      const lost = other !== undefined && restarts.some((x) => x.start >= other.s!.tDec! - CHARGE_MS && x.start <= q.s!.tDec!)
      if (other !== undefined && !lost) add('concurrency-bound', `${label(q)} admitted while ${label(other)} held the only slot`)
    }
    if (q.outcome !== 'refused') continue
    if (faultNear(q.lo - 2 * DEFAULTS.timeoutMs, q.hi) !== undefined) continue
    // A refusal needs something of the caller's possibly in flight: its own requests, a killed instance's slots until their lease ends.
    // A release held up by a Redis fault (a decision given up on, or the end of a request, during it) on an
    // instance killed before that fault ended may never run: it waited behind the fault on a connection that
    // died with the instance (seeds 1248787101, 1896854235: the slot stayed). The slot is the killed instance's until its lease ends,
    // although the response came back.
    const orphaned = (r: Obs): boolean => {
      const fault = (r.outcome === 'admitted' ? undefined : faultNear(r.lo, r.hi)) ??
        (r.end === undefined ? undefined : faultNear(r.end, r.end + CHARGE_MS + r.after))
      return fault !== undefined && killedAt(r) <= fault.end + DEFAULTS.timeoutMs
    }
    const holder = stream.find((r) => r !== q && r.lo <= q.hi && (r.outcome === 'admitted' || r.outcome === 'degraded-open' || r.outcome === 'unknown') &&
      (r.end !== undefined && !orphaned(r) ? Math.max(r.end, r.hi) + CHARGE_MS + r.after : Math.min(killedAt(r) + lease, r.lo + CLIENT_TIMEOUT_MS + lease)) >= q.lo)
    if (holder === undefined) add('no-slot-refusal-when-idle', `${label(q)}: 429 with nothing of the caller's in flight`)
  }
}

function overrideLimit (run: Run, route: ChaosRoute, user: string, lo: number, hi: number, restarts: Run['faults'], strict: boolean): number {
  if (route.id !== OVERRIDE.route) return route.limit
  for (const f of run.faults) {
    if (f.fault.kind !== 'override' || f.fault.user !== user || f.setAt === undefined) continue
    const lost = Math.min(f.clearedAt ?? Infinity, ...restarts.filter((x) => x.start > f.setAt!).map((x) => x.start))
    if (strict ? lo >= f.setAt + RECORD_MS && hi < lost : hi >= f.start && lo <= lost + RECORD_MS) return OVERRIDE.limit
  }
  return route.limit
}

function checkRates (run: Run, route: ChaosRoute, user: string, stream: Obs[], all: Obs[], faultNear: FaultNear, resets: ReadonlyArray<readonly [number, number]>, restarts: Run['faults'], add: Add, label: (o: Obs) => string): void {
  const resetBetween = (from: number, to: number, certain: boolean): boolean => resets.some(([a, b]) => certain ? a > from && b < to : a <= to && b >= from)
  for (const q of stream) {
    if (q.outcome === 'admitted') {
      // Most favourable to admission: only charges certainly before q and certainly kept, at their earliest;
      // every give-back possibly before q, charged at its latest.
      const events: ModelEvent[] = []
      for (const r of stream) {
        if (r === q || r.outcome !== 'admitted' || r.hi >= q.lo || resetBetween(r.lo, q.hi, false)) continue
        events.push({ kind: 'charge', at: r.lo, cost: r.r.cost })
        if (r.end !== undefined && r.delta < 0 && r.end < q.hi) events.push({ kind: 'give-back', at: r.end, units: -r.delta, chargedAt: Math.min(r.hi, r.end) })
        // An extra charge certainly applied before q counts at its earliest, the response's end: a later moment
        // could move it past a window boundary into q's window (seed 276753227: fixed-window, a settle's +1 at 1970 ms
        // counted in the next window, so a fair admission looked like one over the limit).
        if (r.end !== undefined && r.delta > 0 && r.end + CHARGE_MS + r.after < q.lo && faultNear(r.end, r.end + CHARGE_MS + r.after) === undefined) events.push({ kind: 'extra', at: r.end, units: r.delta })
      }
      events.sort((a, b) => a.at - b.at)
      const limit = overrideLimit(run, route, user, q.lo, q.hi, restarts, false)
      if (!modelAdmits(route, events, q.hi, q.r.cost, limit)) add('admitted-within-model', `${label(q)}: admitted (cost ${q.r.cost}) where the ${route.algorithm} model (limit ${limit}) refuses`)
    } else if (q.outcome === 'refused') {
      // Least favourable: every charge possibly before q (degraded and unknown ones too) at its latest,
      // give-backs only when certainly applied before q, charged at its earliest.
      const events: ModelEvent[] = []
      for (const r of stream) {
        // r.lo == q.hi: the same turn's batch, in which r may be decided first.
        if (r === q || r.lo > q.hi || resetBetween(r.hi, q.lo, true)) continue
        if (r.outcome !== 'admitted' && r.outcome !== 'degraded-open' && r.outcome !== 'degraded-closed' && r.outcome !== 'unknown') continue
        events.push({ kind: 'charge', at: Math.min(r.hi, q.lo), cost: r.r.cost })
        if (r.end !== undefined && r.delta < 0 && r.end + GIVE_BACK_MS + r.after < q.lo && faultNear(r.end, r.end + DEFAULTS.timeoutMs + GIVE_BACK_MS + r.after) === undefined) {
          events.push({ kind: 'give-back', at: r.end + GIVE_BACK_MS + r.after, units: -r.delta, chargedAt: r.lo })
        }
        if (r.end !== undefined && r.delta > 0 && r.end < q.lo) events.push({ kind: 'extra', at: Math.min(r.end + CHARGE_MS + r.after, q.lo), units: r.delta })
      }
      events.sort((a, b) => a.at - b.at)
      const limit = overrideLimit(run, route, user, q.lo, q.hi, restarts, true)
      if (!modelAdmits(route, events, q.lo, q.r.cost, limit)) continue
      if (refusedAtBound(run, q, all)) continue
      const denied = deniedLocally(q, stream)
      if (denied === true) continue
      add('refused-only-by-model', `${label(q)}: 429 (cost ${q.r.cost}) where the ${route.algorithm} model (limit ${limit}) admits${denied === false ? '' : `; ${denied}`}`)
    }
  }
}

/**
 * The instance's own deny cache may refuse until the retry time Redis gave
 * an earlier refusal of the same key on it, unless that instance gave units
 * back for the key since (other instances' give-backs do not reach it).
 * true: excused; false: no entry; a string: an entry this instance's own
 * give-back should have cleared (what a kept deny-cache entry looks like).
 */
function deniedLocally (q: Obs, stream: Obs[]): boolean | string {
  let stale: string | false = false
  for (const r of stream) {
    if (r === q || r.outcome !== 'refused' || r.s === undefined || r.r.inst !== q.r.inst) continue
    const from = r.s.tDec ?? r.s.tEnd
    if (from > q.lo || from + (r.s.retryAfterMs ?? 0) + 50 < q.lo) continue
    const clear = stream.find((g) => g.r.inst === q.r.inst && g.delta < 0 && g.end !== undefined && g.end > from && g.end + GIVE_BACK_MS + g.after < q.lo)
    if (clear === undefined) return true
    stale = `#${r.r.id}'s deny-cache entry on this instance (retry ${r.s.retryAfterMs ?? 0} ms) outlived #${clear.r.id}'s give-back of ${-clear.delta} units there`
  }
  return stale
}
