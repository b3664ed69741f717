import type { FastifyBaseLogger } from 'fastify'
import { evaluate, peek, type DecisionInput, type Runtime } from '../decide/evaluate.js'
import { holdSlots, newSlotId } from '../kinds/concurrency/decide.js'
import { waitForSlot } from '../kinds/concurrency/slot-wait.js'
import { tableCells } from '../kinds/index.js'
import { FST_RRL_INVALID_API_CALL, FST_RRL_LIMITER_UNAVAILABLE } from '../errors.js'
import { constraintText, routeLabel } from '../keys/constraints.js'
import { changeUsage } from '../decide/given-back.js'
import { scheduled, scheduleSignal } from './schedule.js'
import { assembleKeys, blockId } from '../keys/layout.js'
import { banApi, withBans } from '../fleet/ban-api.js'
import type { Bans } from '../fleet/bans.js'
import { changeText, identityInput, shownIdentity, ttlInput } from './inputs.js'
import type { Overrides } from '../fleet/overrides.js'
import { blocksForTier, type CompiledPolicy } from '../policy/policy.js'
import type { PolicyRegistry } from './registry.js'
import type {
  PolicySummary,
  RateLimitApi,
  RateLimitIdentity,
  RateLimitSlot,
  RateLimitOverride,
  RateLimitOverrideInput,
  RateLimitTarget
} from '../types/index.js'
import { isCost } from '../policy/rules.js'
import { MAX_COST } from '../limits.js'
import { isCount, shown } from '../util/validate.js'
import type { Adjustment, AuditTrail, PictureBoard } from '../store/port.js'
import { auditReset, fleetApi } from './fleet-api.js'
import { item } from '../util/item.js'

/*
 * fastify.rateLimit: list, peek, reset, consume, acquire and adjust, for tooling and for limits
 * outside HTTP routes. A target is named by its route (`'GET /orders/:id'`:
 * every route of that method and URL; a constrained route's label,
 * `'GET /api {"host":"a.example.com"}'`; or `{ method, url, constraints }`),
 * by a block name (a route's or a global block's), or by a name from the
 * `policies` option. A caller is named by a RateLimitIdentity: the values the
 * target's `by` parts would read from a request (see types.ts).
 */

function apiCost (cost: unknown, method: string): number {
  if (cost === undefined) return 1
  if (!isCost(cost)) {
    throw new FST_RRL_INVALID_API_CALL(method, `cost must be an integer from 1 to ${MAX_COST} (got ${shown(cost)})`)
  }
  return cost
}

/** The keys the target's blocks use for this caller: the same assembler as the route hook's (async function parts awaited, bounded). */
async function apiKeys (policy: CompiledPolicy, identity: RateLimitIdentity): Promise<string[]> {
  return assembleKeys(policy, await Promise.all(policy.identities.map((compiled) => compiled.resolveInput(identity))))
}

/** The decision input for an API call: the caller's keys under the target's runs for its tier (and overrides). */
async function apiInput (
  policy: CompiledPolicy,
  identity: RateLimitIdentity,
  units: number,
  overrides: Overrides
): Promise<DecisionInput> {
  const keys = await apiKeys(policy, identity)
  // assembleKeys gives one key per block, in the blocks' order.
  const blocks = blocksForTier(policy, identity.tier).map(({ compiled, run }, i) => ({ compiled, run, key: keys[i] as string, cost: units }))
  return { policy, blocks: overrides.apply(policy, blocks) }
}

/** What the API's calls that change usage work with (one record per call: the API is not the request path). */
interface ApiParts {
  runtime: Runtime
  log: FastifyBaseLogger
  overrides: Overrides
}

/** adjust's units: a signed integer (0 changes nothing). */
function apiUnits (units: unknown): number {
  if (typeof units !== 'number' || !Number.isInteger(units) || Math.abs(units) > MAX_COST) {
    throw new FST_RRL_INVALID_API_CALL('adjust', `units must be an integer from -${MAX_COST} to ${MAX_COST} (got ${shown(units)})`)
  }
  return units
}

/** The blocks a target names: a route's or named policy's own blocks (as reset), else the one block of that name. */
function namedBlocks (policy: CompiledPolicy, target: RateLimitTarget): boolean[] {
  const whole = typeof target !== 'string' || target === policy.route || policy.route === `API ${target}`
  const named = whole ? -1 : policy.blocks.findIndex((block) => block.name === target)
  return policy.blocks.map((block, i) => named === -1 ? !block.global : i === named)
}

/**
 * adjust: the caller's usage of every block of the target that can change it
 * after the fact (not sliding-log, not a concurrency block), by signed units, in one store call, never
 * refused.
 */
async function adjustUsage (policy: CompiledPolicy, target: RateLimitTarget, identity: RateLimitIdentity, units: number, { runtime, log, overrides }: ApiParts): Promise<string[]> {
  const input = await apiInput(policy, identity, 1, overrides)
  const chosen = namedBlocks(policy, target)
  const entries: Adjustment[] = []
  const names: string[] = []
  for (const [i, { compiled, run, key }] of input.blocks.entries()) {
    // A block that holds slots counts requests in flight, not units: acquire() and release() change it.
    if (chosen[i] !== true || compiled.algorithm === 'sliding-log' || compiled.kind.holdsSlot) continue
    // No charge time: a change made now, to the current window.
    entries.push({ kind: 'units', run, key, units })
    names.push(compiled.name)
  }
  if (units === 0 || entries.length === 0) return names
  await changeUsage(runtime, { route: `api ${policy.route}`, log, sources: ['adjust'], entries })
  return names
}

/** The block an override names: a block by name, else the route's (or policy's) one block of its own. */
function overrideBlock (policy: CompiledPolicy, target: RateLimitTarget): number {
  const named = typeof target === 'string' ? policy.blocks.findIndex((block) => block.name === target) : -1
  if (named !== -1) return named
  const own = policy.blocks.filter((block) => !block.global)
  if (own.length === 1) return policy.blocks.findIndex((block) => !block.global)
  throw new FST_RRL_INVALID_API_CALL('setOverride', `${JSON.stringify(target)} has ${own.length} blocks of its own: name one (${policy.blocks.map((block) => block.name).join(', ')})`)
}

async function overrideRecord (
  registry: PolicyRegistry,
  overrides: Overrides,
  input: RateLimitOverrideInput
): Promise<RateLimitOverride> {
  const method = 'setOverride'
  if (input === null || typeof input !== 'object') {
    throw new FST_RRL_INVALID_API_CALL(method, 'takes { target, limit, ttl, actor, reason, identity? }')
  }
  const policy = registry.find(input.target, method)
  const index = overrideBlock(policy, input.target)
  const block = item(policy.blocks, index)
  // The block's own bound: it depends on the window (maxLimitFor), as a declared limit's does.
  const max = block.maxLimit
  if (!isCount(input.limit, max)) {
    throw new FST_RRL_INVALID_API_CALL(method, `limit must be an integer from 1 to ${max} (got ${shown(input.limit)})`)
  }
  const ttl = ttlInput(input.ttl, method)
  const actor = changeText(input.actor, 'actor', method)
  const reason = changeText(input.reason, 'reason', method)
  const identity = input.identity === undefined ? undefined : identityInput(input.identity, method)
  const id = blockId(policy, index)
  const recordId = identity === undefined ? id : item(await apiKeys(policy, identity), index)
  // The store's clock: every instance judges the expiry by it (fleet/records.ts).
  const now = await overrides.stamp()
  return {
    id: recordId,
    blockId: id,
    block: block.name,
    route: block.global ? '*' : policy.route,
    identity: identity === undefined ? null : shownIdentity(identity),
    limit: input.limit,
    expiresAt: ttl === null ? null : now + ttl,
    actor,
    reason,
    setAt: now
  }
}

/** policies() with the overrides in force: a block's own, and how many callers have one. */
function withOverrides (summaries: PolicySummary[], registry: PolicyRegistry, overrides: Overrides): PolicySummary[] {
  const current = overrides.current()
  if (current.length === 0) return summaries
  for (const summary of summaries) {
    if (summary.limits.length === 0) continue
    const policy = registry.findRow(summary)
    if (policy === undefined) continue
    summary.limits.forEach((limit, index) => {
      const id = blockId(policy, index)
      const own = current.find((record) => record.id === id)
      if (own !== undefined) limit.override = own
      const callers = current.filter((record) => record.blockId === id && record.id !== id).length
      if (callers > 0) limit.identityOverrides = callers
    })
  }
  return summaries
}

/** `acquire()`: the target's slots (and its rate blocks, as consume charges them), held until release(). */
async function acquireSlot (
  policy: CompiledPolicy,
  target: RateLimitTarget,
  identity: RateLimitIdentity,
  { runtime, log, overrides }: ApiParts
): Promise<RateLimitSlot> {
  if (!policy.holdsSlots) {
    throw new FST_RRL_INVALID_API_CALL('acquire', `${JSON.stringify(target)} has no concurrency block (use consume for rate limits)`)
  }
  const input = { ...await apiInput(policy, identityInput(identity, 'acquire'), 1, overrides), slot: newSlotId() }
  const origin = { log, route: `api ${policy.route}`, source: 'api', waits: true } as const
  let evaluation = await evaluate(input, origin, runtime)
  if (evaluation.queued) {
    // A block's `wait`: the call waits for a slot as a request would; the plugin's close ends it unavailable.
    const result = await waitForSlot(evaluation, origin, runtime, () => () => {})
    if (result === 'left' || result === 'closed') throw Object.assign(new FST_RRL_LIMITER_UNAVAILABLE(1), { rateLimit: evaluation.decision, retryAfter: 1 })
    evaluation = result
  }
  // acquire() holds no turn: a place its decision carried is returned (waitForSlot took over a queued one's).
  evaluation.place?.release()
  const held = holdSlots(runtime, evaluation.input, evaluation, log)
  return { ...evaluation.decision, release: () => { held?.release() } }
}

/** A change's `{ actor, reason }`, checked as bans' and overrides' are. */
function changeInput (change: unknown, method: string): { actor: string, reason: string } {
  const input = (change !== null && typeof change === 'object' ? change : {}) as { actor?: unknown, reason?: unknown }
  return { actor: changeText(input.actor, 'actor', method), reason: changeText(input.reason, 'reason', method) }
}

/** Deletes the caller's state on the policy's own blocks; with `change`, logged and audited. */
async function resetCaller (policy: CompiledPolicy, identity: RateLimitIdentity, change: unknown, to: { runtime: Runtime, log: FastifyBaseLogger, audit: AuditTrail }): Promise<void> {
  const who = change === undefined ? undefined : changeInput(change, 'reset')
  const keys = await apiKeys(policy, identityInput(identity, 'reset'))
  // A route's reset leaves the identity's global blocks alone (name a global block to reset it).
  const own = policy.blocks.every((block) => block.global) ? keys : keys.filter((_, i) => policy.blocks[i]?.global !== true)
  for (const key of own) to.runtime.denyCache?.delete(key)
  await to.runtime.store.reset(own)
  if (who !== undefined) await auditReset(policy.route, identity, who, to)
}

export function createApi (
  registry: PolicyRegistry,
  runtime: Runtime,
  log: FastifyBaseLogger,
  summaries: () => PolicySummary[],
  records: { overrides: Overrides, bans: Bans, audit: AuditTrail, board: PictureBoard, timeout: number }
): RateLimitApi {
  const { overrides, bans, audit } = records
  return {
    policies: () => withBans(withOverrides(summaries(), registry, overrides), registry, bans),
    stats: () => ({ ...runtime.stats, held: runtime.holds.size, waiting: runtime.waiters.size }),
    async peek (target, identity, cost) {
      const policy = registry.find(target, 'peek')
      return await peek(await apiInput(policy, identityInput(identity, 'peek'), apiCost(cost, 'peek'), overrides), runtime)
    },
    async reset (target, identity, change) {
      await resetCaller(registry.find(target, 'reset'), identity, change, { runtime, log, audit })
    },
    async adjust (target, identity, units) {
      const policy = registry.find(target, 'adjust')
      return await adjustUsage(policy, target, identityInput(identity, 'adjust'), apiUnits(units), { runtime, log, overrides })
    },
    async consume (target, identity, cost) {
      const policy = registry.find(target, 'consume')
      const input = await apiInput(policy, identityInput(identity, 'consume'), apiCost(cost, 'consume'), overrides)
      return (await evaluate(input, { log, route: `api ${policy.route}`, source: 'api' }, runtime)).decision
    },
    async schedule (target, identity, cost, options) {
      const policy = registry.find(target, 'schedule')
      const signal = scheduleSignal(options)
      return await scheduled(await apiInput(policy, identityInput(identity, 'schedule'), apiCost(cost, 'schedule'), overrides), { runtime, log, signal })
    },
    async acquire (target, identity) {
      return await acquireSlot(registry.find(target, 'acquire'), target, identity, { runtime, log, overrides })
    },
    async setOverride (input) {
      const record = await overrideRecord(registry, overrides, input)
      await overrides.set(record)
      return { ...record }
    },
    async listOverrides () {
      await overrides.refresh()
      return overrides.current()
    },
    async clearOverride (id, change) {
      if (typeof id !== 'string') {
        throw new FST_RRL_INVALID_API_CALL('clearOverride', `the id must be a string (got ${typeof id})`)
      }
      const input = (change ?? {}) as { actor?: unknown, reason?: unknown }
      return await overrides.clear(id, changeText(input.actor, 'actor', 'clearOverride'), changeText(input.reason, 'reason', 'clearOverride'))
    },
    ...banApi(registry, bans),
    ...fleetApi(records)
  }
}

/** The startup table for `printPolicies: true`: its lines, the column names first, padded to align. */
export function policyTable (summaries: PolicySummary[]): string[] {
  const rows: string[][] = [['route', 'policy', 'algorithm', 'limit', 'window', 'burst', 'by', 'mode', 'on error']]
  for (const summary of summaries) {
    const constraints = constraintText(summary.constraints)
    // Fastify's HEAD twin of a GET shares its limits and keys: one row is enough.
    if (summary.method === 'HEAD' && summaries.some((other) => other.method === 'GET' && other.url === summary.url && constraintText(other.constraints) === constraints)) {
      continue
    }
    const route = routeLabel(summary.method, summary.url, constraints)
    if (summary.limits.length === 0) {
      rows.push([route, '(none: rateLimit false)', '', '', '', '', '', '', ''])
      continue
    }
    for (const block of summary.limits) {
      const limit = block.tiers === undefined ? String(block.limit) : Object.entries(block.tiers).map(([tier, values]) => `${tier}=${values.limit}`).join(' ')
      const cells = tableCells(block)
      rows.push([route, block.name + (block.global ? ' (global)' : ''), block.algorithm, limit, cells.window, cells.burst, block.by.join(', '), block.mode, block.onRedisError])
    }
  }
  const widths = item(rows, 0).map((_, column) => Math.max(...rows.map((row) => item(row, column).length)))
  return rows.map((row) => row.map((cell, column) => cell.padEnd(item(widths, column))).join('  ').trimEnd())
}
