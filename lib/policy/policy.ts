import { compileBlock, FALLBACK_TIER, type BlockSource, type CompileContext, type CompiledBlock, type Declaration } from './block.js'
import { FST_RRL_INVALID_BLOCK } from '../errors.js'
import { routeLabel } from '../keys/constraints.js'
import type { CompiledIdentity } from '../keys/identity.js'
import { distinctSuffixes, keyLayout, type KeyLayout } from '../keys/layout.js'
import { HOOKS } from './rules.js'
import { MAX_ROUTE_BLOCKS } from '../limits.js'
import { warnCaseTwins } from './name-case.js'
import type { BlockRun } from '../store/port.js'
import type { FailurePolicy, RateLimitBlock, RateLimitHook, SkipPredicate } from '../types/index.js'

export { compileBlock, FALLBACK_TIER, type BlockSource, type CompileContext, type CompiledBlock, type Declaration, type RefundPredicate } from './block.js'
export type { BlockRun } from '../store/port.js'

/*
 * A route's policy: its own blocks (`config.rateLimit`, one or an array)
 * followed by the plugin's `globalLimits`, decided in one store call,
 * all-or-nothing. Compiled once per route: the request path only reads the
 * fields below (no parsing, no string building besides the key).
 */

/** One block of a route as one tier runs it: the compiled block and its run (a request adds its key and cost: decide/contract.ts RequestBlock). */
export interface RouteBlock {
  compiled: CompiledBlock
  run: BlockRun
}

/** Everything one route's requests need. */
export interface CompiledPolicy extends KeyLayout {
  /** `GET /orders/:id` (with its constraints' text when it has any: keys/constraints.ts), for logs, errors and ban scopes. */
  route: string
  /** The first block's name (the route's own policy). */
  name: string
  blocks: readonly CompiledBlock[]
  /** Every block with its run for requests without a tier (or of the fallback tier), in the blocks' order. */
  routeBlocks: readonly RouteBlock[]
  /** Per tier name: every block with its run for that tier (only when some block has tiers). */
  tierBlocks: Map<string, readonly RouteBlock[]> | undefined
  /** One per distinct `by`; block i's is identities[identityOf[i]]. */
  identities: readonly CompiledIdentity[]
  onRedisError: FailurePolicy
  fromDefault: boolean
  /** Whether a 429 body may echo the request path (not when an identity comes from a path param). */
  echoPath: boolean
  needsBody: boolean
  /** The stage the route's decision runs at (block `hook`, else the plugin's, raised to preValidation for a body part). */
  stage: RateLimitHook
  /** Some block has a `requestLimit` function. */
  requestLimits: boolean
  /** The `skip` predicates of the route's own blocks: any `true` lets a request through unlimited. */
  skips: readonly SkipPredicate[]
  /** Some block acts when the request ends (refundOn, settle, a held slot's release): admitted requests are tracked (request/end-of-request.ts). */
  endOfRequest: boolean
  /** Some block's kind holds a slot per request: each request gets a slot id, and holds its slots until the response closes. */
  holdsSlots: boolean
  /** Some block has a `delay`: a request may be admitted at a later turn and held until it (kinds/delay/holds.ts). */
  delays: boolean
  /** Every block is in shadow mode: nothing is ever refused and no header is sent. */
  allShadow: boolean
  /** The identity kinds of every block (for logs and the decision channel): kinds, never values. */
  identityKinds: string[]
}

/** Two `by` specs render the same identity for every request. */
function sameBy (a: RateLimitBlock['by'], b: RateLimitBlock['by']): boolean {
  if (a === undefined || b === undefined) return a === b
  const x = Array.isArray(a) ? a : [a]
  const y = Array.isArray(b) ? b : [b]
  return x.length === y.length && x.every((part, index) => part === y[index])
}

/** Compiles `globalLimits` once; their blocks are shared by every route. */
export function compileGlobals (input: unknown, context: CompileContext): CompiledBlock[] {
  const list = input as unknown[]
  const blocks = list.map((block, index) => compileBlock(block, { method: '*', url: '*', source: 'declared' }, context, { index, of: list.length, global: true }))
  distinctSuffixes(blocks)
  return blocks
}

/** The route's own blocks: one, or an array of distinctly named blocks. */
function ownBlocks (declared: unknown, at: Declaration, context: CompileContext, where: string): CompiledBlock[] {
  if (!Array.isArray(declared)) {
    return [compileBlock(declared, at, context, { index: 0, of: 1, global: false })]
  }
  if (declared.length === 0 || declared.length > MAX_ROUTE_BLOCKS) {
    throw new FST_RRL_INVALID_BLOCK(where, 'rateLimit', `must be a block, an array of 1 to ${MAX_ROUTE_BLOCKS} blocks, or false (got ${declared.length} blocks)`)
  }
  const own = declared.map((block, index) => compileBlock(block, at, context, { index, of: declared.length, global: false }))
  const names = new Set<string>()
  for (const block of own) {
    if (names.has(block.name)) {
      throw new FST_RRL_INVALID_BLOCK(where, 'name', `${JSON.stringify(block.name)} is used by two blocks of the route (names tell policies apart in headers)`)
    }
    names.add(block.name)
  }
  distinctSuffixes(own)
  return own
}

/**
 * Compiles a route's `config.rateLimit` (a block or an array of blocks) together
 * with the global blocks into the route's policy. `constraints`: the route's
 * constraint text (keys/constraints.ts), '' for none.
 */
export function compilePolicy (declared: unknown, at: Declaration, context: CompileContext, globals: readonly CompiledBlock[] = []): CompiledPolicy {
  const { method, url, source, constraints = '' } = at
  const methodLabel = Array.isArray(method) ? method.join(',') : method
  const route = routeLabel(methodLabel, url, constraints)
  const where = source === 'defaultLimit' ? `${route} (from defaultLimit)` : route
  // No block of its own and no defaultLimit: the global blocks alone limit the route.
  const own = declared === undefined && globals.length > 0 ? [] : ownBlocks(declared, at, context, where)
  for (const block of globals) {
    if (own.some((mine) => mine.name === block.name)) {
      throw new FST_RRL_INVALID_BLOCK(where, 'name', `${JSON.stringify(block.name)} is also the name of a globalLimits block`)
    }
  }
  return assemblePolicy({ route, where, at: { method, url, constraints }, own, globals, context, source })
}

/** A policy of one global block alone, for the programmatic API (`peek('global-0', ...)`). */
export function globalPolicy (block: CompiledBlock, context: CompileContext): CompiledPolicy {
  return assemblePolicy({ route: block.origin, where: block.origin, at: undefined, own: [], globals: [block], context, source: 'declared' })
}

/** What assemblePolicy composes: the compiled blocks and where they were declared. */
interface Assembly {
  /** `GET /x`, for logs; `where` adds `(from defaultLimit)` for errors. */
  route: string
  where: string
  /** The route the keys carry; undefined for a global block alone. */
  at: { method: string | string[], url: string, constraints: string } | undefined
  own: readonly CompiledBlock[]
  globals: readonly CompiledBlock[]
  context: CompileContext
  source: BlockSource
}

/** One identity per distinct `by` (resolved once per request), and block i's index among them. */
function distinctIdentities (
  blocks: readonly CompiledBlock[],
  where: string,
  cluster: boolean
): { identities: CompiledIdentity[], identityOf: number[] } {
  const identities: CompiledIdentity[] = []
  const specs: Array<RateLimitBlock['by']> = []
  const identityOf = blocks.map((block) => {
    const known = specs.findIndex((spec) => sameBy(spec, block.bySpec))
    if (known !== -1) return known
    specs.push(block.bySpec)
    identities.push(block.identity)
    return identities.length - 1
  })
  if (identities.length > 1 && cluster) {
    const list = blocks.map((block) => `${block.origin}: ${block.by.join('+')}`).join('; ')
    throw new FST_RRL_INVALID_BLOCK(where, 'by', `differs between the blocks of one request (${list}); with a Redis Cluster all keys of one request must share one hash tag, so every block of a route and every globalLimits block must use the same \`by\``)
  }
  return { identities, identityOf }
}

/** The block lists per tier, when some block has tiers. */
function tierLists (blocks: readonly CompiledBlock[]): Pick<CompiledPolicy, 'tierBlocks'> {
  if (!blocks.some((block) => block.tiers !== undefined)) return { tierBlocks: undefined }
  const tierBlocks = new Map<string, readonly RouteBlock[]>()
  const names = new Set<string>()
  for (const block of blocks) for (const tier of block.tiers?.keys() ?? []) names.add(tier)
  for (const tier of names) {
    const list = blocks.map((compiled) => ({ compiled, run: compiled.tiers?.get(tier) ?? compiled.tiers?.get(FALLBACK_TIER) ?? compiled.base }))
    tierBlocks.set(tier, list)
  }
  return { tierBlocks }
}

/** Fail-closed wins: one block asking for it closes the route when the store fails; then 'local'. */
function routeFailurePolicy ({ own, globals, context, where }: Assembly): FailurePolicy {
  if (own.length === 0) return context.onRedisError
  const policy = own.some((block) => block.onRedisError === 'closed') ? 'closed' : own.some((block) => block.onRedisError === 'local') ? 'local' : 'open'
  if (policy === 'local') {
    // Every block of the route (its globals too) is decided by the local limiter then: each needs its share.
    const without = [...own, ...globals].filter((block) => block.base.local === undefined)
    if (without.length > 0) {
      const names = without.map((block) => block.origin).join(', ')
      throw new FST_RRL_INVALID_BLOCK(where, 'onRedisError', `is 'local', but ${names} has no local share: set localLimit on the block or the plugin option fleetSize`)
    }
  }
  return policy
}

/**
 * The one assembler of a CompiledPolicy, for routes, named policies and a
 * global block alone: identities, key layout, tier run lists, header values
 * and the route-wide flags.
 */
function assemblePolicy (assembly: Assembly): CompiledPolicy {
  const { own, globals, context, where } = assembly
  const blocks = [...own, ...globals]
  warnCaseTwins(assembly.route, blocks)
  const { identities, identityOf } = distinctIdentities(blocks, where, context.cluster)
  const first = (own[0] ?? globals[0]) as CompiledBlock
  const onRedisError = routeFailurePolicy(assembly)
  const needsBody = identities.some((identity) => identity.needsBody)
  return {
    route: assembly.route,
    name: first.name,
    blocks,
    routeBlocks: blocks.map((compiled) => ({ compiled, run: compiled.base })),
    ...tierLists(blocks),
    identities,
    ...keyLayout(context.prefix, assembly.at, blocks, identityOf),
    onRedisError,
    fromDefault: assembly.source === 'defaultLimit',
    echoPath: !identities.some((identity) => identity.usesParams),
    needsBody,
    stage: routeStage(where, own, context.hook ?? 'onRequest', needsBody),
    requestLimits: blocks.some((block) => block.requestLimit !== undefined),
    skips: own.flatMap((block) => block.skip === undefined ? [] : [block.skip]),
    // A held request whose client leaves gives back what it charged, at the end of the request.
    endOfRequest: blocks.some((block) => block.refundOn !== undefined || block.settle !== undefined || block.kind.holdsSlot || block.runSpec.delayMs !== undefined),
    holdsSlots: blocks.some((block) => block.kind.holdsSlot),
    delays: blocks.some((block) => block.runSpec.delayMs !== undefined),
    allShadow: blocks.every((block) => block.mode === 'shadow'),
    identityKinds: [...new Set(identities.flatMap((identity) => identity.kinds))]
  }
}

/**
 * The stage a route's decision runs at: the one its blocks name (all the same),
 * else the plugin's. A body part needs the parsed body: the plugin's default is
 * raised to preValidation; a block naming an earlier stage is a startup error.
 */
function routeStage (
  where: string,
  own: readonly CompiledBlock[],
  pluginHook: RateLimitHook,
  needsBody: boolean
): RateLimitHook {
  const named = [...new Set(own.map((block) => block.hook).filter((hook) => hook !== undefined))]
  if (named.length > 1) {
    throw new FST_RRL_INVALID_BLOCK(where, 'hook', `differs between the blocks of one route (${named.join(', ')}); they are decided together, at one stage`)
  }
  const stage = named[0] ?? pluginHook
  if (!needsBody || HOOKS.indexOf(stage) >= HOOKS.indexOf('preValidation')) return stage
  if (named[0] !== undefined) {
    throw new FST_RRL_INVALID_BLOCK(where, 'hook', `is '${stage}', but the identity reads the body (body:<field>), which is parsed only by 'preValidation': use 'preValidation' or 'preHandler'`)
  }
  return 'preValidation'
}

/** The blocks with their runs for a request's tier (the fallback tier when it has none or an unknown one). */
export function blocksForTier (policy: CompiledPolicy, tier: string | undefined): readonly RouteBlock[] {
  if (policy.tierBlocks === undefined || tier === undefined) return policy.routeBlocks
  return policy.tierBlocks.get(tier) ?? policy.routeBlocks
}
