import type { FastifyReply, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { SkipPredicate } from './allow-list.js'
import { evaluate, recordSkip, type DecisionInput, type Evaluation } from '../decide/evaluate.js'
import { checkForwarded } from './proxy-check.js'
import type { HeaderWriter } from '../reply/headers.js'
import type { Overrides } from '../api/overrides.js'
import { refuseBanned, type BanRuntime } from './ban-refusal.js'
import { runsForTier, type CompiledPolicy } from '../policy/policy.js'
import type { Refuse } from '../reply/problem.js'
import { requestCosts, requestKeys, requestLimits, requestTier, skipChecks, skipSource, withLimits, type InputRuntime } from './inputs.js'
import { trackEnd } from './end-of-request.js'
import { holdSlots, newSlotId } from '../decide/slots.js'

/*
 * The Fastify side of a route's limit: operator bans (ban-refusal.ts), what
 * one request contributes (inputs.ts), the decision (decide/), then headers
 * and either continue or a refusal; end-of-request.ts changes usage when the
 * request ends (refundOn, settle) and gives back its concurrency slots.
 */

/** The decision runtime plus what the plugin options chose: header writer, allow list, refusal path. */
export interface RouteRuntime extends InputRuntime, BanRuntime {
  writeHeaders: HeaderWriter
  /** Runtime overrides of block limits (fastify.rateLimit.setOverride). */
  overrides: Overrides
  /** The plugin's `allowList`, as a predicate; undefined: none. */
  allowList: SkipPredicate | undefined
  refuse: Refuse
}

function withRuns (policy: CompiledPolicy, request: FastifyRequest, runtime: RouteRuntime, tier: string | undefined, limits: Array<number | undefined> | undefined, keys: string[]): DecisionInput {
  const tierRuns = runsForTier(policy, tier)
  const runs = runtime.overrides.apply(policy, limits === undefined ? tierRuns : withLimits(policy, tierRuns, limits), keys)
  const input: DecisionInput = { policy, runs, keys, costs: requestCosts(policy, request, runtime) }
  if (policy.concurrency) input.slot = newSlotId()
  return input
}

/** Tier, limits and keys start together; a Promise only when an async function made one. */
function decisionInput (policy: CompiledPolicy, request: FastifyRequest, runtime: RouteRuntime): DecisionInput | Promise<DecisionInput> {
  const tier = requestTier(policy, request, runtime)
  const limits = policy.requestLimits ? requestLimits(policy, request, runtime) : undefined
  const keys = requestKeys(policy, request)
  if (tier instanceof Promise || limits instanceof Promise || keys instanceof Promise) {
    return Promise.all([tier, limits, keys]).then(([t, l, k]) => withRuns(policy, request, runtime, t, l, k))
  }
  return withRuns(policy, request, runtime, tier, limits, keys)
}

/**
 * An admitted request's end is tracked when the store charged it (its refunds
 * and settles) or when it holds slots (a concurrency block; with onRedisError
 * 'local', on this instance's limiter, whose decisions are never refunded to
 * the store). Right after the decision: nothing may throw between taking a
 * slot and arranging its release.
 */
function trackAdmitted (request: FastifyRequest, reply: FastifyReply, policy: CompiledPolicy, input: DecisionInput, evaluation: Evaluation, runtime: RouteRuntime): void {
  const slots = policy.concurrency ? holdSlots(runtime, input, evaluation, request.log) : undefined
  const charged = !evaluation.decision.degraded
  if (!charged && slots === undefined) return
  trackEnd(request, reply, { policy, input, decisions: charged ? evaluation.decisions : [], at: runtime.clock(), slots }, runtime)
}

/**
 * The per-route hook, at the route's stage (policy.stage: the `hook` option,
 * at least preValidation when the identity needs the body). One store call
 * for every block (or none, from the deny cache), then headers and either
 * continue or a refusal.
 */
export function createRouteHook (policy: CompiledPolicy, runtime: RouteRuntime) {
  const { writeHeaders } = runtime
  const route = policy.route
  const refuse = (request: FastifyRequest, reply: FastifyReply, evaluation: Evaluation, statusCode: 429 | 503): FastifyReply =>
    runtime.refuse(request, reply, policy, { statusCode, retryAfter: evaluation.retrySeconds, violatedPolicies: statusCode === 429 ? evaluation.violated : [], decision: evaluation.decision })
  const checks = skipChecks(policy, runtime.allowList)
  const bans = runtime.bans
  bans.watch(policy)
  // proxy-check.ts: false once this route's server trusts its proxy or the warning was given
  let checkProxy = true

  return async function rateLimitHook (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    if (checkProxy) checkProxy = checkForwarded(request)
    // An operator's ban wins over allowList and skip; with no ban in force it costs one size check.
    // (The ban is awaited, not a reply: a reply is a thenable, awaiting it would wait for the response.)
    if (bans.size > 0) {
      const startedAt = performance.now()
      let ban = bans.match(policy, request)
      if (ban instanceof Promise) ban = await ban
      if (ban !== undefined) return refuseBanned(request, reply, policy, runtime, ban, startedAt)
    }
    if (checks.length > 0) {
      const startedAt = performance.now()
      const source = await skipSource(policy, checks, request, runtime)
      if (source !== undefined) {
        recordSkip(runtime, policy, source, startedAt)
        return undefined
      }
    }
    let input = decisionInput(policy, request, runtime)
    if (input instanceof Promise) input = await input
    const evaluation = await evaluate(input, { log: request.log, route, source: 'store' }, runtime)
    request.rateLimit = evaluation.decision
    if (!evaluation.rejected && policy.endOfRequest) trackAdmitted(request, reply, policy, input, evaluation, runtime)
    if (evaluation.decision.degraded) {
      // A local decision (onRedisError 'local') refuses with 429 like the store; no quota headers, the fleet's is unknown.
      if (!evaluation.rejected) return undefined
      return refuse(request, reply, evaluation, evaluation.source === 'local' ? 429 : 503)
    }
    writeHeaders(reply, input, evaluation)
    if (!evaluation.rejected) return undefined
    return refuse(request, reply, evaluation, 429)
  }
}
