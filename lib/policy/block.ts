import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RunAlgorithm } from '../store/algorithms.js'
import type { BlockKind } from '../kinds/contract.js'
import { readShape } from '../kinds/policy.js'
import { BLOCK_DEFAULTS, DEFAULT_LEASE_MS } from '../limits.js'
import { FST_RRL_INVALID_BLOCK } from '../errors.js'
import { compileIdentity, type CompiledIdentity, type IdentityContext } from '../keys/identity.js'
import { keyMethod } from '../keys/layout.js'
import type { BlockRun } from '../store/port.js'
import type { FailurePolicy, RateLimitBlock, RateLimitHook, RateLimitMode, SkipPredicate } from '../types/index.js'
import {
  FAILURE_POLICIES,
  HOOKS,
  isPolicyName,
  MODES,
  POLICY_NAME_RULE
} from './rules.js'
import { choiceMessage, isCount, isOneOf, shown } from '../util/validate.js'
import { defaultName, describeBy, readPenalty, routeHasParam, type Fail } from './block-fields.js'
import { BLOCK_FIELDS, unknownNameMessage } from './field-names.js'
import { runAtLimit, type RunSpec } from './run.js'
import { burstOf, isTiered, limitOf, tierRuns, type Shape } from './shape.js'
import { readSettle, type SettleFunction } from './settle-field.js'

export { FALLBACK_TIER } from './block-fields.js'

/*
 * One block, validated and compiled once (at onRoute, or at register for
 * defaultLimit, globalLimits and policies); policy.ts composes a route's blocks.
 * A bad block throws FST_RRL_INVALID_BLOCK naming the route and the field, so
 * bad configuration fails startup, never a request.
 */

export type RefundPredicate = (reply: FastifyReply) => boolean

/** Where a block comes from: declared (by a route, a named policy, notFound) or the plugin's `defaultLimit`. */
export type BlockSource = 'declared' | 'defaultLimit'

/** Where blocks are declared (compile time only): the route's method(s) and URL ('*' for a global block), and how. */
export interface Declaration {
  method: string | string[]
  url: string
  source: BlockSource
  /** The route's constraint text (keys/constraints.ts); absent: none. */
  constraints?: string
}

/** A block's place: its index among `of` blocks, of a route or of `globalLimits`. */
export interface BlockPosition { index: number, of: number, global: boolean }

export interface CompiledBlock {
  name: string
  /** What the block counts over (lib/kinds/): every run of it has this kind. */
  kind: BlockKind
  /** 'concurrency' for a concurrency block (kinds/concurrency/). */
  algorithm: RunAlgorithm
  /** The run for the fallback tier (or the only one). */
  base: BlockRun
  /** Per-tier runs, when limit or burst is a tier map. */
  tiers: Map<string, BlockRun> | undefined
  /** What every run of the block shares (policy/run.ts builds runs at another limit from it). */
  runSpec: RunSpec
  cost: number | ((request: FastifyRequest) => number)
  mode: RateLimitMode
  onRedisError: FailurePolicy
  refundOn: RefundPredicate | undefined
  /** `settle(request, reply)`: the units the request actually used, charged when it ends (request/end-of-request.ts). */
  settle: SettleFunction | undefined
  /** `skip(request)`: true lets the request through unlimited (the whole route). */
  skip: SkipPredicate | undefined
  /** Key suffix, e.g. `SW60000` (`.1` appended for a same-suffix sibling). */
  suffix: string
  identity: CompiledIdentity
  /** The raw `by`, to tell whether two blocks share an identity. */
  bySpec: RateLimitBlock['by']
  by: string[]
  global: boolean
  /** The stage the block names (`hook`), or undefined for the plugin's. */
  hook: RateLimitHook | undefined
  /** `requestLimit`: this request's limit, sync or async; undefined when the block has none. */
  requestLimit: ((request: FastifyRequest) => unknown) | undefined
  /** The largest limit the algorithm takes (a `requestLimit` result above it falls back). */
  maxLimit: number
  /** `run` at a requestLimit result: a declared burst stays, else it follows; the local share too. */
  withLimit: (run: BlockRun, limit: number) => BlockRun
  /** Where it was declared, for errors: `GET /x`, `GET /x rateLimit[1]`, `globalLimits[0]`. */
  origin: string
}

export interface CompileContext extends IdentityContext {
  prefix: string
  onRedisError: FailurePolicy
  mode: RateLimitMode
  /** The store talks to a Redis Cluster: every key of one request must share one slot. */
  cluster: boolean
  /** Instances sharing the limits (plugin option), for onRedisError 'local'. */
  fleetSize?: number
  /** The plugin option `hook`; default 'onRequest'. */
  hook?: RateLimitHook
  /** The clock Node computes calendar-period boundaries with (the plugin clock; a test may skew it); default Date.now. */
  periodNow?: () => number
  /** The plugin option `lease` (ms): how long a concurrency slot outlives its last renewal. */
  lease?: number
}

/** A block as declared: its fields by name. */
type Fields = Record<string, unknown>

/** Where a block sits, for its errors: the route (or globalLimits[i]) and the field prefix. */
interface Site {
  route: string
  /** `rateLimit[1].` for the second block of a route; '' otherwise. */
  fieldPrefix: string
  fail: Fail
}

function blockSite (method: string | string[], url: string, source: BlockSource, position: BlockPosition): Site {
  const methodLabel = Array.isArray(method) ? method.join(',') : method
  const route = position.global ? `globalLimits[${position.index}]` : `${methodLabel} ${url}`
  const where = source === 'defaultLimit' ? `${route} (from defaultLimit)` : route
  const fieldPrefix = position.of > 1 && !position.global ? `rateLimit[${position.index}].` : ''
  const fail: Fail = (field, message) => {
    throw new FST_RRL_INVALID_BLOCK(where, fieldPrefix + field, message)
  }
  return { route, fieldPrefix, fail }
}

function readFields (block: unknown, position: BlockPosition, fail: Fail): Fields {
  if (block === null || typeof block !== 'object' || Array.isArray(block)) {
    return fail(position.global ? 'block' : 'rateLimit', 'must be an object like { limit: 100, window: \'1m\' } or false')
  }
  const input = block as Fields
  for (const field of Object.keys(input)) {
    if (!BLOCK_FIELDS.has(field)) fail(field, unknownNameMessage(field, 'block'))
  }
  return input
}

function readCost (input: Fields, shape: Shape, fail: Fail): CompiledBlock['cost'] {
  if (input.cost === undefined) return BLOCK_DEFAULTS.cost
  if (typeof input.cost === 'function') return input.cost as (request: FastifyRequest) => number
  const capacity = Math.min(...shape.tierNames.map((tier) => burstOf(shape, tier, limitOf(shape, tier))))
  if (isCount(input.cost, capacity)) return input.cost
  const smallest = isTiered(shape) ? ', the smallest tier\'s' : ''
  return fail('cost', `must be an integer from 1 to the capacity (${capacity}${smallest}) or a function (got ${shown(input.cost)})`)
}

type Choices = Pick<CompiledBlock, 'onRedisError' | 'mode'>
type Predicates = Pick<CompiledBlock, 'refundOn' | 'skip'>
type RequestSide = Pick<CompiledBlock, 'hook' | 'requestLimit'>

/** A global block's choices are each route's: its blocks are decided together. */
const BY_ROUTE = 'is decided by each route (a global block is decided together with the route\'s own blocks'

/** The failure policy and the mode of a block. */
function readChoices (input: Fields, context: CompileContext, position: BlockPosition, fail: Fail): Choices {
  const onRedisError = input.onRedisError ?? context.onRedisError
  if (!isOneOf(onRedisError, FAILURE_POLICIES)) fail('onRedisError', choiceMessage(onRedisError, FAILURE_POLICIES))
  if (position.global && input.onRedisError !== undefined) fail('onRedisError', `${BY_ROUTE})`)
  const mode = input.mode ?? context.mode
  if (!isOneOf(mode, MODES)) fail('mode', choiceMessage(mode, MODES))
  return { onRedisError, mode }
}

/** The reply and request predicates: refundOn and skip. */
function readPredicates (input: Fields, algorithm: RunAlgorithm, position: BlockPosition, fail: Fail): Predicates {
  const { refundOn, skip } = input
  if (refundOn !== undefined && typeof refundOn !== 'function') {
    fail('refundOn', `must be a function (reply) => boolean (got ${typeof refundOn})`)
  }
  if (refundOn !== undefined && algorithm === 'sliding-log') {
    fail('refundOn', 'is not supported by sliding-log (use fixed-window, sliding-window, token-bucket or gcra)')
  }
  if (skip !== undefined && typeof skip !== 'function') {
    fail('skip', `must be a function (request) => boolean | Promise<boolean> (got ${typeof skip})`)
  }
  if (skip !== undefined && position.global) {
    fail('skip', 'is decided by each route (a global block applies to every route; use the allowList option)')
  }
  return { refundOn: refundOn as RefundPredicate | undefined, skip: skip as SkipPredicate | undefined }
}

/** The block's stage and its requestLimit function. */
function readRequestSide (input: Fields, position: BlockPosition, fail: Fail): RequestSide {
  const { hook, requestLimit } = input
  if (hook !== undefined) {
    if (!isOneOf(hook, HOOKS)) fail('hook', choiceMessage(hook, HOOKS))
    if (position.global) fail('hook', `${BY_ROUTE}, at the route's stage)`)
  }
  if (requestLimit !== undefined && typeof requestLimit !== 'function') {
    fail('requestLimit', `must be a function (request) => number | Promise<number> (got ${shown(requestLimit)})`)
  }
  return { hook, requestLimit: requestLimit as CompiledBlock['requestLimit'] }
}

function readName (input: Fields, method: string | string[], url: string, position: BlockPosition, fail: Fail): string {
  const derived = (): string => position.global
    ? `global-${position.index}`
    : defaultName(keyMethod(method), url, position.index > 0 ? `-${position.index}` : '')
  const name = input.name ?? derived()
  if (!isPolicyName(name)) fail('name', `must be ${POLICY_NAME_RULE} (got ${JSON.stringify(input.name)})`)
  return name
}

function readIdentity (
  input: Fields,
  context: CompileContext,
  url: string,
  site: Site,
  position: BlockPosition
): CompiledIdentity {
  const { fail } = site
  const identity = compileIdentity(input.by as RateLimitBlock['by'], context, site.route)
  if (typeof identity === 'string') return fail('by', identity)
  if (identity.usesParams) {
    if (position.global) fail('by', 'uses a route parameter, but a global block applies to every route')
    for (const part of (Array.isArray(input.by) ? input.by : [input.by])) {
      if (typeof part === 'string' && part.startsWith('param:') && !routeHasParam(url, part.slice(6))) {
        fail('by', `uses ${JSON.stringify(part)} but the route has no :${part.slice(6)} parameter`)
      }
    }
  }
  if (position.global && identity.needsBody) {
    fail('by', 'uses a body field, but a global block applies to every route (most have no body)')
  }
  return identity
}

function readLocalLimit (input: Fields, maxLimit: number, fail: Fail): number | undefined {
  const { localLimit } = input
  if (localLimit === undefined) return undefined
  if (!isCount(localLimit, maxLimit)) fail('localLimit', `must be an integer from 1 to ${maxLimit} (got ${shown(localLimit)})`)
  return localLimit
}

/**
 * Validates one block and compiles everything that does not depend on the
 * route's other blocks. Throws FST_RRL_INVALID_BLOCK naming the route and the
 * field: bad configuration fails startup, never a request.
 */
export function compileBlock (block: unknown, at: Declaration, context: CompileContext, position: BlockPosition): CompiledBlock {
  const { method, url, source } = at
  const site = blockSite(method, url, source, position)
  const { fail } = site
  const input = readFields(block, position, fail)
  const shape = readShape(input, fail, context.periodNow, context.lease ?? DEFAULT_LEASE_MS)
  const cost = readCost(input, shape, fail)
  const choices = readChoices(input, context, position, fail)
  if (shape.delayMs !== undefined && choices.mode === 'shadow') {
    const field = shape.kind.holdsSlot ? 'wait' : 'delay'
    fail(field, `holds requests, which a shadow block never does (it only records): remove ${field} or mode 'shadow'`)
  }
  const predicates = readPredicates(input, shape.algorithm, position, fail)
  const name = readName(input, method, url, position, fail)
  const identity = readIdentity(input, context, url, site, position)
  const penalty = readPenalty(input.penalty, fail)
  const { settle, maxLimit } = readSettle(input, shape, method === 'API', fail)
  const localLimit = readLocalLimit(input, maxLimit, fail)
  const requestSide = readRequestSide(input, position, fail)
  const { kind, algorithm, bursty, windowMs } = shape
  const runSpec: RunSpec = {
    algorithm,
    algorithmNumber: shape.algorithmNumber,
    windowMs,
    kind,
    bursty,
    burstDeclared: shape.bursts !== undefined,
    shadow: choices.mode === 'shadow',
    penalty,
    localLimit,
    fleetSize: context.fleetSize,
    period: shape.period,
    delayMs: shape.delayMs
  }
  return {
    name,
    kind,
    algorithm,
    ...tierRuns(runSpec, shape),
    runSpec,
    cost,
    ...choices,
    ...predicates,
    ...requestSide,
    suffix: kind.keySuffix(shape),
    identity,
    bySpec: input.by as RateLimitBlock['by'],
    by: describeBy(input.by as RateLimitBlock['by'], context.user !== undefined),
    global: position.global,
    settle,
    maxLimit,
    withLimit: (run, limit) => runAtLimit(runSpec, run, limit, 'declared-stays'),
    origin: site.fieldPrefix === '' ? site.route : `${site.route} ${site.fieldPrefix.slice(0, -1)}`
  }
}
