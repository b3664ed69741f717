import { constraintText, routeLabel } from '../keys/constraints.js'
import type { PolicyBlockSummary, PolicySummary } from '../types/index.js'
import type { CompiledBlock, CompiledPolicy } from './policy.js'

/** Where the programmatic API finds policies by name (api.ts PolicyRegistry). */
export interface TargetRegistry {
  add: (name: string, policy: CompiledPolicy) => void
  /** The route's exact form: `{ method, url, constraints }` in the API, one per method. */
  route: (route: { method: string, url: string, constraints: string }, policy: CompiledPolicy) => void
}

/** A policies() row's route: method(s) as listed, URL, and the route's constraints (Fastify's routeOptions.constraints). */
export interface RouteRow {
  method: string
  url: string
  constraints?: unknown
}

/** The row's route fields: `constraints` (a copy) only on a constrained route, so other rows are as they were. */
function routeFields ({ method, url, constraints }: RouteRow): Pick<PolicySummary, 'method' | 'url' | 'constraints'> {
  return constraintText(constraints) === '' ? { method, url } : { method, url, constraints: { ...constraints as Record<string, unknown> } }
}

/** What `policies()` and `printPolicies` list, and the names the API finds each policy by. */
export interface Listing {
  registry: TargetRegistry
  summaries: PolicySummary[]
}

function summarize (block: CompiledBlock, policy: CompiledPolicy): PolicyBlockSummary {
  const { params } = block.base
  const row: PolicyBlockSummary = {
    name: block.name,
    algorithm: block.algorithm,
    limit: params.limit,
    windowMs: params.windowMs,
    burst: params.burst,
    by: [...block.by],
    onRedisError: block.onRedisError,
    fromDefault: policy.fromDefault && !block.global,
    mode: block.mode,
    global: block.global,
    tiers: block.tiers === undefined
      ? undefined
      : Object.fromEntries([...block.tiers].map(([tier, run]) => [tier, { limit: run.params.limit, burst: run.params.burst }])),
    refunds: block.refundOn !== undefined,
    settles: block.settle !== undefined
  }
  if (block.runSpec.delayMs !== undefined) {
    if (block.kind.holdsSlot) row.waitMs = block.runSpec.delayMs
    else row.delayMs = block.runSpec.delayMs
  }
  block.kind.summarize?.(row, block.runSpec.period)
  return row
}

/** The names of a policy's own blocks (not the global ones), as API targets. */
export function ownBlockNames (policy: CompiledPolicy): string[] {
  return policy.blocks.flatMap((block) => block.global ? [] : [block.name])
}

/**
 * Adds a policy's row (`method` as listed, comma-separated) and registers it
 * as a target: per method `GET /url` (every route of that method and URL,
 * whatever its constraints), a constrained route's label
 * (`GET /url {"host":…}`) and its exact form, and each of `names` (block names).
 */
export function listPolicy (listing: Listing, row: RouteRow, policy: CompiledPolicy, names: readonly string[]): void {
  const limits = policy.blocks.map((block) => summarize(block, policy))
  listing.summaries.push({ ...routeFields(row), limit: limits[0] ?? false, limits })
  const constraints = constraintText(row.constraints)
  for (const method of row.method.split(',')) {
    listing.registry.add(`${method} ${row.url}`, policy)
    if (constraints !== '') listing.registry.add(routeLabel(method, row.url, constraints), policy)
    listing.registry.route({ method, url: row.url, constraints }, policy)
  }
  for (const name of names) listing.registry.add(name, policy)
}

/** A row for a route without limits (`rateLimit: false`, a preflight catch-all). */
export function listUnlimited (listing: Listing, row: RouteRow): void {
  listing.summaries.push({ ...routeFields(row), limit: false, limits: [] })
}

/** Deep copies of the rows: a caller of `policies()` cannot change the plugin's. */
export function copySummaries (summaries: readonly PolicySummary[]): PolicySummary[] {
  return summaries.map((summary) => {
    const limits = summary.limits.map((block) => ({ ...block, by: [...block.by], tiers: block.tiers === undefined ? undefined : structuredClone(block.tiers) }))
    const copy: PolicySummary = { ...summary, limit: limits[0] ?? false, limits }
    if (summary.constraints !== undefined) copy.constraints = { ...summary.constraints }
    return copy
  })
}
