import type { FastifyReply, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { SkipPredicate } from './allow-list.js'
import { evaluate, evaluateThen, recordSkip, type DecisionInput, type DecisionOrigin, type Evaluation, type Runtime } from '../decide/evaluate.js'
import { checkForwarded } from './proxy-check.js'
import type { HeaderWriter } from '../reply/headers.js'
import type { Overrides } from '../fleet/overrides.js'
import type { Bans } from '../fleet/bans.js'
import { refuseBanned, type BanRuntime } from '../fleet/ban-refusal.js'
import { blocksForTier, type CompiledPolicy } from '../policy/policy.js'
import type { Refuse } from '../reply/problem.js'
import { requestInput, requestKeys, requestLimits, requestTier, skipChecks, skipSource, type InputRuntime, type SkipCheck } from './inputs.js'
import { trackEnd, type Ending } from './end-of-request.js'
import { holdRequest, refuseAtClose } from '../kinds/delay/held-request.js'
import { holdSlots, newSlotId } from '../kinds/concurrency/decide.js'
import { waitForSlot } from '../kinds/concurrency/slot-wait.js'
import { UNAVAILABLE_RETRY_SECONDS } from '../decide/decision-math.js'

/*
 * The Fastify side of a route's limit: operator bans (ban-refusal.ts), what
 * one request contributes (inputs.ts), the decision (decide/), then headers
 * and either continue or a refusal; end-of-request.ts changes usage when the
 * request ends (refundOn, settle) and gives back its concurrency slots.
 */

/** Fleet state the request path reads locally (lib/fleet/: polled from the store, never asked per request). */
export interface FleetState {
  /** Operator bans (fastify.rateLimit.ban). */
  bans: Bans
  /** Runtime overrides of block limits (fastify.rateLimit.setOverride). */
  overrides: Overrides
}

/** The decision runtime (engine and reporter), the fleet state, and what the plugin options chose: header writer, allow list, refusal path. */
export interface RouteRuntime extends Runtime, InputRuntime, FleetState, BanRuntime {
  writeHeaders: HeaderWriter
  /** The plugin's `allowList`, as a predicate; undefined: none. */
  allowList: SkipPredicate | undefined
  refuse: Refuse
}

/** What a route's hook works with, built once per route. */
interface RouteContext {
  policy: CompiledPolicy
  runtime: RouteRuntime
  /** Skip checks (allowList, the route's skip), in order. */
  checks: SkipCheck[]
}

function withRuns ({ policy, runtime }: RouteContext, request: FastifyRequest, tier: string | undefined, limits: Array<number | undefined> | undefined, keys: string[]): DecisionInput {
  const input = requestInput(policy, blocksForTier(policy, tier), keys, limits, request, runtime)
  const blocks = runtime.overrides.apply(policy, input.blocks)
  if (blocks !== input.blocks) {
    input.blocks = blocks
    input.compiledBlocks = undefined
  }
  if (policy.holdsSlots) input.slot = newSlotId()
  return input
}

/** Tier, limits and keys start together; a Promise only when an async function made one. */
function decisionInput (ctx: RouteContext, request: FastifyRequest): DecisionInput | Promise<DecisionInput> {
  const { policy, runtime } = ctx
  const tier = requestTier(policy, request, runtime)
  const limits = policy.requestLimits ? requestLimits(policy, request, runtime) : undefined
  const keys = requestKeys(policy, request)
  if (tier instanceof Promise || limits instanceof Promise || keys instanceof Promise) {
    return Promise.all([tier, limits, keys]).then(([t, l, k]) => withRuns(ctx, request, t, l, k))
  }
  return withRuns(ctx, request, tier, limits, keys)
}

/**
 * An admitted request's end is tracked when the store charged it (its refunds
 * and settles) or when it holds slots (a concurrency block; with onRedisError
 * 'local', on this instance's limiter, whose decisions are never refunded to
 * the store). Right after the decision: nothing may throw between taking a
 * slot and arranging its release.
 */
function trackAdmitted ({ policy, runtime }: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput, evaluation: Evaluation): Ending | undefined {
  const slots = policy.holdsSlots ? holdSlots(runtime, input, evaluation, request.log) : undefined
  const charged = !evaluation.decision.degraded
  if (!charged && slots === undefined) return undefined
  // The charge's time as the store read it (it came back with the call): a reply read late must not move a give-back into the next window.
  const ending: Ending = { policy, input, decisions: charged ? evaluation.decisions : [], chargedAt: evaluation.chargedAt, slots, held: false }
  trackEnd(request, reply, ending, runtime)
  return ending
}

/** A request's decisions: reported on its logger and route; it may be held for a turn or wait for a slot. */
function originOf (request: FastifyRequest, route: string): DecisionOrigin {
  return { log: request.log, route, source: 'store', holds: true, waits: true }
}

/** Fastify's `done` of a callback-style hook: nothing to continue, an error for the error handler. */
export type HookNext = (error?: Error) => void

/**
 * A route's hook, callback-style: `next()` continues the request, `next(error)`
 * hands it to the error handler, and a refusal sends the reply and calls
 * neither. (A callback saves the two promise layers an async hook and its
 * evaluate would add to every request.)
 */
export type RouteHook = (request: FastifyRequest, reply: FastifyReply, next: HookNext) => void

/** Continues the request once `sent` resolves to false; true: a refusal was sent, the chain stops there. */
function continueAfter (sent: Promise<boolean>, next: HookNext): void {
  sent.then((wasSent) => { if (!wasSent) next() }, next)
}

function refuse (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, evaluation: Evaluation, statusCode: 429 | 503): FastifyReply {
  return ctx.runtime.refuse(request, reply, ctx.policy, { statusCode, retryAfter: evaluation.retrySeconds, violatedPolicies: statusCode === 429 ? evaluation.violated : [], decision: evaluation.decision })
}

/**
 * After the decision: headers, then undefined (go on), the refusal (sent, or
 * thrown for the error handler), or for a request admitted at a later turn
 * whether it ended without going on (held-request.ts).
 */
function respond (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput, evaluation: Evaluation): FastifyReply | undefined | Promise<boolean> {
  const { policy, runtime } = ctx
  if (evaluation.queued) return waitThenRespond(ctx, request, reply, input, evaluation)
  request.rateLimit = evaluation.decision
  const ending = !evaluation.rejected && policy.endOfRequest ? trackAdmitted(ctx, request, reply, input, evaluation) : undefined
  if (evaluation.decision.degraded) {
    // A local decision (onRedisError 'local') refuses with 429 like the store; no quota headers, the fleet's is unknown.
    if (!evaluation.rejected) return undefined
    return refuse(ctx, request, reply, evaluation, evaluation.source === 'local' ? 429 : 503)
  }
  runtime.writeHeaders(reply, evaluation)
  if (!evaluation.rejected) {
    const { decision } = evaluation
    return evaluation.turnMs > 0 && ending !== undefined ? holdRequest(ctx, request, reply, ending, decision, evaluation.turnMs, evaluation.place) : undefined
  }
  return refuse(ctx, request, reply, evaluation, 429)
}

/**
 * No slot yet, a place in its queue (a block's `wait`): waits for one
 * (kinds/concurrency/slot-wait.ts), then responds to the decision that ended the
 * wait; a client gone ends it silently, the plugin's close with a 503.
 */
async function waitThenRespond (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput, first: Evaluation): Promise<boolean> {
  const raw = reply.raw
  const onLeave = (left: () => void): (() => void) => {
    if (raw.closed || raw.destroyed) queueMicrotask(left)
    raw.once('close', left)
    return () => { raw.off('close', left) }
  }
  const result = await waitForSlot(first, originOf(request, ctx.policy.route), ctx.runtime, onLeave)
  if (result === 'left') return true
  if (result === 'closed') {
    request.rateLimit = first.decision
    refuseAtClose(ctx.runtime, request, reply, ctx.policy, UNAVAILABLE_RETRY_SECONDS, first.decision)
    return true
  }
  const answer = respondOnce(ctx, request, reply, input, result)
  return answer instanceof Promise ? await answer : answer !== undefined
}

/**
 * respond, then the decision's place under maxDelayed is returned unless its
 * hold or wait took it over (both start inside respond, before it returns):
 * also when respond threw or answered otherwise.
 */
function respondOnce (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput, evaluation: Evaluation): ReturnType<typeof respond> {
  try {
    return respond(ctx, request, reply, input, evaluation)
  } finally {
    evaluation.place?.release()
  }
}

// The slow paths resolve to whether a reply was sent, never to the reply: a reply is a thenable.
async function decideAsync (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput): Promise<boolean> {
  const answer = respondOnce(ctx, request, reply, input, await evaluate(input, originOf(request, ctx.policy.route), ctx.runtime))
  return answer instanceof Promise ? await answer : answer !== undefined
}

/** Bans and skip checks first (either may wait on the application), then the decision. */
async function screenThenDecide (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply): Promise<boolean> {
  const { policy, runtime, checks } = ctx
  // An operator's ban wins over allowList and skip; with no ban in force it costs one size check.
  // (The ban is awaited, not a reply: a reply is a thenable, awaiting it would wait for the response.)
  if (runtime.bans.size > 0) {
    const startedAt = performance.now()
    let ban = runtime.bans.match(policy, request)
    if (ban instanceof Promise) ban = await ban
    if (ban !== undefined) {
      refuseBanned(ctx, request, reply, ban, startedAt)
      return true
    }
  }
  if (checks.length > 0) {
    const startedAt = performance.now()
    const source = await skipSource(policy, checks, request, runtime)
    if (source !== undefined) {
      recordSkip(runtime, policy, source, startedAt)
      return false
    }
  }
  return await decideAsync(ctx, request, reply, await decisionInput(ctx, request))
}

/**
 * The common path's end, as evaluateThen's `done` (the one closure the
 * request had): respond, then `next` outside the try (the rest of the chain runs inside it).
 */
function finisher (ctx: RouteContext, request: FastifyRequest, reply: FastifyReply, input: DecisionInput, next: HookNext): (evaluation: Evaluation) => void {
  return (evaluation) => {
    let sent: ReturnType<typeof respond>
    try {
      sent = respondOnce(ctx, request, reply, input, evaluation)
    } catch (error) {
      next(error as Error)
      return
    }
    if (sent === undefined) next()
    else if (sent instanceof Promise) continueAfter(sent, next)
  }
}

/**
 * The per-route hook, at the route's stage (policy.stage: the `hook` option,
 * at least preValidation when the identity needs the body). One store call
 * for every block (or none, from the deny cache), then headers and either
 * continue or a refusal. Bans, skip checks and async inputs wait on promises;
 * the common request (none of them) goes from the store's reply to `next`.
 */
export function createRouteHook (policy: CompiledPolicy, runtime: RouteRuntime): RouteHook {
  const ctx: RouteContext = { policy, runtime, checks: skipChecks(policy, runtime.allowList) }
  const { bans } = runtime
  const screened = ctx.checks.length > 0
  const route = policy.route
  bans.watch(policy)
  // proxy-check.ts: false once a request settled the proxy-trust case (a warning given, or a local proxy trusted)
  let checkProxy = true

  return function rateLimitHook (request: FastifyRequest, reply: FastifyReply, next: HookNext): void {
    if (checkProxy) checkProxy = checkForwarded(request)
    if (screened || bans.size > 0) {
      continueAfter(screenThenDecide(ctx, request, reply), next)
      return
    }
    const input = decisionInput(ctx, request)
    if (input instanceof Promise) {
      continueAfter(input.then((ready) => decideAsync(ctx, request, reply, ready)), next)
      return
    }
    evaluateThen(input, originOf(request, route), runtime, finisher(ctx, request, reply, input, next), next)
  }
}
