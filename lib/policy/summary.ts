import type { PolicyBlockSummary, PolicySummary } from '../types.js'
import type { CompiledBlock, CompiledPolicy } from './policy.js'

/** Where the programmatic API finds policies by name (api.ts PolicyRegistry). */
export interface TargetRegistry {
  add: (name: string, policy: CompiledPolicy) => void
}

/** What `policies()` and `printPolicies` list, and the names the API finds each policy by. */
export interface Listing {
  registry: TargetRegistry
  summaries: PolicySummary[]
}

function summarize (block: CompiledBlock, policy: CompiledPolicy): PolicyBlockSummary {
  const { params } = block.base
  return {
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
}

/** The names of a policy's own blocks (not the global ones), as API targets. */
export function ownBlockNames (policy: CompiledPolicy): string[] {
  return policy.blocks.flatMap((block) => block.global ? [] : [block.name])
}

/** Adds a policy's row (`method` as listed) and registers it under each of `targets`. */
export function listPolicy (
  listing: Listing,
  row: { method: string, url: string },
  policy: CompiledPolicy,
  targets: readonly string[]
): void {
  const limits = policy.blocks.map((block) => summarize(block, policy))
  listing.summaries.push({ method: row.method, url: row.url, limit: limits[0] ?? false, limits })
  for (const target of targets) listing.registry.add(target, policy)
}

/** A row for a route without limits (`rateLimit: false`, a preflight catch-all). */
export function listUnlimited (listing: Listing, method: string, url: string): void {
  listing.summaries.push({ method, url, limit: false, limits: [] })
}

/** Deep copies of the rows: a caller of `policies()` cannot change the plugin's. */
export function copySummaries (summaries: readonly PolicySummary[]): PolicySummary[] {
  return summaries.map((summary) => {
    const limits = summary.limits.map((block) => ({ ...block, by: [...block.by], tiers: block.tiers === undefined ? undefined : structuredClone(block.tiers) }))
    return { ...summary, limit: limits[0] ?? false, limits }
  })
}
