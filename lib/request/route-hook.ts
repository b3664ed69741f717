import type { FastifyReply, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { RawDecision } from '../store/algorithms.js'
import { callPredicate, type SkipPredicate } from './allow-list.js'
import { evaluate, recordSkip, type Evaluation, type Runtime } from '../decide/evaluate.js'
import { FST_RRL_INVALID_COST, FST_RRL_REQUEST_VALUE_FAILED, FST_RRL_SKIP_FAILED } from '../errors.js'
import type { HeaderWriter } from '../reply/headers.js'
import { awaitWithin, isThenable, type Outcome } from '../util/settle.js'
import { assembleKeys } from '../keys/layout.js'
import type { Overrides } from '../api/overrides.js'
import { runsForTier, type CompiledBlock, type CompiledPolicy } from '../policy/policy.js'
import type { Refuse } from '../reply/problem.js'
import type { BlockRun } from '../store/port.js'
import { isCost, isCount } from '../policy/validate.js'

/*
 * The Fastify side of a route's limit: what one request contributes (tier,
 * keys, costs), the decision (decide.ts), then headers and either continue or
 * a refusal; and the onResponse hook that gives units back (refundOn).
 */

/** The decision runtime plus what the plugin options chose: header writer, allow list, refusal path. */
export interface RouteRuntime extends Runtime {
  writeHeaders: HeaderWriter
  /** Runtime overrides of block limits (fastify.rateLimit.setOverride). */
  overrides: Overrides
  /** Milliseconds an async `tier` or `requestLimit` may take (plugin option identityTimeout). */
  identityTimeout: number
  /** The plugin's `allowList`, as a predicate; undefined: none. */
  allowList: SkipPredicate | undefined
  refuse: Refuse
}

/**
 * Whether `allowList` or one of the route's `skip`s lets the request through:
 * the source that did, else undefined. Synchronous answers stay synchronous
 * (no promise on the hot path); a failing predicate counts as "no".
 */
function skipSource (policy: CompiledPolicy, request: FastifyRequest, runtime: RouteRuntime): 'allow-list' | 'skip' | undefined | Promise<'allow-list' | 'skip' | undefined> {
  const checks: Array<['allow-list' | 'skip', SkipPredicate]> = []
  if (runtime.allowList !== undefined) checks.push(['allow-list', runtime.allowList])
  for (const skip of policy.skips) checks.push(['skip', skip])
  const next = (index: number): 'allow-list' | 'skip' | undefined | Promise<'allow-list' | 'skip' | undefined> => {
    for (let i = index; i < checks.length; i++) {
      const [source, predicate] = checks[i] as ['allow-list' | 'skip', SkipPredicate]
      const answer = callPredicate(predicate, request, (cause) => {
        runtime.badInput.report(request.log, { err: new FST_RRL_SKIP_FAILED(source === 'skip' ? 'skip' : 'allowList', policy.route), cause, route: policy.route }, 'rate limit allowList or skip failed; the request is limited as usual')
      })
      if (answer === true) return source
      if (answer !== false) return answer.then((yes) => yes ? source : next(i + 1))
    }
    return undefined
  }
  return next(0)
}

function requestCost (block: CompiledBlock, route: string, request: FastifyRequest, runtime: Runtime): number {
  const cost = block.cost
  if (typeof cost === 'number') return cost
  let value: unknown
  try {
    value = cost(request)
  } catch (error) {
    value = error
  }
  if (isCost(value)) return value
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

function requestCosts (policy: CompiledPolicy, request: FastifyRequest, runtime: Runtime): number[] {
  const blocks = policy.blocks
  const costs = new Array<number>(blocks.length)
  for (let i = 0; i < blocks.length; i++) costs[i] = requestCost(blocks[i] as CompiledBlock, policy.route, request, runtime)
  return costs
}

/** What a failed `tier` / `requestLimit` call says in the log: never the value itself. */
function failure (settled: Outcome): string {
  if (settled.ok) {
    const value = settled.value
    // null and undefined mean "none" and are not reported; numbers are shown (they are not secrets).
    return `returned ${typeof value === 'number' ? String(value) : `a value of type ${typeof value}`}`
  }
  const error = settled.error
  return error instanceof Error ? `failed (${error.message})` : `failed (threw or rejected with a ${typeof error})`
}

/** Calls `fn`; a promise it returns is awaited at most identityTimeout ms. Sync results stay sync. */
function callBounded (fn: (request: FastifyRequest) => unknown, request: FastifyRequest, runtime: RouteRuntime): Outcome | Promise<Outcome> {
  let value: unknown
  try {
    value = fn(request)
  } catch (error) {
    return { ok: false, error }
  }
  return isThenable(value) ? awaitWithin(value, runtime.identityTimeout, 'identityTimeout') : { ok: true, value }
}

function reportValue (request: FastifyRequest, runtime: RouteRuntime, what: string, route: string, settled: Outcome, instead: string): void {
  runtime.badInput.report(request.log, { err: new FST_RRL_REQUEST_VALUE_FAILED(what, route, `${failure(settled)}; ${instead}`), route }, `rate limit ${what} unusable; ${instead}`)
}

/** A tier name, or undefined (the default tier); anything but a string or nothing is logged. */
function tierOf (settled: Outcome, request: FastifyRequest, runtime: RouteRuntime, route: string): string | undefined {
  if (settled.ok && typeof settled.value === 'string') return settled.value
  if (!settled.ok || (settled.value !== undefined && settled.value !== null)) reportValue(request, runtime, 'tier', route, settled, 'using the default tier')
  return undefined
}

/** The request's tier (sync unless the `tier` function returned a promise). */
function requestTier (policy: CompiledPolicy, request: FastifyRequest, runtime: RouteRuntime): string | undefined | Promise<string | undefined> {
  const tier = runtime.tier
  if (policy.tierRuns === undefined || tier === undefined) return undefined
  const settled = callBounded(tier, request, runtime)
  return settled instanceof Promise
    ? settled.then((result) => tierOf(result, request, runtime, policy.route))
    : tierOf(settled, request, runtime, policy.route)
}

/** A `requestLimit` result: an integer the algorithm takes, else undefined (the block's `limit`; logged unless nothing was returned). */
function limitOf (settled: Outcome, block: CompiledBlock, request: FastifyRequest, runtime: RouteRuntime, route: string): number | undefined {
  if (settled.ok && isCount(settled.value, block.maxLimit)) return settled.value
  // undefined / null: no limit of its own for this request (not an error).
  if (settled.ok && (settled.value === undefined || settled.value === null)) return undefined
  reportValue(request, runtime, 'requestLimit', `${route} (${block.name})`, settled, `using the block's limit (requestLimit must give an integer from 1 to ${block.maxLimit})`)
  return undefined
}

/**
 * Per block, the `requestLimit` result (undefined: no function, or unusable).
 * A Promise only when some function returned one; it never rejects.
 */
function requestLimits (policy: CompiledPolicy, request: FastifyRequest, runtime: RouteRuntime): Array<number | undefined> | Promise<Array<number | undefined>> {
  const blocks = policy.blocks
  const limits = new Array<number | undefined | Promise<number | undefined>>(blocks.length)
  let pending = false
  for (let i = 0; i < blocks.length; i++) {
    const block = blocks[i] as CompiledBlock
    if (block.requestLimit === undefined) continue
    const settled = callBounded(block.requestLimit, request, runtime)
    if (settled instanceof Promise) {
      pending = true
      limits[i] = settled.then((result) => limitOf(result, block, request, runtime, policy.route))
    } else {
      limits[i] = limitOf(settled, block, request, runtime, policy.route)
    }
  }
  return pending ? Promise.all(limits) : limits as Array<number | undefined>
}

/** The tier's runs with each block's request limit applied (a new list only when some limit differs). */
function withLimits (policy: CompiledPolicy, runs: readonly BlockRun[], limits: ReadonlyArray<number | undefined>): readonly BlockRun[] {
  let out: BlockRun[] | undefined
  for (let i = 0; i < runs.length; i++) {
    const limit = limits[i]
    if (limit === undefined) continue
    const run = (policy.blocks[i] as CompiledBlock).withLimit(runs[i] as BlockRun, limit)
    if (run === runs[i]) continue
    out ??= [...runs]
    out[i] = run
  }
  return out ?? runs
}

/** One key per block; each distinct identity is resolved once. A Promise only when an identity function returned one. */
function requestKeys (policy: CompiledPolicy, request: FastifyRequest): string[] | Promise<string[]> {
  const identities = policy.identities
  const values = new Array<string | Promise<string>>(identities.length)
  let pending = false
  for (let i = 0; i < identities.length; i++) {
    const value = (identities[i] as CompiledPolicy['identities'][0]).resolve(request)
    if (typeof value !== 'string') pending = true
    values[i] = value
  }
  return pending ? Promise.all(values).then((resolved) => assembleKeys(policy, resolved)) : assembleKeys(policy, values as string[])
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
    const runs: BlockRun[] = []
    const keys: string[] = []
    const costs: number[] = []
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
      runs.push(charged.runs[i] as BlockRun)
      keys.push(charged.keys[i] as string)
      costs.push(charged.costs[i] as number)
    }
    if (runs.length === 0) return
    try {
      await runtime.store.refund(runs, keys, costs, runtime.clock() - charged.at)
      runtime.stats.refunded++
    } catch (error) {
      runtime.failures.report(request.log, { err: error, route: policy.route }, 'rate limit refund failed: units not given back')
    }
  }
}

/**
 * The per-route hook, at the route's stage (policy.stage: the `hook` option,
 * at least preValidation when the identity needs the body). One store call for every block (or none, from the deny cache), then
 * headers and either continue or a refusal.
 */
export function createRouteHook (policy: CompiledPolicy, runtime: RouteRuntime) {
  const { writeHeaders } = runtime
  const route = policy.route
  const refuse = (request: FastifyRequest, reply: FastifyReply, evaluation: Evaluation, statusCode: 429 | 503): FastifyReply =>
    runtime.refuse(request, reply, policy, { statusCode, retryAfter: evaluation.retrySeconds, violatedPolicies: statusCode === 429 ? evaluation.violated : [], decision: evaluation.decision })

  const checksSkip = runtime.allowList !== undefined || policy.skips.length > 0

  return async function rateLimitHook (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    if (checksSkip) {
      const startedAt = performance.now()
      const source = await skipSource(policy, request, runtime)
      if (source !== undefined) {
        recordSkip(runtime, policy, source, startedAt)
        return undefined
      }
    }
    // Tier, limits and keys start together; only what an async function made a promise is awaited.
    let tier = requestTier(policy, request, runtime)
    let limits = policy.requestLimits ? requestLimits(policy, request, runtime) : undefined
    let keys = requestKeys(policy, request)
    if (tier instanceof Promise) tier = await tier
    if (limits instanceof Promise) limits = await limits
    if (keys instanceof Promise) keys = await keys
    const tierRuns = runsForTier(policy, tier)
    const runs = runtime.overrides.apply(policy, limits === undefined ? tierRuns : withLimits(policy, tierRuns, limits), keys)
    const costs = requestCosts(policy, request, runtime)
    const evaluation = await evaluate({ policy, runs, keys, costs }, { log: request.log, route, source: 'store' }, runtime)
    request.rateLimit = evaluation.decision
    if (evaluation.decision.degraded) {
      // A local decision (onRedisError 'local') refuses with 429 like the store; no quota headers, the fleet's is unknown.
      if (!evaluation.rejected) return undefined
      return refuse(request, reply, evaluation, evaluation.source === 'local' ? 429 : 503)
    }
    writeHeaders(reply, policy, runs, evaluation.decisions, costs, evaluation.rejected, evaluation.binding)
    if (!evaluation.rejected) {
      if (policy.refunds) (request as unknown as Record<symbol, Charged>)[CHARGED] = { runs, keys, costs, decisions: evaluation.decisions, at: runtime.clock() }
      return undefined
    }
    return refuse(request, reply, evaluation, 429)
  }
}
