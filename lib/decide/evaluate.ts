import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { RawDecision } from '../store/algorithms.js'
import { retryAfterSeconds, shownRemaining, UNAVAILABLE_RETRY_SECONDS } from './decision-math.js'
import type { CircuitBreaker } from './circuit-breaker.js'
import type { DenyCache } from './deny-cache.js'
import { decisionChannel, errorCause, storeErrorChannel, type DecisionSource, type Metrics, type Outcome } from '../diagnostics.js'
import { FST_RRL_REDIS_CIRCUIT_OPEN } from '../errors.js'
import type { BurstLogger, OncePerWindow } from '../util/log-throttle.js'
import { MemoryStore } from '../store/memory/store.js'
import type { CompiledBlock, CompiledPolicy } from '../policy/policy.js'
import type { BlockRun, Store } from '../store/port.js'
import type { RateLimitDecision, RateLimitPolicyDecision, RateLimitStats } from '../types.js'

/*
 * The decision engine: one request's (or one API call's) blocks in, one
 * Evaluation out. Three ways to an answer, in order: the local deny cache, the
 * store (one call for every block), or, when the store fails, the route's
 * onRedisError (a degraded decision). `combine` is the one rule that turns
 * per-block decisions into an outcome and a binding block; the route hook,
 * consume() and peek() all go through it, and `toEvaluation` is the one place
 * an Evaluation is built. Nothing here knows header syntax or reply bodies.
 */

/** What every decision shares: built once per plugin instance. */
export interface Runtime {
  store: Store
  stats: RateLimitStats
  /** Logs store failures at most once per burst (see BurstLogger). */
  failures: BurstLogger
  /** Logs bad cost results at most once per burst. */
  badInput: BurstLogger
  /** The local deny cache, or undefined when `denyCache: false`. */
  denyCache: DenyCache | undefined
  /** Rejections are logged once per identity per window. */
  rejections: OncePerWindow
  /** The plugin clock (the injected test clock, else Date.now). */
  clock: () => number
  /** The plugin option `tier`, if any. */
  tier: ((request: FastifyRequest) => unknown) | undefined
  /** OpenTelemetry instruments, once loaded at ready(). */
  metrics: Metrics | undefined
  /** Skips the store after repeated failures; undefined when `circuitBreaker: false`. */
  breaker: CircuitBreaker | undefined
  /** onRedisError 'local': this instance's own limiter, created at the first local decision. */
  local: MemoryStore | undefined
  /** Keys the local limiter keeps (least recently used evicted first). */
  maxKeys: number
}

/** One decision to take: the policy, the runs for the caller's tier, and one key and cost per block. */
export interface DecisionInput {
  policy: CompiledPolicy
  runs: readonly BlockRun[]
  keys: readonly string[]
  costs: readonly number[]
}

/** Where a decision is reported: the request's logger and the name logs and metrics use. */
export interface DecisionOrigin {
  log: FastifyBaseLogger
  /** `GET /orders/:id`, or `api GET /orders/:id` for consume(). */
  route: string
  source: DecisionSource
}

/** The result of one decision, for the hook (headers, reply) and the API. */
export interface Evaluation {
  decision: RateLimitDecision
  /** Per block, undefined where unknown (a deny-cache answer) or on a store failure. */
  decisions: Array<RawDecision | undefined>
  rejected: boolean
  /** Block the legacy headers and the top-level decision report. */
  binding: number
  violated: string[]
  retrySeconds: number
  source: DecisionSource
}

/** How per-block decisions combine (see combine). */
export interface Verdict {
  rejected: boolean
  binding: number
  outcome: Exclude<Outcome, 'skipped'>
  /** Enforced blocks that refused (names). */
  violated: string[]
  /** Shadow blocks that would have refused, when no enforced block did (names). */
  shadowViolated: string[]
  /** The binding refusal's retry delay (ms), -1 when nothing was refused. */
  latestRetryMs: number
}

/**
 * The one rule for several blocks: refused when any enforced block refuses,
 * and then the binding block is the refusing one with the latest retry;
 * otherwise the enforced block with the fewest units left, or, with no
 * enforced block, the first shadow block that would have refused. Blocks
 * without a decision (a deny-cache answer knows only some) are skipped. Pure.
 */
export function combine (policy: CompiledPolicy, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>): Verdict {
  const count = runs.length
  let rejected = false
  let binding = 0
  let latest = -1
  let fewest = Infinity
  let shadowBinding = -1
  for (let i = 0; i < count; i++) {
    const decision = decisions[i]
    if (decision === undefined) continue
    if ((runs[i] as BlockRun).shadow) {
      if (!decision.allowed && shadowBinding === -1) shadowBinding = i
      continue
    }
    if (!decision.allowed) {
      rejected = true
      if (decision.retryAfterMs > latest) {
        latest = decision.retryAfterMs
        binding = i
      }
    } else if (!rejected && decision.remaining < fewest) {
      fewest = decision.remaining
      binding = i
    }
  }
  const violated: string[] = []
  const shadowViolated: string[] = []
  if (rejected || shadowBinding !== -1) {
    for (let i = 0; i < count; i++) {
      const decision = decisions[i]
      if (decision === undefined || decision.allowed || (runs[i] as BlockRun).shadow !== !rejected) continue
      ;(rejected ? violated : shadowViolated).push((policy.blocks[i] as CompiledBlock).name)
    }
    if (!rejected && fewest === Infinity) binding = shadowBinding
  }
  const outcome: Verdict['outcome'] = rejected ? (decisions[binding]?.penalized === true ? 'penalized' : 'limited') : shadowBinding !== -1 ? 'shadow-limited' : 'allowed'
  return { rejected, binding, outcome, violated, shadowViolated, latestRetryMs: latest }
}

function policyDecisions (policy: CompiledPolicy, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], charged: boolean): RateLimitPolicyDecision[] {
  const out: RateLimitPolicyDecision[] = []
  for (let i = 0; i < runs.length; i++) {
    const decision = decisions[i]
    if (decision === undefined) continue
    const run = runs[i] as BlockRun
    out.push({
      policy: (policy.blocks[i] as CompiledBlock).name,
      allowed: decision.allowed,
      limit: run.params.limit,
      remaining: shownRemaining(decision, costs[i] as number, charged),
      resetMs: decision.resetMs,
      retryAfterMs: decision.retryAfterMs,
      shadow: run.shadow,
      tier: run.tier
    })
  }
  return out
}

/**
 * The one place an Evaluation is built. `top` is the binding block's decision
 * (a stand-in on a degraded one); `charged` says whether admitting blocks
 * were charged, which is what their `remaining` means.
 */
function toEvaluation (input: DecisionInput, decisions: Array<RawDecision | undefined>, verdict: Verdict, top: RawDecision, charged: boolean, source: DecisionSource, degraded = verdict.outcome === 'degraded'): Evaluation {
  const { policy, runs, costs } = input
  const { rejected, binding, outcome } = verdict
  const run = runs[binding] as BlockRun
  return {
    decision: {
      allowed: !rejected,
      limit: run.params.limit,
      remaining: shownRemaining(top, costs[binding] as number, charged),
      resetMs: top.resetMs,
      retryAfterMs: top.retryAfterMs,
      policy: (policy.blocks[binding] as CompiledBlock).name,
      degraded,
      outcome,
      tier: run.tier,
      policies: policyDecisions(policy, runs, decisions, costs, charged)
    },
    decisions,
    rejected,
    binding,
    violated: verdict.violated,
    retrySeconds: outcome === 'degraded' ? UNAVAILABLE_RETRY_SECONDS : rejected ? retryAfterSeconds(verdict.latestRetryMs) : 0,
    source
  }
}

function publish (runtime: Runtime, input: DecisionInput, origin: DecisionOrigin, evaluation: Evaluation, shadowViolated: string[], startedAt: number): void {
  const metrics = runtime.metrics
  if (metrics === undefined && !decisionChannel.hasSubscribers) return
  const durationMs = performance.now() - startedAt
  const { decision } = evaluation
  metrics?.decision(origin.route, decision.policy, decision.outcome, durationMs)
  if (evaluation.source === 'deny-cache') metrics?.denyCacheHit(origin.route, decision.policy)
  if (decisionChannel.hasSubscribers) {
    decisionChannel.publish({
      route: origin.route,
      policy: decision.policy,
      outcome: decision.outcome,
      violated: evaluation.violated,
      shadowViolated,
      tier: decision.tier,
      source: evaluation.source,
      durationMs,
      identityKinds: input.policy.identityKinds
    })
  }
}

/**
 * A request let through unlimited by `allowList` or a route's `skip`: no
 * store call and no decision, but counted (`stats().skipped`) and published
 * like one (outcome `skipped`, source `allow-list` or `skip`).
 */
export function recordSkip (runtime: Runtime, policy: CompiledPolicy, source: 'allow-list' | 'skip', startedAt: number): void {
  runtime.stats.skipped++
  const metrics = runtime.metrics
  if (metrics === undefined && !decisionChannel.hasSubscribers) return
  const durationMs = performance.now() - startedAt
  metrics?.decision(policy.route, policy.name, 'skipped', durationMs)
  if (decisionChannel.hasSubscribers) {
    decisionChannel.publish({ route: policy.route, policy: policy.name, outcome: 'skipped', violated: [], shadowViolated: [], tier: undefined, source, durationMs, identityKinds: [] })
  }
}

/** Any enforced block the local deny cache still refuses: the decisions it knows, else undefined. */
function fromDenyCache (denyCache: DenyCache, input: DecisionInput, now: number): Array<RawDecision | undefined> | undefined {
  const { runs, keys, costs } = input
  let cached: Array<RawDecision | undefined> | undefined
  for (let i = 0; i < runs.length; i++) {
    if ((runs[i] as BlockRun).shadow) continue
    const entry = denyCache.get(keys[i] as string, costs[i] as number, now, runs[i] as BlockRun)
    if (entry === undefined) continue
    cached ??= new Array<RawDecision | undefined>(runs.length)
    const waitMs = entry.until - now
    cached[i] = { allowed: false, remaining: entry.remaining, resetMs: waitMs, retryAfterMs: waitMs, penalized: entry.penalized }
  }
  return cached
}

/** The store failed: the route's onRedisError decides, and the failure is reported (throttled). */
function degraded (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime, error: unknown): Evaluation {
  const { policy, runs, keys, costs } = input
  runtime.stats.degraded++
  const cause = errorCause(error)
  runtime.metrics?.storeError(origin.route, cause)
  if (storeErrorChannel.hasSubscribers) storeErrorChannel.publish({ route: origin.route, cause, error })
  runtime.failures.report(origin.log, { err: error, route: origin.route, policy: policy.name, onRedisError: policy.onRedisError }, policy.onRedisError === 'local' ? 'rate limiter degraded: decided by this instance\'s local limit' : 'rate limiter degraded: decision not enforced')
  if (policy.onRedisError === 'local') {
    // This instance's share of each block (policy.ts made sure every block has one), on its own limiter.
    const local = runtime.local ??= new MemoryStore(runtime.clock, runtime.maxKeys)
    const localRuns = runs.map((run) => ({ ...run, params: run.local ?? run.params }))
    const decisions: Array<RawDecision | undefined> = local.decideNow({ runs: localRuns, keys, costs }, 'charge')
    const verdict = combine(policy, localRuns, decisions)
    if (verdict.rejected) runtime.stats.limited++
    else runtime.stats.allowed++
    return toEvaluation({ ...input, runs: localRuns }, decisions, verdict, decisions[verdict.binding] as RawDecision, !verdict.rejected, 'local', true)
  }
  const closed = policy.onRedisError === 'closed' && !policy.allShadow
  const verdict: Verdict = { rejected: closed, binding: 0, outcome: 'degraded', violated: [], shadowViolated: [], latestRetryMs: -1 }
  const standIn: RawDecision = { allowed: !closed, remaining: 0, resetMs: 0, retryAfterMs: closed ? UNAVAILABLE_RETRY_SECONDS * 1000 : 0 }
  return toEvaluation(input, new Array<RawDecision | undefined>(runs.length), verdict, standIn, true, origin.source)
}

/** Failures that say the store is unhealthy (not a bad key or a full queue): they open the breaker. */
function storeUnhealthy (error: unknown): boolean {
  const cause = errorCause(error)
  return cause === 'timeout' || cause === 'unavailable'
}

/** Once per identity per window, not once per request under a flood. */
function logRefusal (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime, verdict: Verdict, top: RawDecision, now: number): void {
  const { policy, runs, keys } = input
  const { binding, rejected } = verdict
  if (!runtime.rejections.first(keys[binding] as string, now, now + Math.max(top.resetMs, top.retryAfterMs, 1000))) return
  const fields = { route: origin.route, identityKind: policy.identities[policy.identityOf[binding] as number]?.kinds, policy: (policy.blocks[binding] as CompiledBlock).name, limit: (runs[binding] as BlockRun).params.limit, violated: rejected ? verdict.violated : verdict.shadowViolated }
  if (rejected) origin.log.info(fields, 'rate limit exceeded')
  else origin.log.info(fields, 'rate limit exceeded in shadow mode (not enforced)')
}

/**
 * Decides one request (or one consume() call): the local deny cache first,
 * then one store call for every block. Never throws: a store failure becomes a
 * degraded decision by the route's onRedisError.
 */
export async function evaluate (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime): Promise<Evaluation> {
  const startedAt = runtime.metrics !== undefined || decisionChannel.hasSubscribers ? performance.now() : 0
  const { stats, denyCache } = runtime
  const { policy, runs, keys, costs } = input
  const now = runtime.clock()

  // 1. The local deny cache: any enforced block still refused → answer here.
  const cached = denyCache !== undefined && denyCache.size > 0 ? fromDenyCache(denyCache, input, now) : undefined
  if (cached !== undefined) {
    stats.limited++
    const verdict = combine(policy, runs, cached)
    if (verdict.outcome === 'penalized') stats.penalized++
    const evaluation = toEvaluation(input, cached, verdict, cached[verdict.binding] as RawDecision, false, 'deny-cache')
    publish(runtime, input, origin, evaluation, [], startedAt)
    return evaluation
  }

  // 2. One store call for every block.
  let decisions: RawDecision[]
  const breaker = runtime.breaker
  try {
    if (breaker !== undefined && !breaker.allow()) throw new FST_RRL_REDIS_CIRCUIT_OPEN(breaker.failures, breaker.retryInMs)
    decisions = await runtime.store.decide(input, 'charge')
    breaker?.success()
  } catch (error) {
    if (breaker !== undefined && storeUnhealthy(error)) breaker.failure()
    const evaluation = degraded(input, origin, runtime, error)
    publish(runtime, input, origin, evaluation, [], startedAt)
    return evaluation
  }

  const verdict = combine(policy, runs, decisions)
  const { rejected, outcome } = verdict
  if (rejected) {
    stats.limited++
    if (outcome === 'penalized') stats.penalized++
    for (let i = 0; i < runs.length; i++) {
      const run = runs[i] as BlockRun
      const decision = decisions[i] as RawDecision
      if (run.shadow || decision.allowed) continue
      // A block with a penalty counts its refusals in the store, so they reach it until the penalty starts.
      if (run.penalty !== undefined && decision.penalized !== true) continue
      // Remember the refusal locally until the store's own retry time (measured from before the call).
      denyCache?.set(keys[i] as string, now + decision.retryAfterMs, costs[i] as number, decision.remaining, run, decision.penalized === true)
    }
  } else {
    stats.allowed++
    if (outcome === 'shadow-limited') stats.shadowLimited++
  }
  const top = decisions[verdict.binding] as RawDecision
  const evaluation = toEvaluation(input, decisions, verdict, top, !rejected, origin.source)
  if (outcome !== 'allowed') logRefusal(input, origin, runtime, verdict, top, now)
  publish(runtime, input, origin, evaluation, verdict.shadowViolated, startedAt)
  return evaluation
}

/**
 * A dry decision (the API's peek): the store decides and writes nothing, and
 * the same combine applies; `remaining` is what is available now. Store
 * failures reject (the caller asked for state, not for a request to pass).
 */
export async function peek (input: DecisionInput, runtime: Runtime): Promise<RateLimitDecision> {
  const decisions = await runtime.store.decide(input, 'peek')
  const verdict = combine(input.policy, input.runs, decisions)
  return toEvaluation(input, decisions, verdict, decisions[verdict.binding] as RawDecision, false, 'api').decision
}
