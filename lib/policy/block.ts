import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ALGORITHMS, MAX_LIMIT, MAX_SLIDING_LOG_LIMIT, MAX_WINDOW_MS, type AlgorithmName } from '../store/algorithms.js'
import { parseWindow } from './duration.js'
import { FST_RRL_INVALID_BLOCK } from '../errors.js'
import { compileIdentity, type CompiledIdentity, type IdentityContext } from '../keys/identity.js'
import { keyMethod, keySuffix } from '../keys/layout.js'
import type { BlockRun, Penalty } from '../store/port.js'
import type { FailurePolicy, RateLimitBlock, RateLimitHook, RateLimitMode, SkipPredicate } from '../types.js'
import { choiceProblem, FAILURE_POLICIES, HOOKS, isCount, isPolicyName, MODES, POLICY_NAME_RULE, shown } from './validate.js'

/*
 * One block: validated and compiled once, at onRoute (or at register for
 * defaultLimit, globalLimits and policies). Everything that does not depend on
 * the route's other blocks is decided here; policy.ts composes blocks into a
 * route's policy. A bad block throws FST_RRL_INVALID_BLOCK naming the route and
 * the field, so bad configuration fails startup, never a request.
 */

/** The fields a block may have (the README documents each; test/readme.test.ts checks). */
export const BLOCK_FIELDS: ReadonlySet<string> = new Set(['limit', 'window', 'algorithm', 'burst', 'by', 'cost', 'onRedisError', 'name', 'mode', 'refundOn', 'penalty', 'localLimit', 'hook', 'requestLimit', 'skip'])
/** Policy names are at most this long (validate.ts); a derived one is cut to fit. */
const MAX_NAME_LENGTH = 64
/** Tier names: short tokens, so they can be shown in headers and metrics as they are. */
const TIER_NAME = /^[A-Za-z0-9_.-]{1,32}$/
/** The tier every tier map must define: used when `tier(request)` gives nothing or an unknown name. */
export const FALLBACK_TIER = 'default'

export type RefundPredicate = (reply: FastifyReply) => boolean

export interface CompiledBlock {
  name: string
  algorithm: AlgorithmName
  /** The run for the fallback tier (or the only one). */
  base: BlockRun
  /** Per-tier runs, when limit or burst is a tier map. */
  tiers: Map<string, BlockRun> | undefined
  cost: number | ((request: FastifyRequest) => number)
  mode: RateLimitMode
  onRedisError: FailurePolicy
  refundOn: RefundPredicate | undefined
  /** `skip(request)`: true lets the request through unlimited (the whole route). */
  skip: SkipPredicate | undefined
  /** Key suffix, e.g. `sw60000` (`.1` appended for a same-suffix sibling). */
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
  /** `run` with another limit (a requestLimit result): burst follows it unless declared; the local share too. */
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
}

/**
 * The name a block gets when it has none: `get-orders-id` for `GET /orders/:id`.
 * A route the slug cannot show faithfully (characters other than A-Z a-z 0-9
 * / : -, e.g. unicode, `*`, `_`) or one too long for 64 characters keeps a
 * readable prefix and ends in 8 hex digits of SHA-256 over method and route:
 * valid for any route, the same on every start, distinct per route (plain
 * names of routes that differ only in punctuation, `/a/:b` and `/a/b`, coincide).
 */
function defaultName (method: string, url: string, suffix: string): string {
  const slug = url.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-+|-+$/g, '')
  const readable = `${method.toLowerCase().replace(/,/g, '-')}-${slug === '' ? 'root' : slug}`
  if (readable.length + suffix.length <= MAX_NAME_LENGTH && /^[A-Za-z0-9/:-]*$/.test(url)) return readable + suffix
  const hash = createHash('sha256').update(`${method} ${url}`).digest('hex').slice(0, 8)
  return `${readable.slice(0, MAX_NAME_LENGTH - suffix.length - hash.length - 1).replace(/-+$/, '')}-${hash}${suffix}`
}

const MAX_PENALTY_AFTER = 1000
const MAX_BACKOFF = 100
const PENALTY_FIELDS = new Set(['after', 'for', 'backoff', 'max'])

/** `penalty: { after, for, backoff?, max? }`, validated and compiled; undefined when absent. */
function readPenalty (value: unknown, fail: Fail): Penalty | undefined {
  if (value === undefined) return undefined
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return fail('penalty', 'must be an object like { after: 3, for: \'15m\', backoff: 2 }')
  const input = value as Record<string, unknown>
  for (const field of Object.keys(input)) {
    if (!PENALTY_FIELDS.has(field)) fail(`penalty.${field}`, `is not a penalty field (known: ${[...PENALTY_FIELDS].join(', ')})`)
  }
  if (!isCount(input.after, MAX_PENALTY_AFTER)) fail('penalty.after', `must be an integer from 1 to ${MAX_PENALTY_AFTER} (got ${shown(input.after)})`)
  const forMs = parseWindow(input.for)
  if (typeof forMs === 'string') return fail('penalty.for', forMs)
  const maxMs = input.max === undefined ? MAX_WINDOW_MS : parseWindow(input.max)
  if (typeof maxMs === 'string') return fail('penalty.max', maxMs)
  if (maxMs < forMs) fail('penalty.max', `must be at least penalty.for (${forMs} ms; got ${maxMs} ms)`)
  const backoff = input.backoff ?? 2
  if (typeof backoff !== 'number' || !Number.isFinite(backoff) || backoff < 1 || backoff > MAX_BACKOFF) fail('penalty.backoff', `must be a number from 1 to ${MAX_BACKOFF} (got ${shown(input.backoff)})`)
  const after = input.after as number
  return { after, forMs, backoff: backoff as number, maxMs, arg: `${after}:${forMs}:${String(backoff)}:${maxMs}` }
}

/**
 * This instance's share of a block while Redis is unavailable (onRedisError
 * 'local'): `localLimit`, else `limit / fleetSize` (at least 1); the burst
 * scales with it. Undefined when neither is given.
 */
function localParams (limit: number, burst: number, localLimit: number | undefined, fleetSize: number | undefined): { limit: number, burst: number } | undefined {
  const share = localLimit ?? (fleetSize === undefined ? undefined : Math.max(1, Math.floor(limit / fleetSize)))
  if (share === undefined) return undefined
  return { limit: share, burst: Math.max(1, Math.floor(burst * share / limit)) }
}

function describeBy (by: RateLimitBlock['by'], hasUser: boolean): string[] {
  if (by === undefined) return hasUser ? ['user', 'ip (when no user)'] : ['ip']
  return (Array.isArray(by) ? by : [by]).map((part) => typeof part === 'function' ? `function ${part.name || '(anonymous)'}` : part)
}

type Fail = (field: string, message: string) => never

/** A count, or a tier map of counts with the fallback tier. Returns the map's entries (fallback first). */
function readCounts (value: unknown, field: string, max: number, maxText: string, fail: Fail): Array<[string | undefined, number]> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const entries = Object.entries(value as Record<string, unknown>)
    if (!Object.hasOwn(value, FALLBACK_TIER)) fail(field, `is a tier map without the fallback tier '${FALLBACK_TIER}' (got tiers ${entries.map(([name]) => JSON.stringify(name)).join(', ') || 'none'})`)
    const out: Array<[string | undefined, number]> = []
    for (const [tier, count] of entries) {
      if (!TIER_NAME.test(tier)) fail(field, `has a tier name ${JSON.stringify(tier)}: use 1 to 32 characters from A-Z a-z 0-9 _ . -`)
      if (!isCount(count, max)) fail(field, `must be an integer from 1 to ${maxText} for tier ${JSON.stringify(tier)} (got ${shown(count)})`)
      out.push([tier, count as number])
    }
    out.sort((a, b) => (a[0] === FALLBACK_TIER ? -1 : b[0] === FALLBACK_TIER ? 1 : 0))
    return out
  }
  if (!isCount(value, max)) fail(field, `must be an integer from 1 to ${maxText}, or a tier map like { ${FALLBACK_TIER}: 60, pro: 600 } (got ${shown(value)})`)
  return [[undefined, value as number]]
}

/**
 * Validates one block and compiles everything that does not depend on the
 * route's other blocks. Throws FST_RRL_INVALID_BLOCK naming the route and the
 * field: bad configuration fails startup, never a request.
 */
export function compileBlock (block: unknown, method: string | string[], url: string, context: CompileContext, fromDefault: boolean, position: { index: number, of: number, global: boolean }): CompiledBlock {
  const methodLabel = Array.isArray(method) ? method.join(',') : method
  const route = position.global ? `globalLimits[${position.index}]` : `${methodLabel} ${url}`
  const where = fromDefault ? `${route} (from defaultLimit)` : route
  const prefix = position.of > 1 && !position.global ? `rateLimit[${position.index}].` : ''
  const fail: Fail = (field, message) => {
    throw new FST_RRL_INVALID_BLOCK(where, prefix + field, message)
  }
  if (block === null || typeof block !== 'object' || Array.isArray(block)) {
    return fail(position.global ? 'block' : 'rateLimit', 'must be an object like { limit: 100, window: \'1m\' } or false')
  }
  const input = block as Record<string, unknown>
  for (const field of Object.keys(input)) {
    if (!BLOCK_FIELDS.has(field)) fail(field, `is not a rate limit field (known: ${[...BLOCK_FIELDS].join(', ')})`)
  }

  const algorithm = (input.algorithm ?? 'sliding-window') as AlgorithmName
  if (!ALGORITHMS.includes(algorithm)) fail('algorithm', `must be one of ${ALGORITHMS.join(', ')} (got ${JSON.stringify(input.algorithm)})`)
  const bursty = algorithm === 'token-bucket' || algorithm === 'gcra'

  const maxLimit = algorithm === 'sliding-log' ? MAX_SLIDING_LOG_LIMIT : MAX_LIMIT
  const limits = readCounts(input.limit, 'limit', maxLimit, `${maxLimit}${algorithm === 'sliding-log' ? ' for sliding-log (one sorted-set entry per request)' : ''}`, fail)

  const windowMs = parseWindow(input.window)
  if (typeof windowMs === 'string') return fail('window', windowMs)

  let bursts: Map<string | undefined, number> | undefined
  if (input.burst !== undefined) {
    if (!bursty) fail('burst', `only applies to token-bucket and gcra (algorithm is ${algorithm})`)
    bursts = new Map(readCounts(input.burst, 'burst', MAX_LIMIT, String(MAX_LIMIT), fail))
  }
  const tiered = limits[0]?.[0] !== undefined || (bursts !== undefined && [...bursts.keys()][0] !== undefined)
  // Every tier named in either map gets a run; a tier missing from one map takes that map's fallback.
  const tierNames: Array<string | undefined> = tiered
    ? [...new Set([FALLBACK_TIER, ...limits.map(([tier]) => tier as string), ...(bursts === undefined ? [] : [...bursts.keys()] as string[])].filter((tier) => tier !== undefined))]
    : [undefined]
  const limitOf = (tier: string | undefined): number => {
    const own = limits.find(([name]) => name === tier) ?? limits.find(([name]) => name === FALLBACK_TIER) ?? limits[0]
    return (own as [string | undefined, number])[1]
  }
  const burstOf = (tier: string | undefined, limit: number): number => {
    if (bursts === undefined) return limit
    return bursts.get(tier) ?? bursts.get(FALLBACK_TIER) ?? bursts.get(undefined) ?? limit
  }
  let minCapacity = Infinity
  for (const tier of tierNames) {
    const limit = limitOf(tier)
    minCapacity = Math.min(minCapacity, bursty ? burstOf(tier, limit) : limit)
  }

  let cost: CompiledBlock['cost'] = 1
  if (input.cost !== undefined) {
    if (typeof input.cost === 'function') cost = input.cost as (request: FastifyRequest) => number
    else if (isCount(input.cost, minCapacity)) cost = input.cost
    else fail('cost', `must be an integer from 1 to the capacity (${minCapacity}${tiered ? ', the smallest tier\'s' : ''}) or a function (got ${shown(input.cost)})`)
  }

  const onRedisError = (input.onRedisError ?? context.onRedisError) as FailurePolicy
  const badFailurePolicy = choiceProblem(onRedisError, FAILURE_POLICIES)
  if (badFailurePolicy !== undefined) fail('onRedisError', badFailurePolicy)
  if (position.global && input.onRedisError !== undefined) fail('onRedisError', 'is decided by each route (a global block is decided together with the route\'s own blocks)')

  const mode = (input.mode ?? context.mode) as RateLimitMode
  const badMode = choiceProblem(mode, MODES)
  if (badMode !== undefined) fail('mode', badMode)

  if (input.refundOn !== undefined && typeof input.refundOn !== 'function') fail('refundOn', `must be a function (reply) => boolean (got ${typeof input.refundOn})`)
  if (input.refundOn !== undefined && algorithm === 'sliding-log') fail('refundOn', 'is not supported by sliding-log (use fixed-window, sliding-window, token-bucket or gcra)')

  if (input.skip !== undefined && typeof input.skip !== 'function') fail('skip', `must be a function (request) => boolean | Promise<boolean> (got ${typeof input.skip})`)
  if (input.skip !== undefined && position.global) fail('skip', 'is decided by each route (a global block applies to every route; use the allowList option)')

  const method4key = keyMethod(method)
  const name = input.name ?? (position.global ? `global-${position.index}` : defaultName(method4key, url, position.index > 0 ? `-${position.index}` : ''))
  if (!isPolicyName(name)) fail('name', `must be ${POLICY_NAME_RULE} (got ${JSON.stringify(input.name)})`)

  const identity = compileIdentity(input.by as RateLimitBlock['by'], context, route)
  if (typeof identity === 'string') return fail('by', identity)
  if (identity.usesParams) {
    if (position.global) fail('by', 'uses a route parameter, but a global block applies to every route')
    for (const part of (Array.isArray(input.by) ? input.by : [input.by])) {
      if (typeof part === 'string' && part.startsWith('param:') && !routeHasParam(url, part.slice(6))) {
        fail('by', `uses ${JSON.stringify(part)} but the route has no :${part.slice(6)} parameter`)
      }
    }
  }
  if (position.global && identity.needsBody) fail('by', 'uses a body field, but a global block applies to every route (most have no body)')

  const penalty = readPenalty(input.penalty, fail)

  if (input.localLimit !== undefined && !isCount(input.localLimit, maxLimit)) fail('localLimit', `must be an integer from 1 to ${maxLimit} (got ${shown(input.localLimit)})`)
  const localLimit = input.localLimit as number | undefined

  if (input.hook !== undefined) {
    const badHook = choiceProblem(input.hook, HOOKS)
    if (badHook !== undefined) fail('hook', badHook)
    if (position.global) fail('hook', 'is decided by each route (a global block is decided together with the route\'s own blocks, at the route\'s stage)')
  }
  if (input.requestLimit !== undefined && typeof input.requestLimit !== 'function') fail('requestLimit', `must be a function (request) => number | Promise<number> (got ${shown(input.requestLimit)})`)

  const algorithmNumber = ALGORITHMS.indexOf(algorithm) + 1
  const runWith = (tier: string | undefined, limit: number, burst: number): BlockRun => {
    const local = localParams(limit, burst, localLimit, context.fleetSize)
    return {
      algorithm,
      algorithmNumber,
      params: { limit, windowMs, burst },
      scriptArgs: [String(limit), String(windowMs), String(burst)],
      shadow: mode === 'shadow',
      tier,
      penalty,
      local: local === undefined ? undefined : { limit: local.limit, windowMs, burst: local.burst }
    }
  }
  const runOf = (tier: string | undefined): BlockRun => {
    const limit = limitOf(tier)
    return runWith(tier, limit, bursty ? burstOf(tier, limit) : limit)
  }
  // A declared burst stays; otherwise the capacity is the request's limit, as it is the block's.
  const withLimit = (run: BlockRun, limit: number): BlockRun => limit === run.params.limit
    ? run
    : runWith(run.tier, limit, bursty && bursts !== undefined ? run.params.burst : limit)
  const base = runOf(tiered ? FALLBACK_TIER : undefined)
  const tiers = tiered ? new Map(tierNames.map((tier) => [tier as string, tier === FALLBACK_TIER ? base : runOf(tier)])) : undefined
  return {
    name: name as string,
    algorithm,
    base,
    tiers,
    cost,
    mode,
    onRedisError,
    refundOn: input.refundOn as RefundPredicate | undefined,
    skip: input.skip as SkipPredicate | undefined,
    suffix: keySuffix(algorithm, windowMs),
    identity,
    bySpec: input.by as RateLimitBlock['by'],
    by: describeBy(input.by as RateLimitBlock['by'], context.user !== undefined),
    global: position.global,
    hook: input.hook as RateLimitHook | undefined,
    requestLimit: input.requestLimit as CompiledBlock['requestLimit'],
    maxLimit,
    withLimit,
    origin: prefix === '' ? route : `${route} ${prefix.slice(0, -1)}`
  }
}

function routeHasParam (url: string, name: string): boolean {
  // Fastify params: `/:id`, `/:id(^\\d+)`, `/:from-:to`, `/:file.:ext`.
  let at = url.indexOf(':' + name)
  while (at !== -1) {
    const next = url.charAt(at + name.length + 1)
    if (!/[A-Za-z0-9_]/.test(next)) return true
    at = url.indexOf(':' + name, at + 1)
  }
  return false
}
