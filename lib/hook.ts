import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { RawDecision } from './algorithm-types.js'
import type { DenyCache, OncePerWindow } from './deny-cache.js'
import { decisionChannel, errorCause, storeErrorChannel, type DecisionSource, type Metrics, type Outcome } from './diagnostics.js'
import { FST_RRL_INVALID_COST } from './errors.js'
import { retryAfterSeconds, type HeaderWriter } from './headers.js'
import type { BlockRun, CompiledBlock, CompiledPolicy } from './policy.js'
import { sendQuotaExceeded, sendUnavailable, UNAVAILABLE_RETRY_SECONDS } from './replies.js'
import type { Store } from './store.js'
import type { RateLimitDecision, RateLimitPolicyDecision, RateLimitStats } from './types.js'

/** What every route hook shares: built once per plugin instance. */
export interface Runtime {
  store: Store
  writeHeaders: HeaderWriter
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
  tier: ((request: FastifyRequest) => string | undefined) | undefined
  /** OpenTelemetry instruments, once loaded at ready(). */
  metrics: Metrics | undefined
}

/**
 * Logs the first event of a burst and counts the rest, so a Redis outage at
 * thousands of requests per second produces one line per second, not one per
 * request. The next line carries how many were suppressed.
 */
export class BurstLogger {
  readonly #intervalMs: number
  #lastAt = -Infinity
  #suppressed = 0

  constructor (intervalMs = 1000) {
    this.#intervalMs = intervalMs
  }

  report (log: FastifyBaseLogger, fields: Record<string, unknown>, message: string): void {
    const now = Date.now()
    if (now - this.#lastAt < this.#intervalMs) {
      this.#suppressed++
      return
    }
    log.warn({ ...fields, suppressed: this.#suppressed }, message)
    this.#lastAt = now
    this.#suppressed = 0
  }
}

const MAX_COST = 100_000_000

function requestCost (block: CompiledBlock, route: string, request: FastifyRequest, runtime: Runtime): number {
  const cost = block.cost
  if (typeof cost === 'number') return cost
  let value: unknown
  try {
    value = cost(request)
  } catch (error) {
    value = error
  }
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_COST) return value
  // A broken cost function must neither crash the request nor let it through for free.
  // An async one's rejection must not go unhandled; an odd value is described by its type only.
  const thenable = value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as { then?: unknown }).then === 'function'
  if (thenable) Promise.resolve(value).catch(() => {})
  const shown = value instanceof Error
    ? `an error (${value.message})`
    : typeof value === 'number' ? String(value) : thenable ? 'a Promise (cost functions must be synchronous)' : `a value of type ${value === null ? 'null' : typeof value}`
  runtime.badInput.report(request.log, { err: new FST_RRL_INVALID_COST(route, shown), route }, 'rate limit cost function returned an invalid cost')
  return 1
}

/** The runs for this request's tier (the fallback tier when it has none or an unknown one). */
export function runsForTier (policy: CompiledPolicy, tier: string | undefined): readonly BlockRun[] {
  if (policy.tierRuns === undefined || tier === undefined) return policy.runs
  return policy.tierRuns.get(tier) ?? policy.runs
}

function requestTier (policy: CompiledPolicy, request: FastifyRequest, runtime: Runtime): string | undefined {
  const tier = runtime.tier
  if (policy.tierRuns === undefined || tier === undefined) return undefined
  try {
    const value = tier(request)
    return typeof value === 'string' ? value : undefined
  } catch {
    return undefined
  }
}

/** One key per block: head + the block's identity + tail. Identities are resolved once each. */
export function requestKeys (policy: CompiledPolicy, request: FastifyRequest): string[] {
  const { identities, identityOf, keyHeads, keyTails } = policy
  if (identities.length === 1) {
    const identity = (identities[0] as CompiledPolicy['identities'][0]).resolve(request)
    const keys = new Array<string>(keyHeads.length)
    for (let i = 0; i < keyHeads.length; i++) keys[i] = (keyHeads[i] as string) + identity + (keyTails[i] as string)
    return keys
  }
  const resolved = identities.map((identity) => identity.resolve(request))
  return keyHeads.map((head, i) => head + (resolved[identityOf[i] as number] as string) + (keyTails[i] as string))
}

export function requestCosts (policy: CompiledPolicy, request: FastifyRequest, runtime: Runtime): number[] {
  const blocks = policy.blocks
  const costs = new Array<number>(blocks.length)
  for (let i = 0; i < blocks.length; i++) costs[i] = requestCost(blocks[i] as CompiledBlock, policy.route, request, runtime)
  return costs
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

function policyDecisions (policy: CompiledPolicy, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean): RateLimitPolicyDecision[] {
  const out: RateLimitPolicyDecision[] = []
  for (let i = 0; i < runs.length; i++) {
    const decision = decisions[i]
    if (decision === undefined) continue
    const run = runs[i] as BlockRun
    out.push({
      policy: (policy.blocks[i] as CompiledBlock).name,
      allowed: decision.allowed,
      limit: run.params.limit,
      remaining: rejected && decision.allowed ? decision.remaining + (costs[i] as number) : decision.remaining,
      resetMs: decision.resetMs,
      retryAfterMs: decision.retryAfterMs,
      shadow: run.shadow,
      tier: run.tier
    })
  }
  return out
}

function publish (runtime: Runtime, policy: CompiledPolicy, route: string, evaluation: Evaluation, shadowViolated: string[], startedAt: number): void {
  const metrics = runtime.metrics
  if (metrics === undefined && !decisionChannel.hasSubscribers) return
  const durationMs = performance.now() - startedAt
  const { decision } = evaluation
  metrics?.decision(route, decision.policy, decision.outcome, durationMs)
  if (evaluation.source === 'deny-cache') metrics?.denyCacheHit(route, decision.policy)
  if (decisionChannel.hasSubscribers) {
    decisionChannel.publish({
      route,
      policy: decision.policy,
      outcome: decision.outcome,
      violated: evaluation.violated,
      shadowViolated,
      tier: decision.tier,
      source: evaluation.source,
      durationMs,
      identityKinds: policy.identityKinds
    })
  }
}

/**
 * Decides one request (or one API call): the local deny cache first, then one
 * store call for every block. Never throws: a store failure becomes a degraded
 * decision by the route's onRedisError.
 */
export async function evaluate (policy: CompiledPolicy, runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], runtime: Runtime, log: FastifyBaseLogger, route: string, source: DecisionSource): Promise<Evaluation> {
  const startedAt = runtime.metrics !== undefined || decisionChannel.hasSubscribers ? performance.now() : 0
  const { stats, denyCache } = runtime
  const count = runs.length
  const now = runtime.clock()

  // 1. The local deny cache: any enforced block still refused → answer here.
  if (denyCache !== undefined && denyCache.size > 0) {
    let cached: Array<RawDecision | undefined> | undefined
    let binding = -1
    let latest = 0
    for (let i = 0; i < count; i++) {
      if ((runs[i] as BlockRun).shadow) continue
      const entry = denyCache.get(keys[i] as string, costs[i] as number, now, runs[i] as BlockRun)
      if (entry === undefined) continue
      cached ??= new Array<RawDecision | undefined>(count)
      const waitMs = entry.until - now
      cached[i] = { allowed: false, remaining: entry.remaining, resetMs: waitMs, retryAfterMs: waitMs }
      if (waitMs > latest) {
        latest = waitMs
        binding = i
      }
    }
    if (cached !== undefined) {
      stats.limited++
      const violated: string[] = []
      for (let i = 0; i < count; i++) if (cached[i] !== undefined) violated.push((policy.blocks[i] as CompiledBlock).name)
      const run = runs[binding] as BlockRun
      const evaluation: Evaluation = {
        decision: {
          allowed: false,
          limit: run.params.limit,
          remaining: cached[binding]?.remaining ?? 0,
          resetMs: latest,
          retryAfterMs: latest,
          policy: (policy.blocks[binding] as CompiledBlock).name,
          degraded: false,
          outcome: 'limited',
          tier: run.tier,
          policies: policyDecisions(policy, runs, cached, costs, true)
        },
        decisions: cached,
        rejected: true,
        binding,
        violated,
        retrySeconds: retryAfterSeconds(latest),
        source: 'deny-cache'
      }
      publish(runtime, policy, route, evaluation, [], startedAt)
      return evaluation
    }
  }

  // 2. One store call for every block.
  let decisions: RawDecision[]
  try {
    decisions = await runtime.store.decide(runs, keys, costs, false)
  } catch (error) {
    stats.degraded++
    const cause = errorCause(error)
    runtime.metrics?.storeError(route, cause)
    if (storeErrorChannel.hasSubscribers) storeErrorChannel.publish({ route, cause, error })
    runtime.failures.report(log, { err: error, route, policy: policy.name, onRedisError: policy.onRedisError }, 'rate limiter degraded: decision not enforced')
    const closed = policy.onRedisError === 'closed' && !policy.allShadow
    const run = runs[0] as BlockRun
    const evaluation: Evaluation = {
      decision: {
        allowed: !closed,
        limit: run.params.limit,
        remaining: 0,
        resetMs: 0,
        retryAfterMs: closed ? UNAVAILABLE_RETRY_SECONDS * 1000 : 0,
        policy: policy.name,
        degraded: true,
        outcome: 'degraded',
        tier: run.tier,
        policies: []
      },
      decisions: new Array<RawDecision | undefined>(count),
      rejected: closed,
      binding: 0,
      violated: [],
      retrySeconds: UNAVAILABLE_RETRY_SECONDS,
      source
    }
    publish(runtime, policy, route, evaluation, [], startedAt)
    return evaluation
  }

  let rejected = false
  let binding = 0
  let latest = -1
  let fewest = Infinity
  let shadowBinding = -1
  for (let i = 0; i < count; i++) {
    const decision = decisions[i] as RawDecision
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
  let shadowViolated: string[] = []
  if (rejected) {
    for (let i = 0; i < count; i++) {
      const run = runs[i] as BlockRun
      const decision = decisions[i] as RawDecision
      if (run.shadow || decision.allowed) continue
      violated.push((policy.blocks[i] as CompiledBlock).name)
      // Remember the refusal locally until the store's own retry time (measured from before the call).
      denyCache?.set(keys[i] as string, now + decision.retryAfterMs, costs[i] as number, decision.remaining, run)
    }
  } else if (shadowBinding !== -1) {
    shadowViolated = []
    for (let i = 0; i < count; i++) {
      if ((runs[i] as BlockRun).shadow && !(decisions[i] as RawDecision).allowed) shadowViolated.push((policy.blocks[i] as CompiledBlock).name)
    }
    if (policy.allShadow || fewest === Infinity) binding = shadowBinding
  }
  let outcome: Outcome
  if (rejected) {
    outcome = 'limited'
    stats.limited++
  } else if (shadowBinding !== -1) {
    outcome = 'shadow-limited'
    stats.shadowLimited++
    stats.allowed++
  } else {
    outcome = 'allowed'
    stats.allowed++
  }
  const top = decisions[binding] as RawDecision
  const run = runs[binding] as BlockRun
  const evaluation: Evaluation = {
    decision: {
      allowed: !rejected,
      limit: run.params.limit,
      remaining: top.remaining,
      resetMs: top.resetMs,
      retryAfterMs: top.retryAfterMs,
      policy: (policy.blocks[binding] as CompiledBlock).name,
      degraded: false,
      outcome,
      tier: run.tier,
      policies: policyDecisions(policy, runs, decisions, costs, rejected)
    },
    decisions,
    rejected,
    binding,
    violated,
    retrySeconds: rejected ? retryAfterSeconds(latest) : 0,
    source
  }

  if (outcome !== 'allowed') {
    // Once per identity per window, not once per request under a flood.
    const logKey = keys[binding] as string
    if (runtime.rejections.first(logKey, now, now + Math.max(top.resetMs, top.retryAfterMs, 1000))) {
      const fields = { route, identityKind: policy.identities[policy.identityOf[binding] as number]?.kinds, policy: evaluation.decision.policy, limit: run.params.limit, violated: rejected ? violated : shadowViolated }
      if (rejected) log.info(fields, 'rate limit exceeded')
      else log.info(fields, 'rate limit exceeded in shadow mode (not enforced)')
    }
  }
  publish(runtime, policy, route, evaluation, shadowViolated, startedAt)
  return evaluation
}

/** What an admitted request spent, for refundOn (only on routes with a refundOn block). */
interface Charged {
  runs: readonly BlockRun[]
  keys: readonly string[]
  costs: readonly number[]
  decisions: ReadonlyArray<RawDecision | undefined>
  /** Plugin clock at the decision, so the script can find the window the units were spent in. */
  at: number
}
const CHARGED = Symbol('rateLimit.charged')

/**
 * onResponse for routes with a refundOn block: units spent by a request whose
 * reply matches are given back, in one store call, once (the record is taken
 * off the request before the call). Only blocks that charged the request are
 * refunded. A refund that fails is logged (as store failures are) and dropped.
 */
export function createRefundHook (policy: CompiledPolicy, runtime: Runtime) {
  return async function rateLimitRefund (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const holder = request as unknown as Record<symbol, Charged | undefined>
    const charged = holder[CHARGED]
    if (charged === undefined) return
    holder[CHARGED] = undefined
    let runs: BlockRun[] | undefined
    let keys: string[] | undefined
    let costs: number[] | undefined
    for (let i = 0; i < charged.runs.length; i++) {
      const refundOn = (policy.blocks[i] as CompiledBlock).refundOn
      if (refundOn === undefined || charged.decisions[i]?.allowed !== true) continue
      let matches = false
      try {
        matches = refundOn(reply) === true
      } catch (error) {
        runtime.badInput.report(request.log, { err: error, route: policy.route }, 'rate limit refundOn threw; no refund')
      }
      if (!matches) continue
      runs ??= []
      keys ??= []
      costs ??= []
      runs.push(charged.runs[i] as BlockRun)
      keys.push(charged.keys[i] as string)
      costs.push(charged.costs[i] as number)
    }
    if (runs === undefined || keys === undefined || costs === undefined) return
    try {
      await runtime.store.refund(runs, keys, costs, runtime.clock() - charged.at)
      runtime.stats.refunded++
    } catch (error) {
      runtime.failures.report(request.log, { err: error, route: policy.route }, 'rate limit refund failed: units not given back')
    }
  }
}

/**
 * The per-route hook (onRequest, or preValidation when the identity needs the
 * body). One store call for every block (or none, from the deny cache), then
 * headers and either continue or a refusal.
 */
export function createRouteHook (policy: CompiledPolicy, runtime: Runtime) {
  const { writeHeaders } = runtime
  const route = policy.route

  return async function rateLimitHook (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const runs = runsForTier(policy, requestTier(policy, request, runtime))
    const keys = requestKeys(policy, request)
    const costs = requestCosts(policy, request, runtime)
    const evaluation = await evaluate(policy, runs, keys, costs, runtime, request.log, route, 'store')
    request.rateLimit = evaluation.decision
    if (evaluation.decision.degraded) {
      return evaluation.rejected ? sendUnavailable(request, reply, policy) : undefined
    }
    writeHeaders(reply, policy, runs, evaluation.decisions, costs, evaluation.rejected, evaluation.binding)
    if (!evaluation.rejected) {
      if (policy.refunds) (request as unknown as Record<symbol, Charged>)[CHARGED] = { runs, keys, costs, decisions: evaluation.decisions, at: runtime.clock() }
      return undefined
    }
    return sendQuotaExceeded(request, reply, policy, evaluation.retrySeconds, evaluation.violated)
  }
}
