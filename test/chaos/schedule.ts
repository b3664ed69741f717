/**
 * The seeded generator: a seed gives one schedule (topology, traffic and
 * faults at offsets from the schedule's start), always the same. Offsets are
 * relative to a start the runner aligns to a multiple of 2 s of wall time, so
 * an offset's phase inside a 1 s or 2 s window is part of the schedule too
 * (a stall placed 50 ms before a window boundary stays there on replay).
 */
import { DRAWN_ROUTES, ROUTES, OVERRIDE } from './routes.js'

export interface ChaosRequest {
  id: number
  at: number
  inst: number
  route: string
  user: string
  cost: number
  /** settle's answer (routes with settle). */
  use?: number
  sleepMs: number
  throws: boolean
  /** The client gives up after this many ms. */
  abortMs?: number
}

export type Fault =
  | { kind: 'redis-stop', at: number, ms: number, node: number }
  /** One Cluster master hung (SIGSTOP) long enough to open its breaker while the others answer. */
  | { kind: 'node-hang', at: number, ms: number, node: number }
  | { kind: 'client-pause', at: number, ms: number, node: number }
  | { kind: 'redis-restart', at: number }
  | { kind: 'wrong-type', at: number, ms: number }
  | { kind: 'instance-kill', at: number, inst: number }
  | { kind: 'stall', at: number, ms: number, inst: number }
  | { kind: 'skew', at: number, inst: number, hours: number }
  | { kind: 'ban', at: number, inst: number, user: string, liftAt?: number }
  | { kind: 'override', at: number, inst: number, user: string, clearAt?: number }
  | { kind: 'migrate', at: number }
  | { kind: 'metrics-throw', at: number, ms: number, inst: number }
  /** A deploy of one instance: app.close() while it listens (held, waiting and settling requests in it), then a new process. */
  | { kind: 'deploy', at: number, inst: number }

export interface Schedule {
  seed: number
  topology: 'standalone' | 'cluster'
  instances: number
  users: string[]
  /** Random traffic and faults happen before this offset; after it, only probes. */
  trafficMs: number
  /** The last probe is sent before this offset. */
  endMs: number
  requests: ChaosRequest[]
  faults: Fault[]
  /** How each instance wires its client (docs: the app's own client, or @fastify/redis). */
  wiring: 'own' | 'fastify-redis'
  /** A small maxDelayed for every instance, and a burst past it in one turn; undefined: the default. */
  maxDelayed?: number
  /** When and where that burst is sent. */
  burst?: { at: number, inst: number }
}

/** mulberry32: a small seeded PRNG, good enough to spread schedules. */
export function rng (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const TRAFFIC_MS = 5000
const TAIL_MS = 2200

/** What the parts of the generator share: the seeded draws, the request maker, the fleet's shape. */
interface Gen {
  random: () => number
  int: (lo: number, hi: number) => number
  pick: <T>(items: readonly T[]) => T
  request: (at: number, route: string, user: string, inst?: number, shape?: Partial<ChaosRequest>) => void
  randomRoute: () => string
  users: string[]
  instances: number
  topology: 'standalone' | 'cluster'
  faults: Fault[]
}

/** Redis-side faults, one after another with gaps, each with the traffic that meets it. */
function addRedisFaults (g: Gen): void {
  const { int, pick, request, randomRoute, users, instances, topology, faults } = g
  // Redis-side faults, one after another with gaps; instance faults anywhere.
  let cursor = int(200, 600)
  const redisKinds = topology === 'cluster'
    ? ['redis-stop', 'client-pause', 'wrong-type', 'migrate', 'migrate'] as const
    : ['redis-stop', 'client-pause', 'wrong-type', 'redis-restart'] as const
  for (let n = int(1, 3); n > 0 && cursor < TRAFFIC_MS - 1200; n--) {
    const kind = pick(redisKinds)
    const node = int(0, 2)
    if (kind === 'redis-stop') {
      const ms = int(30, 160)
      faults.push({ kind, at: cursor, ms, node })
      // Concurrency calls that Redis runs only after the stall, then callers who expect their slot back.
      for (const user of users) request(cursor + int(2, Math.max(3, ms - 10)), 'conc', user, undefined, { sleepMs: int(0, 20) })
      for (const user of users) request(cursor + ms + int(150, 500), 'conc', user, undefined, { sleepMs: int(0, 20) })
      cursor += ms
    } else if (kind === 'client-pause' || kind === 'wrong-type') {
      let ms = int(250, 500)
      if (kind === 'wrong-type') {
        // Keys of the wrong type, planted just before a pause long enough to open the breakers: the probe meets one.
        const pause = int(300, 500)
        ms = pause + int(500, 900)
        faults.push({ kind, at: cursor, ms })
        faults.push({ kind: 'client-pause', at: cursor + 30, ms: pause, node })
        for (let i = 0; i < 6 * instances; i++) request(cursor + 40 + int(0, pause - 60), randomRoute(), pick(users), i % instances)
        for (let i = 0; i < 4 * instances; i++) request(cursor + 30 + pause + 255 + int(0, 120), randomRoute(), pick(users), i % instances)
      } else {
        faults.push({ kind, at: cursor, ms, node })
        for (let i = 0; i < 6 * instances; i++) request(cursor + int(10, ms - 20), randomRoute(), pick(users), i % instances)
      }
      cursor += ms
    } else if (kind === 'redis-restart') {
      faults.push({ kind, at: cursor })
      cursor += 300
    } else {
      faults.push({ kind, at: cursor })
      cursor += 400
    }
    cursor += int(300, 900)
  }
}

/** Instance faults (stalls, a kill, a skewed clock, a throwing exporter), anywhere in the traffic. */
function addInstanceFaults (g: Gen): void {
  const { random, int, pick, request, randomRoute, users, instances, faults } = g
  const instanceFaults = int(1, 3)
  for (let n = 0; n < instanceFaults; n++) {
    const inst = int(0, instances - 1)
    let kind = pick(['instance-kill', 'stall', 'stall', 'skew', 'metrics-throw'] as const)
    // One kill per schedule: a restart takes a second or two, and a second kill would race it.
    if (kind === 'instance-kill' && faults.some((f) => f.kind === 'instance-kill')) kind = 'stall'
    if (kind === 'stall') {
      // Half the stalls start 40-70 ms before a window boundary: a charge just before it resumes after it.
      const boundary = int(1, 4) * 1000
      const at = random() < 0.6 ? boundary - int(40, 70) : int(300, TRAFFIC_MS - 800)
      const ms = int(50, 200)
      faults.push({ kind, at, ms, inst })
      // Reservations charged just before the stall, given back after it; meanwhile other
      // instances fill the next window, which a give-back landing there would reopen.
      const fixed = { sleepMs: 0, throws: false, abortMs: undefined }
      const other = (inst + 1) % instances
      for (const user of users) {
        request(at - int(2, 8), 'fw', user, inst, { ...fixed, cost: 3, use: 0 })
        for (let i = 0; i < 3; i++) request(Math.max(at, boundary) + 5 + int(0, Math.max(1, ms - 70)), 'fw', user, other, { ...fixed, cost: 2, use: 2 })
        for (let i = 0; i < 2; i++) request(at + ms + int(20, 150), 'fw', user, undefined, { ...fixed, cost: 2, use: 2 })
      }
    } else if (kind === 'instance-kill') {
      faults.push({ kind, at: int(300, TRAFFIC_MS - 1500), inst })
    } else if (kind === 'skew') {
      faults.push({ kind, at: int(100, TRAFFIC_MS - 2500), inst, hours: pick([2, -2, 5]) })
    } else {
      const at = int(300, TRAFFIC_MS - 1500)
      faults.push({ kind, at, ms: int(200, 600), inst })
      for (let i = 0; i < 4; i++) request(at + int(5, 150), randomRoute(), pick(users), inst)
    }
  }
}

/** A ban and an override, with the traffic that shows whether every instance honours them. */
function addFleetRecords (g: Gen): void {
  const { random, int, request, instances, faults } = g
  if (random() < 0.6) {
    const at = int(200, TRAFFIC_MS - 2600)
    faults.push({ kind: 'ban', at, inst: int(0, instances - 1), user: 'u2', liftAt: random() < 0.3 ? at + int(2500, 3500) : undefined })
  }
  if (random() < 0.5) {
    const at = int(200, TRAFFIC_MS - 2600)
    faults.push({ kind: 'override', at, inst: int(0, instances - 1), user: 'u1', clearAt: random() < 0.3 ? TRAFFIC_MS + 200 : undefined })
    // Above the route's own limit, within the override's: refused only if the override is lost.
    for (let i = 0; i < 9; i++) request(at + 2300 + i * 40, OVERRIDE.route, 'u1')
  }
}

/** Routes every caller hits during a hang (no host constraint: the checker finds each stream's key by route and caller). */
const HANG_ROUTES = ['gcra', 'sw', 'fw', 'slog'] as const

/**
 * One master of a Cluster hung while the others answer, after the other Redis
 * faults (drawn last, so older seeds keep theirs): 400-900 ms, long enough for
 * its breaker to open (5 timeouts) and short of the cluster's 2 s node timeout.
 * Every caller on a few routes every 30 ms meanwhile: keys on the healthy
 * masters must be decided as usual (checker: healthy-node-never-degrades).
 */
function addNodeHang (g: Gen): void {
  const { int, request, users, faults } = g
  const redisEnd = Math.max(0, ...faults.filter((f) => f.kind !== 'stall' && f.kind !== 'skew' && f.kind !== 'ban' && f.kind !== 'override' && f.kind !== 'instance-kill' && f.kind !== 'metrics-throw')
    .map((f) => f.at + ('ms' in f ? f.ms : 400)))
  const at = Math.max(redisEnd + 800, int(400, 1500))
  const ms = int(400, 900)
  const node = int(0, 2)
  if (at + ms > TRAFFIC_MS - 300) return
  faults.push({ kind: 'node-hang', at, ms, node })
  for (let t = 20; t < ms; t += 30) {
    for (const route of HANG_ROUTES) for (const user of users) request(at + t + int(0, 10), route, user, undefined, { throws: false, abortMs: undefined, sleepMs: int(0, 10) })
  }
}

/** A deploy restarts its instance: about this long until the new process serves. */
const DEPLOY_SPACING_MS = 1700

/**
 * Half the schedules deploy: every instance in turn is closed while it
 * listens (app.close()) and started again, a rolling restart under traffic.
 * Just before each close its instance holds delayed requests (gd past its
 * limit), waiting ones (cw: a holder, two waiters there and one on another
 * instance behind them in the fleet queue) and settles in flight (fw).
 * No deploy near an instance's kill (one restart at a time).
 */
function addDeploys (g: Gen): void {
  const { random, int, pick, request, users, instances, faults } = g
  if (random() >= 0.5) return
  const kills = faults.filter((f) => f.kind === 'instance-kill')
  let at = int(300, 900)
  for (let inst = 0; inst < instances && at < TRAFFIC_MS - 400; inst++, at += DEPLOY_SPACING_MS) {
    if (kills.some((k) => k.inst === inst && Math.abs(k.at - at) < 3000)) continue
    faults.push({ kind: 'deploy', at, inst })
    const user = pick(users)
    const other = (inst + 1) % instances
    const quiet = { throws: false, abortMs: undefined }
    for (let i = 0; i < 6; i++) request(at - 40 + i, 'gd', user, inst, { ...quiet, sleepMs: 0 })
    request(at - 150, 'cw', user, inst, { ...quiet, sleepMs: 400 })
    for (let i = 0; i < 2; i++) request(at - 100 + i, 'cw', user, inst, { ...quiet, sleepMs: 50 })
    if (other !== inst) request(at - 80, 'cw', user, other, { ...quiet, sleepMs: 50 })
    for (let i = 0; i < 2; i++) request(at - 50 + i, 'fw', user, inst, { ...quiet, sleepMs: 200 })
  }
}

export function generate (seed: number): Schedule {
  const random = rng(seed)
  const int = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1))
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
  const topology: Schedule['topology'] = random() < 0.25 ? 'cluster' : 'standalone'
  const instances = random() < 0.5 ? 2 : 3
  const users = ['u0', 'u1', 'u2']
  const requests: ChaosRequest[] = []
  const faults: Fault[] = []
  const home = (user: string): number => Number(user.slice(1)) % instances

  const request = (at: number, route: string, user: string, inst?: number, shape: Partial<ChaosRequest> = {}): void => {
    const spec = ROUTES.find((r) => r.id === route)!
    const cost = spec.maxCost === 1 ? 1 : route === 'tb' ? int(2, spec.maxCost) : int(1, spec.maxCost)
    const use = spec.settle === true ? (random() < 0.5 ? 0 : Math.min(spec.limit, int(0, cost + 1))) : undefined
    const sleepMs = route === 'conc' ? int(30, 300) : route === 'tb' ? int(50, 250) : random() < 0.2 ? int(80, 250) : int(0, 20)
    requests.push({
      id: requests.length,
      at: Math.max(0, Math.round(at)),
      inst: inst ?? (random() < 0.7 ? home(user) : int(0, instances - 1)),
      route,
      user,
      cost,
      use,
      sleepMs,
      throws: random() < (spec.refundOn === true ? 0.25 : 0.05),
      abortMs: random() < 0.05 ? int(5, 80) : undefined,
      ...shape
    })
  }
  const randomRoute = (): string => {
    const route = pick(DRAWN_ROUTES).id
    return route === 'tb2' && random() < 0.5 ? 'ta' : route
  }
  const g: Gen = { random, int, pick, request, randomRoute, users, instances, topology, faults }

  addRedisFaults(g)
  addInstanceFaults(g)
  addFleetRecords(g)
  for (let i = requests.length, total = int(180, 260); i < total; i++) request(int(0, TRAFFIC_MS), randomRoute(), pick(users))
  // The tail: faults are over; every stream is probed from every instance.
  for (const route of DRAWN_ROUTES) {
    for (const user of users) {
      for (let inst = 0; inst < instances; inst++) request(TRAFFIC_MS + int(600, TAIL_MS - 150), route.id, user, inst, { throws: false, abortMs: undefined })
    }
  }
  // A burst on the delaying route: past gcra's 4 at once, turns are reserved and held (drawn last, so older seeds keep their requests).
  const burstAt = int(200, TRAFFIC_MS - 1000)
  const burstUser = pick(users)
  for (let i = 0; i < 9; i++) request(burstAt + i * 3, 'gd', burstUser)
  // A burst on the waiting route: 1 slot, 4 requests of one caller from any instance, each running 100-400 ms: the rest wait in the fleet's queue (drawn after gd's).
  const queueAt = int(200, TRAFFIC_MS - 1500)
  const queueUser = pick(users)
  for (let i = 0; i < 4; i++) request(queueAt + i * 5, 'cw', queueUser, undefined, { sleepMs: int(100, 400) })
  if (topology === 'cluster') addNodeHang(g)
  // Drawn after everything above, so older seeds keep their schedules (these add to them).
  addDeploys(g)
  const wiring = random() < 0.5 ? 'own' : 'fastify-redis'
  let maxDelayed: number | undefined
  let burst: Schedule['burst']
  if (random() < 0.5) {
    maxDelayed = int(2, 4)
    burst = { at: int(300, TRAFFIC_MS - 1500), inst: int(0, instances - 1) }
    // One turn far past the bound (as close to one as a client can send them): held and waiting never exceed it.
    for (let i = 0; i < 24; i++) request(burst.at, 'gb', pick(users), burst.inst, { throws: false, abortMs: undefined, sleepMs: 0 })
    for (let i = 0; i < 8; i++) request(burst.at + 1, 'cw', pick(users), burst.inst, { throws: false, abortMs: undefined, sleepMs: int(100, 300) })
  }
  requests.sort((a, b) => a.at - b.at || a.id - b.id)
  requests.forEach((r, i) => { r.id = i })
  faults.sort((a, b) => a.at - b.at)
  return { seed, topology, instances, users, trafficMs: TRAFFIC_MS, endMs: TRAFFIC_MS + TAIL_MS, requests, faults, wiring, maxDelayed, burst }
}

/** One line per fault, for reports. */
export function describe (schedule: Schedule): string {
  const lines = [`seed ${schedule.seed}: ${schedule.topology}, ${schedule.instances} instances, ${schedule.requests.length} requests over ${schedule.endMs} ms`]
  for (const fault of schedule.faults) {
    const { kind, at, ...rest } = fault
    lines.push(`  +${String(at).padStart(5)} ms  ${kind} ${JSON.stringify(rest)}`)
  }
  return lines.join('\n')
}
