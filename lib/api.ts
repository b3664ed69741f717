import type { FastifyBaseLogger } from 'fastify'
import { evaluate, peek, type DecisionInput, type Runtime } from './decide.js'
import { FST_RRL_INVALID_API_CALL, FST_RRL_UNKNOWN_POLICY } from './errors.js'
import { assembleKeys } from './keys.js'
import { runsForTier, type CompiledBlock, type CompiledPolicy } from './policy.js'
import type { PolicyBlockSummary, PolicySummary, RateLimitApi, RateLimitIdentity } from './types.js'
import { isCost, MAX_COST, shown } from './validate.js'

/*
 * fastify.rateLimit: list, peek, reset and consume, for tooling and for limits
 * outside HTTP routes. A target is named by its route (`'GET /orders/:id'`),
 * by a block name (a route's or a global block's), or by a name from the
 * `policies` option. A caller is named by a RateLimitIdentity: the values the
 * target's `by` parts would read from a request (see types.ts).
 */

export function summarize (block: CompiledBlock, fromDefault: boolean): PolicyBlockSummary {
  const { params } = block.base
  return {
    name: block.name,
    algorithm: block.algorithm,
    limit: params.limit,
    windowMs: params.windowMs,
    burst: params.burst,
    by: [...block.by],
    onRedisError: block.onRedisError,
    fromDefault: fromDefault && !block.global,
    mode: block.mode,
    global: block.global,
    tiers: block.tiers === undefined ? undefined : Object.fromEntries([...block.tiers].map(([tier, run]) => [tier, { limit: run.params.limit, burst: run.params.burst }])),
    refunds: block.refundOn !== undefined
  }
}

export class PolicyRegistry {
  readonly #targets = new Map<string, CompiledPolicy | 'ambiguous'>()

  /** Registers a target name; a name two policies claim can only be reached by route. */
  add (name: string, policy: CompiledPolicy): void {
    const known = this.#targets.get(name)
    this.#targets.set(name, known === undefined || known === policy ? policy : 'ambiguous')
  }

  find (target: unknown, method: string): CompiledPolicy {
    if (typeof target !== 'string') throw new FST_RRL_INVALID_API_CALL(method, `the target must be a string (got ${typeof target})`)
    const policy = this.#targets.get(target)
    if (policy === undefined) throw new FST_RRL_UNKNOWN_POLICY(JSON.stringify(target))
    if (policy === 'ambiguous') throw new FST_RRL_INVALID_API_CALL(method, `${JSON.stringify(target)} names blocks of several routes: name the route instead ('GET /path')`)
    return policy
  }
}

function identityInput (identity: unknown, method: string): RateLimitIdentity {
  if (identity === null || typeof identity !== 'object' || Array.isArray(identity)) {
    throw new FST_RRL_INVALID_API_CALL(method, 'the identity must be an object like { ip: \'1.2.3.4\' } or { user: \'alice\' }')
  }
  const input = identity as Record<string, unknown>
  for (const field of ['ip', 'user', 'apiKey', 'tier'] as const) {
    if (input[field] !== undefined && typeof input[field] !== 'string') throw new FST_RRL_INVALID_API_CALL(method, `identity.${field} must be a string (got ${typeof input[field]})`)
  }
  for (const field of ['headers', 'params', 'body'] as const) {
    if (input[field] !== undefined && (input[field] === null || typeof input[field] !== 'object')) throw new FST_RRL_INVALID_API_CALL(method, `identity.${field} must be an object`)
  }
  return input as RateLimitIdentity
}

function apiCost (cost: unknown, method: string): number {
  if (cost === undefined) return 1
  if (!isCost(cost)) throw new FST_RRL_INVALID_API_CALL(method, `cost must be an integer from 1 to ${MAX_COST} (got ${shown(cost)})`)
  return cost
}

/** The keys the target's blocks use for this caller: the same assembler as the route hook's (async function parts awaited, bounded). */
async function apiKeys (policy: CompiledPolicy, identity: RateLimitIdentity): Promise<string[]> {
  return assembleKeys(policy, await Promise.all(policy.identities.map((compiled) => compiled.resolveInput(identity))))
}

/** The decision input for an API call: the caller's keys under the target's runs for its tier. */
async function apiInput (policy: CompiledPolicy, identity: RateLimitIdentity, units: number): Promise<DecisionInput> {
  const runs = runsForTier(policy, identity.tier)
  return { policy, runs, keys: await apiKeys(policy, identity), costs: runs.map(() => units) }
}

export function createApi (registry: PolicyRegistry, runtime: Runtime, log: FastifyBaseLogger, summaries: () => PolicySummary[]): RateLimitApi {
  return {
    policies: summaries,
    stats: () => ({ ...runtime.stats }),
    async peek (target, identity, cost) {
      const policy = registry.find(target, 'peek')
      return await peek(await apiInput(policy, identityInput(identity, 'peek'), apiCost(cost, 'peek')), runtime)
    },
    async reset (target, identity) {
      const policy = registry.find(target, 'reset')
      const keys = await apiKeys(policy, identityInput(identity, 'reset'))
      // A route's reset leaves the identity's global blocks alone (name a global block to reset it).
      const own = policy.blocks.every((block) => block.global) ? keys : keys.filter((_, i) => !(policy.blocks[i] as CompiledBlock).global)
      for (const key of own) runtime.denyCache?.delete(key)
      await runtime.store.reset(own)
    },
    async consume (target, identity, cost) {
      const policy = registry.find(target, 'consume')
      const input = await apiInput(policy, identityInput(identity, 'consume'), apiCost(cost, 'consume'))
      return (await evaluate(input, { log, route: `api ${policy.route}`, source: 'api' }, runtime)).decision
    }
  }
}

/** The startup table for `printPolicies: true`. */
export function policyTable (summaries: PolicySummary[]): string {
  const rows: string[][] = [['route', 'policy', 'algorithm', 'limit', 'window', 'burst', 'by', 'mode', 'on error']]
  for (const summary of summaries) {
    // Fastify's HEAD twin of a GET shares its limits and keys: one row is enough.
    if (summary.method === 'HEAD' && summaries.some((other) => other.method === 'GET' && other.url === summary.url)) continue
    const route = `${summary.method} ${summary.url}`
    if (summary.limits.length === 0) {
      rows.push([route, '(none: rateLimit false)', '', '', '', '', '', '', ''])
      continue
    }
    for (const block of summary.limits) {
      const limit = block.tiers === undefined ? String(block.limit) : Object.entries(block.tiers).map(([tier, values]) => `${tier}=${values.limit}`).join(' ')
      rows.push([route, block.name + (block.global ? ' (global)' : ''), block.algorithm, limit, `${block.windowMs}ms`, String(block.burst), block.by.join(', '), block.mode, block.onRedisError])
    }
  }
  const widths = (rows[0] as string[]).map((_, column) => Math.max(...rows.map((row) => (row[column] as string).length)))
  return rows.map((row) => row.map((cell, column) => cell.padEnd(widths[column] as number)).join('  ').trimEnd()).join('\n')
}
