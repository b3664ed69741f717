import type { FastifyRequest } from 'fastify'
import { callPredicate, type SkipPredicate } from './allow-list.js'
import type { DecisionInput, Reporter, RequestBlock, Runtime } from '../decide/evaluate.js'
import { FST_RRL_INVALID_COST, FST_RRL_REQUEST_VALUE_FAILED, FST_RRL_SKIP_FAILED } from '../errors.js'
import { assembleKeys } from '../keys/layout.js'
import type { CompiledBlock, CompiledPolicy, RouteBlock } from '../policy/policy.js'
import { isCost } from '../policy/rules.js'
import { isCount } from '../util/validate.js'
import { awaitWithin, isThenable, strayThenable, type Outcome } from '../util/await-within.js'

/*
 * What one request contributes to its decision: whether it is skipped, its
 * tier, its per-block limits, keys and costs. A user function that answers
 * synchronously stays synchronous (no promise on the hot path); an async one
 * is bounded, and whatever fails is logged (throttled) and falls back.
 */

/** What these functions read from the runtime: the reporter, the plugin's `tier`, and the time an async input may take. */
export interface InputRuntime extends Reporter {
  tier: Runtime['tier']
  /** Milliseconds an async `tier` or `requestLimit` may take (plugin option identityTimeout). */
  identityTimeout: number
}

/** One `allowList` or `skip` predicate and the source it reports. */
export interface SkipCheck {
  source: 'allow-list' | 'skip'
  predicate: SkipPredicate
}

/** The route's skip checks in order (the plugin's allowList first), built once per route. */
export function skipChecks (policy: CompiledPolicy, allowList: SkipPredicate | undefined): SkipCheck[] {
  const checks: SkipCheck[] = allowList === undefined ? [] : [{ source: 'allow-list', predicate: allowList }]
  for (const predicate of policy.skips) checks.push({ source: 'skip', predicate })
  return checks
}

/**
 * Whether one of `checks` lets the request through: the source that did,
 * else undefined. A failing predicate counts as "no".
 */
export function skipSource (policy: CompiledPolicy, checks: readonly SkipCheck[], request: FastifyRequest, runtime: Reporter, from = 0): SkipCheck['source'] | undefined | Promise<SkipCheck['source'] | undefined> {
  for (let i = from; i < checks.length; i++) {
    const check = checks[i]
    if (check === undefined) continue
    const answer = callPredicate(check.predicate, request, (cause) => {
      runtime.badInput.report(request.log, { err: new FST_RRL_SKIP_FAILED(check.source === 'skip' ? 'skip' : 'allowList', policy.route), cause, route: policy.route }, 'rate limit allowList or skip failed; the request is limited as usual')
    })
    if (answer === true) return check.source
    if (answer !== false) return answer.then((yes) => yes ? check.source : skipSource(policy, checks, request, runtime, i + 1))
  }
  return undefined
}

/** How a bad cost result is described in the log: never the value itself, only its kind. */
function describeCost (value: unknown, thenable: boolean): string {
  if (value instanceof Error) return `an error (${value.message})`
  if (typeof value === 'number') return String(value)
  return thenable ? 'a Promise (cost functions must be synchronous)' : `a value of type ${value === null ? 'null' : typeof value}`
}

function requestCost (block: CompiledBlock, route: string, request: FastifyRequest, runtime: Reporter): number {
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
  const thenable = strayThenable(value)
  runtime.badInput.report(request.log, { err: new FST_RRL_INVALID_COST(route, describeCost(value, thenable)), route }, 'rate limit cost function returned an invalid cost')
  return 1
}

/** What a failed `tier` / `requestLimit` call says in the log: never the value itself. */
function failure (outcome: Outcome): string {
  if (outcome.ok) {
    const value = outcome.value
    // null and undefined mean "none" and are not reported; numbers are shown (they are not secrets).
    return `returned ${typeof value === 'number' ? String(value) : `a value of type ${typeof value}`}`
  }
  const error = outcome.error
  return error instanceof Error ? `failed (${error.message})` : `failed (threw or rejected with a ${typeof error})`
}

/** Calls `fn`; a promise it returns is awaited at most identityTimeout ms. Sync results stay sync. */
function callBounded (fn: (request: FastifyRequest) => unknown, request: FastifyRequest, runtime: { identityTimeout: number }): Outcome | Promise<Outcome> {
  let value: unknown
  try {
    value = fn(request)
  } catch (error) {
    return { ok: false, error }
  }
  return isThenable(value) ? awaitWithin(value, runtime.identityTimeout, 'identityTimeout') : { ok: true, value }
}

/** What an unusable value was (`what` of `route`) and what was done `instead`: built on that path only. */
export interface BadValue {
  what: string
  route: string
  instead: string
}

/** Logs (once per burst) a function's unusable result and what was done instead. */
export function reportValue (request: FastifyRequest, runtime: Reporter, outcome: Outcome, { what, route, instead }: BadValue): void {
  runtime.badInput.report(request.log, { err: new FST_RRL_REQUEST_VALUE_FAILED(what, route, `${failure(outcome)}; ${instead}`), route }, `rate limit ${what} unusable; ${instead}`)
}

/** A tier name, or undefined (the default tier); anything but a string or nothing is logged. */
function tierOf (outcome: Outcome, request: FastifyRequest, runtime: Reporter, route: string): string | undefined {
  if (outcome.ok && typeof outcome.value === 'string') return outcome.value
  if (!outcome.ok || (outcome.value !== undefined && outcome.value !== null)) reportValue(request, runtime, outcome, { what: 'tier', route, instead: 'using the default tier' })
  return undefined
}

/** The request's tier (sync unless the `tier` function returned a promise). */
export function requestTier (policy: CompiledPolicy, request: FastifyRequest, runtime: InputRuntime): string | undefined | Promise<string | undefined> {
  const tier = runtime.tier
  if (policy.tierBlocks === undefined || tier === undefined) return undefined
  const outcome = callBounded(tier, request, runtime)
  return outcome instanceof Promise
    ? outcome.then((result) => tierOf(result, request, runtime, policy.route))
    : tierOf(outcome, request, runtime, policy.route)
}

/** A `requestLimit` result: an integer the algorithm takes, else undefined (the block's `limit`; logged unless nothing was returned). */
function limitOf (outcome: Outcome, block: CompiledBlock, request: FastifyRequest, runtime: Reporter, route: string): number | undefined {
  if (outcome.ok && isCount(outcome.value, block.maxLimit)) return outcome.value
  // undefined / null: no limit of its own for this request (not an error).
  if (outcome.ok && (outcome.value === undefined || outcome.value === null)) return undefined
  reportValue(request, runtime, outcome, { what: 'requestLimit', route: `${route} (${block.name})`, instead: `using the block's limit (requestLimit must give an integer from 1 to ${block.maxLimit})` })
  return undefined
}

/**
 * Per block, the `requestLimit` result (undefined: no function, or unusable).
 * A Promise only when some function returned one; it never rejects.
 */
export function requestLimits (policy: CompiledPolicy, request: FastifyRequest, runtime: InputRuntime): Array<number | undefined> | Promise<Array<number | undefined>> {
  const blocks = policy.blocks
  const limits = new Array<number | undefined>(blocks.length)
  let pending: Array<Promise<void>> | undefined
  for (let i = 0; i < blocks.length; i++) {
    const block = blocks[i]
    if (block?.requestLimit === undefined) continue
    const outcome = callBounded(block.requestLimit, request, runtime)
    if (outcome instanceof Promise) {
      pending ??= []
      pending.push(outcome.then((result) => { limits[i] = limitOf(result, block, request, runtime, policy.route) }))
    } else {
      limits[i] = limitOf(outcome, block, request, runtime, policy.route)
    }
  }
  return pending === undefined ? limits : Promise.all(pending).then(() => limits)
}

/**
 * The request's blocks, one record each: the tier's block and run (at its
 * `requestLimit` result, when it has one), the request's key and its cost.
 * `keys` and `limits` hold one entry per block (requestKeys, requestLimits).
 * The input names the compiled list it was made from unless a limit made a run.
 */
export function requestInput (policy: CompiledPolicy, tierBlocks: readonly RouteBlock[], keys: readonly string[], limits: ReadonlyArray<number | undefined> | undefined, request: FastifyRequest, runtime: Reporter): DecisionInput {
  if (keys.length !== tierBlocks.length) throw new RangeError(`${keys.length} keys for ${tierBlocks.length} blocks`)
  const blocks: RequestBlock[] = []
  let compiled = true
  for (const [i, block] of tierBlocks.entries()) {
    const limit = limits?.[i]
    const run = limit === undefined ? block.run : block.compiled.withLimit(block.run, limit)
    if (run !== block.run) compiled = false
    // keys[i]: one per block, checked above.
    blocks.push({ compiled: block.compiled, run, key: keys[i] as string, cost: requestCost(block.compiled, policy.route, request, runtime) })
  }
  return { policy, blocks, compiledBlocks: compiled ? tierBlocks : undefined }
}

/** One key per block; each distinct identity is resolved once. A Promise only when an identity function returned one. */
export function requestKeys (policy: CompiledPolicy, request: FastifyRequest): string[] | Promise<string[]> {
  const identities = policy.identities
  const values = new Array<string>(identities.length)
  let pending: Array<Promise<void>> | undefined
  for (let i = 0; i < identities.length; i++) {
    const value = identities[i]?.resolve(request) ?? ''
    if (typeof value === 'string') {
      values[i] = value
    } else {
      pending ??= []
      pending.push(value.then((resolved) => { values[i] = resolved }))
    }
  }
  return pending === undefined ? assembleKeys(policy, values) : Promise.all(pending).then(() => assembleKeys(policy, values))
}
