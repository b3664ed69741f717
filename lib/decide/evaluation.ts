import { performance } from 'node:perf_hooks'
import type { RawDecision } from '../store/algorithms.js'
import { retryAfterSeconds, shownRemaining, shownRetryMs, UNAVAILABLE_RETRY_SECONDS, type Charge } from './decision-math.js'
import type { Verdict } from './combine.js'
import type { DecisionInput, DecisionOrigin, Evaluation, Reporter } from './contract.js'
import { decisionChannel, errorCause, type DecisionAttributes, type DecisionSource } from '../diagnostics.js'
import type { CompiledPolicy } from '../policy/policy.js'
import type { DecideMode } from '../store/port.js'
import type { RateLimitPolicyDecision } from '../types/index.js'

function policyDecisions (input: DecisionInput, decisions: ReadonlyArray<RawDecision | undefined>, charge: Charge): RateLimitPolicyDecision[] {
  const out: RateLimitPolicyDecision[] = []
  for (const [i, { run, cost, compiled }] of input.blocks.entries()) {
    const decision = decisions[i]
    if (decision === undefined) continue
    out.push({
      policy: compiled.name,
      allowed: decision.allowed,
      limit: run.params.limit,
      remaining: shownRemaining(decision, cost, charge),
      resetMs: decision.resetMs,
      retryAfterMs: shownRetryMs(decision, charge),
      shadow: run.shadow,
      tier: run.tier
    })
  }
  return out
}

/**
 * The one place an Evaluation is built. Admitting blocks were charged only
 * when the store was asked to charge (`mode`) and nothing refused; a decision
 * is degraded when the store failed (onRedisError decided it: the outcome
 * says `degraded`, or this instance's local limiter answered). `chargedAt`
 * (the store's time of the decision) is left undefined: the caller that has
 * the store's answer sets it (evaluate.ts fromStore).
 */
export function toEvaluation (input: DecisionInput, decisions: ReadonlyArray<RawDecision | undefined>, verdict: Verdict, source: DecisionSource, mode: DecideMode): Evaluation {
  const { policy } = input
  const { rejected, binding, outcome, top } = verdict
  const charge: Charge = mode === 'charge' && !rejected ? 'charged' : 'not-charged'
  const block = input.blocks[binding]
  const run = block?.run
  const waitedMs = Math.round(input.waitedMs ?? 0)
  return {
    input,
    decision: {
      allowed: !rejected,
      limit: run?.params.limit ?? 0,
      remaining: shownRemaining(top, block?.cost ?? 0, charge),
      resetMs: top.resetMs,
      retryAfterMs: shownRetryMs(top, charge),
      policy: block?.compiled.name ?? policy.name,
      degraded: outcome === 'degraded' || source === 'local',
      // Waited for a slot, then admitted: delayed, however its blocks answered this time.
      outcome: !rejected && waitedMs > 0 && outcome !== 'degraded' ? 'delayed' : outcome,
      delayMs: verdict.waitMs + (rejected ? 0 : waitedMs),
      tier: run?.tier,
      policies: policyDecisions(input, decisions, charge)
    },
    decisions,
    rejected,
    charge,
    binding,
    violated: verdict.violated,
    shadowViolated: verdict.shadowViolated,
    retrySeconds: outcome === 'degraded' ? UNAVAILABLE_RETRY_SECONDS : rejected ? retryAfterSeconds(verdict.latestRetryMs) : 0,
    source,
    chargedAt: undefined,
    turnMs: verdict.waitMs,
    queued: verdict.queued
  }
}

/** A decision's trace event: route, policies, outcome, a degraded decision's cause, the store call's latency and size; never an identity value. */
function traceAttributes (input: DecisionInput, origin: DecisionOrigin, evaluation: Evaluation, durationMs: number, failure: unknown): DecisionAttributes {
  const { decision, storeCall } = evaluation
  const attributes: DecisionAttributes = {
    'rate_limit.route': origin.route,
    'rate_limit.policy': decision.policy,
    'rate_limit.policies': input.blocks.map((block) => block.compiled.name),
    'rate_limit.outcome': decision.outcome,
    'rate_limit.source': evaluation.source,
    'rate_limit.duration_ms': durationMs
  }
  if (evaluation.violated.length > 0) attributes['rate_limit.violated'] = evaluation.violated
  if (decision.delayMs > 0) attributes['rate_limit.delay_ms'] = decision.delayMs
  if (failure !== undefined) attributes['rate_limit.degraded_cause'] = errorCause(failure)
  if (storeCall !== undefined) {
    attributes['rate_limit.store.latency_ms'] = storeCall.latencyMs
    attributes['rate_limit.store.batch_size'] = storeCall.size
  }
  return attributes
}

/** The identity part of the refused caller's key (the binding block's: key = head + identity + tail, keys/layout.ts). */
function callerOf (input: DecisionInput, binding: number): string | undefined {
  const key = input.blocks[binding]?.key
  const head = input.policy.keyHeads[binding]
  const tail = input.policy.keyTails[binding]
  if (key === undefined || head === undefined || tail === undefined || !key.startsWith(head) || !key.endsWith(tail)) return key
  return key.slice(head.length, key.length - tail.length)
}

/** The picture's counters (lib/picture/), the metrics and the decision channel, after delivery (evaluate.ts report); `durationMs` measured before it. */
export function publish (runtime: Reporter, input: DecisionInput, origin: DecisionOrigin, evaluation: Evaluation, durationMs: number, failure?: unknown): void {
  const { decision } = evaluation
  const picture = runtime.picture
  if (picture !== undefined) {
    picture.count(origin.route, decision.policy, decision.outcome, evaluation.source, input.waitedMs !== undefined, evaluation.rejected ? callerOf(input, evaluation.binding) : undefined)
  }
  if (runtime.tracing !== undefined) runtime.tracing.decision(traceAttributes(input, origin, evaluation, durationMs, failure))
  const metrics = runtime.metrics
  if (metrics === undefined && !decisionChannel.hasSubscribers) return
  metrics?.decision(origin.route, decision.policy, decision.outcome, durationMs)
  if (evaluation.source === 'deny-cache') metrics?.denyCacheHit(origin.route, decision.policy)
  if (decisionChannel.hasSubscribers) {
    decisionChannel.publish({
      route: origin.route,
      policy: decision.policy,
      outcome: decision.outcome,
      violated: evaluation.violated,
      shadowViolated: evaluation.shadowViolated,
      tier: decision.tier,
      source: evaluation.source,
      durationMs,
      delayMs: decision.delayMs,
      identityKinds: input.policy.identityKinds
    })
  }
  if (decision.delayMs > 0) metrics?.delay(origin.route, decision.policy, decision.delayMs)
}

/** Publishes a decision no store call took: a skip (allowList, skip) or a ban's refusal. */
function publishWithoutStore (runtime: Reporter, policy: CompiledPolicy, outcome: 'skipped' | 'banned', source: 'allow-list' | 'skip' | 'ban', startedAt: number): void {
  runtime.picture?.count(policy.route, policy.name, outcome, source, false, undefined)
  runtime.tracing?.decision({ 'rate_limit.route': policy.route, 'rate_limit.policy': policy.name, 'rate_limit.outcome': outcome, 'rate_limit.source': source })
  const metrics = runtime.metrics
  if (metrics === undefined && !decisionChannel.hasSubscribers) return
  const durationMs = performance.now() - startedAt
  metrics?.decision(policy.route, policy.name, outcome, durationMs)
  if (decisionChannel.hasSubscribers) {
    decisionChannel.publish({ route: policy.route, policy: policy.name, outcome, violated: [], shadowViolated: [], tier: undefined, source, durationMs, delayMs: 0, identityKinds: [] })
  }
}

/**
 * A request let through unlimited by `allowList` or a route's `skip`: no
 * store call and no decision, but counted (`stats().skipped`) and published
 * like one (outcome `skipped`, source `allow-list` or `skip`).
 */
export function recordSkip (runtime: Reporter, policy: CompiledPolicy, source: 'allow-list' | 'skip', startedAt: number): void {
  runtime.stats.skipped++
  publishWithoutStore(runtime, policy, 'skipped', source, startedAt)
}

/** Counts and publishes an operator ban's refusal (outcome `banned`, source `ban`). */
export function recordBan (runtime: Reporter, policy: CompiledPolicy, startedAt: number): void {
  runtime.stats.banned++
  publishWithoutStore(runtime, policy, 'banned', 'ban', startedAt)
}
