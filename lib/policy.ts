import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ALGORITHMS, MAX_LIMIT, MAX_SLIDING_LOG_LIMIT, type AlgorithmName, type BlockParams } from './algorithm-types.js'
import { parseWindow } from './duration.js'
import { FST_RRL_INVALID_BLOCK } from './errors.js'
import { compileIdentity, type CompiledIdentity, type IdentityContext } from './identity.js'
import { keyHead, keyTail, routeSegment } from './keys.js'
import type { FailurePolicy, RateLimitBlock, RateLimitMode } from './types.js'
import { shown } from './shown.js'

/*
 * Compilation happens once per route, at onRoute: the per-request path only
 * reads the fields below (no parsing, no string building besides the key).
 *
 * A route's policy is an ordered list of blocks: its own (`config.rateLimit`,
 * one block or an array) followed by the plugin's `globalLimits`. All blocks of
 * one request are decided in one store call, all-or-nothing.
 *
 * Key scheme (every key of one request shares one Redis Cluster hash tag):
 *   - no globalLimits:  <prefix>:{<METHOD>:<route>|<identity>}:<suffix>        (unchanged)
 *   - with globalLimits, route block:  <prefix>:{<identity>}:<METHOD>:<route>:<suffix>
 *   - with globalLimits, global block: <prefix>:{<identity>}:*:<suffix>        (route-independent)
 * <suffix> is the algorithm's two letters and the window in ms (`sw60000`);
 * a second block with the same algorithm and window on one route (or among
 * the globals) gets `.<index>` appended. Limits and tiers are not part of a
 * key, so changing a limit, or a caller changing tier, keeps the count.
 * Blocks of one request that use different identities (`by`) cannot share a
 * tag: each keeps its own (route blocks the first form, globals the third),
 * which a single Redis or Sentinel accepts and a Redis Cluster refuses (so
 * that combination is a startup error with a Cluster client).
 */

/** The numbers one block runs with for one tier (or for all, without tiers). */
export interface BlockRun {
  algorithm: AlgorithmName
  /** 1-based position in ALGORITHMS: the multi script's algorithm number. */
  algorithmNumber: number
  params: BlockParams
  /** limit, windowMs, burst as script arguments. */
  scriptArgs: readonly [string, string, string]
  /** Decided and recorded, never blocks the request. */
  shadow: boolean
  /** The tier this run applies to, or undefined when the block has no tiers. */
  tier: string | undefined
  /** `"name";q=100;w=60` (plus `;tier="pro"` with tiers). */
  policyItem: string
}

export type RefundPredicate = (reply: FastifyReply) => boolean

export interface CompiledBlock {
  name: string
  /** `"name"`: the policy name as a Structured Fields string. */
  nameItem: string
  algorithm: AlgorithmName
  /** The run for the fallback tier (or the only one). */
  base: BlockRun
  /** Per-tier runs, when limit or burst is a tier map. */
  tiers: Map<string, BlockRun> | undefined
  cost: number | ((request: FastifyRequest) => number)
  mode: RateLimitMode
  onRedisError: FailurePolicy
  refundOn: RefundPredicate | undefined
  /** Key suffix, e.g. `sw60000` (`.1` appended for a same-suffix sibling). */
  suffix: string
  identity: CompiledIdentity
  /** The raw `by`, to tell whether two blocks share an identity. */
  bySpec: RateLimitBlock['by']
  by: string[]
  global: boolean
  /** Where it was declared, for errors: `GET /x`, `GET /x rateLimit[1]`, `globalLimits[0]`. */
  origin: string
}

/** Everything one route's requests need. */
export interface CompiledPolicy {
  /** `GET /orders/:id`, for logs and errors. */
  route: string
  /** The first block's name (the route's own policy). */
  name: string
  blocks: readonly CompiledBlock[]
  /** The runs for requests without a tier (or of the fallback tier). */
  runs: readonly BlockRun[]
  /** Per tier name: the run of every block (only when some block has tiers). */
  tierRuns: Map<string, readonly BlockRun[]> | undefined
  /** The `RateLimit-Policy` value per run list (enforced blocks only); '' = send none. */
  policyHeaders: Map<readonly BlockRun[], string>
  identities: readonly CompiledIdentity[]
  /** Block i's identity is identities[identityOf[i]]. */
  identityOf: readonly number[]
  keyHeads: readonly string[]
  keyTails: readonly string[]
  onRedisError: FailurePolicy
  fromDefault: boolean
  /** Whether a 429 body may echo the request path (not when an identity comes from a path param). */
  echoPath: boolean
  needsBody: boolean
  /** Some block has a refundOn predicate. */
  refunds: boolean
  /** Every block is in shadow mode: nothing is ever refused and no header is sent. */
  allShadow: boolean
  /** The identity kinds of every block (for logs and the decision channel): kinds, never values. */
  identityKinds: string[]
}

const BLOCK_FIELDS = new Set(['limit', 'window', 'algorithm', 'burst', 'by', 'cost', 'onRedisError', 'name', 'mode', 'refundOn'])
const SUFFIX: Record<AlgorithmName, string> = {
  'fixed-window': 'fw',
  'sliding-window': 'sw',
  'sliding-log': 'sl',
  'token-bucket': 'tb',
  gcra: 'gc'
}
const MAX_NAME_LENGTH = 64
const PRINTABLE_NAME = /^[\x20-\x7e]{1,64}$/
/** Tier names: short tokens, so they can be shown in headers and metrics as they are. */
const TIER_NAME = /^[A-Za-z0-9_.-]{1,32}$/
/** The tier every tier map must define: used when `tier(request)` gives nothing or an unknown name. */
export const FALLBACK_TIER = 'default'

export interface CompileContext extends IdentityContext {
  prefix: string
  onRedisError: FailurePolicy
  mode: RateLimitMode
  /** The store talks to a Redis Cluster: every key of one request must share one slot. */
  cluster: boolean
}

/** The HEAD route Fastify adds for a GET shares the GET's bucket, and so does an explicit HEAD. */
export function keyMethod (method: string | string[]): string {
  if (Array.isArray(method)) return [...new Set(method.map(keyMethod))].sort().join(',')
  const upper = method.toUpperCase()
  return upper === 'HEAD' ? 'GET' : upper
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

/** A Structured Fields string: printable ASCII with `"` and `\` escaped. */
function sfString (value: string): string {
  return '"' + value.replace(/[\\"]/g, '\\$&') + '"'
}

function isCount (value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max
}

function describeBy (by: RateLimitBlock['by'], hasUser: boolean): string[] {
  if (by === undefined) return hasUser ? ['user', 'ip (when no user)'] : ['ip']
  return (Array.isArray(by) ? by : [by]).map((part) => typeof part === 'function' ? `function ${part.name || '(anonymous)'}` : part)
}

/** Two `by` specs render the same identity for every request. */
function sameBy (a: RateLimitBlock['by'], b: RateLimitBlock['by']): boolean {
  if (a === undefined || b === undefined) return a === b
  const x = Array.isArray(a) ? a : [a]
  const y = Array.isArray(b) ? b : [b]
  return x.length === y.length && x.every((part, index) => part === y[index])
}

function policyItem (nameItem: string, limit: number, windowMs: number, tier: string | undefined): string {
  return `${nameItem};q=${limit};w=${Math.max(1, Math.ceil(windowMs / 1000))}` + (tier === undefined ? '' : `;tier=${sfString(tier)}`)
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
  if (onRedisError !== 'open' && onRedisError !== 'closed') fail('onRedisError', `must be 'open' or 'closed' (got ${JSON.stringify(input.onRedisError)})`)
  if (position.global && input.onRedisError !== undefined) fail('onRedisError', 'is decided by each route (a global block is decided together with the route\'s own blocks)')

  const mode = (input.mode ?? context.mode) as RateLimitMode
  if (mode !== 'enforce' && mode !== 'shadow') fail('mode', `must be 'enforce' or 'shadow' (got ${JSON.stringify(input.mode)})`)

  if (input.refundOn !== undefined && typeof input.refundOn !== 'function') fail('refundOn', `must be a function (reply) => boolean (got ${typeof input.refundOn})`)
  if (input.refundOn !== undefined && algorithm === 'sliding-log') fail('refundOn', 'is not supported by sliding-log (use fixed-window, sliding-window, token-bucket or gcra)')

  const method4key = keyMethod(method)
  const name = input.name ?? (position.global ? `global-${position.index}` : defaultName(method4key, url, position.index > 0 ? `-${position.index}` : ''))
  if (typeof name !== 'string' || !PRINTABLE_NAME.test(name)) fail('name', `must be 1 to 64 printable ASCII characters (got ${JSON.stringify(input.name)})`)

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

  const nameItem = sfString(name as string)
  const algorithmNumber = ALGORITHMS.indexOf(algorithm) + 1
  const runOf = (tier: string | undefined): BlockRun => {
    const limit = limitOf(tier)
    const burst = bursty ? burstOf(tier, limit) : limit
    return {
      algorithm,
      algorithmNumber,
      params: { limit, windowMs, burst },
      scriptArgs: [String(limit), String(windowMs), String(burst)],
      shadow: mode === 'shadow',
      tier,
      policyItem: policyItem(nameItem, limit, windowMs, tier)
    }
  }
  const base = runOf(tiered ? FALLBACK_TIER : undefined)
  const tiers = tiered ? new Map(tierNames.map((tier) => [tier as string, tier === FALLBACK_TIER ? base : runOf(tier)])) : undefined
  return {
    name: name as string,
    nameItem,
    algorithm,
    base,
    tiers,
    cost,
    mode,
    onRedisError,
    refundOn: input.refundOn as RefundPredicate | undefined,
    suffix: SUFFIX[algorithm] + windowMs,
    identity,
    bySpec: input.by as RateLimitBlock['by'],
    by: describeBy(input.by as RateLimitBlock['by'], context.user !== undefined),
    global: position.global,
    origin: prefix === '' ? route : `${route} ${prefix.slice(0, -1)}`
  }
}

/** Gives same-suffix siblings distinct keys: the second `sw60000` becomes `sw60000.1`. */
export function distinctSuffixes (blocks: CompiledBlock[]): void {
  const seen = new Set<string>()
  blocks.forEach((block, index) => {
    if (seen.has(block.suffix)) block.suffix = `${block.suffix}.${index}`
    seen.add(block.suffix)
  })
}

/** Compiles `globalLimits` once; their blocks are shared by every route. */
export function compileGlobals (input: unknown, context: CompileContext): CompiledBlock[] {
  const list = input as unknown[]
  const blocks = list.map((block, index) => compileBlock(block, '*', '*', context, false, { index, of: list.length, global: true }))
  distinctSuffixes(blocks)
  return blocks
}

/**
 * Compiles a route's `config.rateLimit` (a block or an array of blocks) together
 * with the global blocks into the route's policy.
 */
export function compilePolicy (declared: unknown, method: string | string[], url: string, context: CompileContext, fromDefault: boolean, globals: readonly CompiledBlock[] = []): CompiledPolicy {
  const methodLabel = Array.isArray(method) ? method.join(',') : method
  const route = `${methodLabel} ${url}`
  const where = fromDefault ? `${route} (from defaultLimit)` : route
  let own: CompiledBlock[]
  if (declared === undefined && globals.length > 0) {
    // No block of its own and no defaultLimit: the global blocks alone limit the route.
    own = []
  } else if (Array.isArray(declared)) {
    if (declared.length === 0 || declared.length > 16) throw new FST_RRL_INVALID_BLOCK(where, 'rateLimit', `must be a block, an array of 1 to 16 blocks, or false (got ${declared.length} blocks)`)
    own = declared.map((block, index) => compileBlock(block, method, url, context, fromDefault, { index, of: declared.length, global: false }))
    const names = new Set<string>()
    for (const block of own) {
      if (names.has(block.name)) throw new FST_RRL_INVALID_BLOCK(where, 'name', `${JSON.stringify(block.name)} is used by two blocks of the route (names tell policies apart in headers)`)
      names.add(block.name)
    }
    distinctSuffixes(own)
  } else {
    own = [compileBlock(declared, method, url, context, fromDefault, { index: 0, of: 1, global: false })]
  }
  for (const block of globals) {
    if (own.some((mine) => mine.name === block.name)) throw new FST_RRL_INVALID_BLOCK(where, 'name', `${JSON.stringify(block.name)} is also the name of a globalLimits block`)
  }
  const blocks = [...own, ...globals]

  // Identities: one per distinct `by`, resolved once per request.
  const identities: CompiledIdentity[] = []
  const specs: Array<RateLimitBlock['by']> = []
  const identityOf = blocks.map((block) => {
    const at = specs.findIndex((spec) => sameBy(spec, block.bySpec))
    if (at !== -1) return at
    specs.push(block.bySpec)
    identities.push(block.identity)
    return identities.length - 1
  })
  if (identities.length > 1 && context.cluster) {
    throw new FST_RRL_INVALID_BLOCK(where, 'by', `differs between the blocks of one request (${blocks.map((block) => `${block.origin}: ${block.by.join('+')}`).join('; ')}); with a Redis Cluster all keys of one request must share one hash tag, so every block of a route and every globalLimits block must use the same \`by\``)
  }

  const method4key = keyMethod(method)
  const segment = routeSegment(method4key, url)
  const tagByIdentity = globals.length > 0 && identities.length === 1
  const keyHeads = blocks.map((block) => block.global || tagByIdentity ? `${context.prefix}:{` : keyHead(context.prefix, segment))
  const keyTails = blocks.map((block) => keyTail(block.global ? `*:${block.suffix}` : tagByIdentity ? `${segment}:${block.suffix}` : block.suffix))

  const runs = blocks.map((block) => block.base)
  const policyHeaders = new Map<readonly BlockRun[], string>()
  const headerOf = (list: readonly BlockRun[]): string => list.filter((run) => !run.shadow).map((run) => run.policyItem).join(', ')
  policyHeaders.set(runs, headerOf(runs))
  let tierRuns: Map<string, readonly BlockRun[]> | undefined
  if (blocks.some((block) => block.tiers !== undefined)) {
    tierRuns = new Map()
    const names = new Set<string>()
    for (const block of blocks) for (const tier of block.tiers?.keys() ?? []) names.add(tier)
    for (const tier of names) {
      const list = blocks.map((block) => block.tiers?.get(tier) ?? block.tiers?.get(FALLBACK_TIER) ?? block.base)
      tierRuns.set(tier, list)
      policyHeaders.set(list, headerOf(list))
    }
  }

  const first = (own[0] ?? globals[0]) as CompiledBlock
  // Fail-closed wins: one block asking for it closes the route when the store fails.
  const onRedisError: FailurePolicy = own.length === 0 ? context.onRedisError : own.some((block) => block.onRedisError === 'closed') ? 'closed' : 'open'
  return {
    route,
    name: first.name,
    blocks,
    runs,
    tierRuns,
    policyHeaders,
    identities,
    identityOf,
    keyHeads,
    keyTails,
    onRedisError,
    fromDefault,
    echoPath: !identities.some((identity) => identity.usesParams),
    needsBody: identities.some((identity) => identity.needsBody),
    refunds: blocks.some((block) => block.refundOn !== undefined),
    allShadow: blocks.every((block) => block.mode === 'shadow'),
    identityKinds: [...new Set(identities.flatMap((identity) => identity.kinds))]
  }
}

/** A policy of one global block alone, for the programmatic API (`peek('global-0', ...)`). */
export function globalPolicy (block: CompiledBlock, context: CompileContext): CompiledPolicy {
  const runs = [block.base]
  const policyHeaders = new Map<readonly BlockRun[], string>([[runs, block.mode === 'shadow' ? '' : block.base.policyItem]])
  let tierRuns: Map<string, readonly BlockRun[]> | undefined
  if (block.tiers !== undefined) {
    tierRuns = new Map()
    for (const [tier, run] of block.tiers) {
      const list = [run]
      tierRuns.set(tier, list)
      policyHeaders.set(list, block.mode === 'shadow' ? '' : run.policyItem)
    }
  }
  return {
    route: block.origin,
    name: block.name,
    blocks: [block],
    runs,
    tierRuns,
    policyHeaders,
    identities: [block.identity],
    identityOf: [0],
    keyHeads: [`${context.prefix}:{`],
    keyTails: [keyTail(`*:${block.suffix}`)],
    onRedisError: context.onRedisError,
    fromDefault: false,
    echoPath: true,
    needsBody: false,
    refunds: block.refundOn !== undefined,
    allShadow: block.mode === 'shadow',
    identityKinds: [...block.identity.kinds]
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
