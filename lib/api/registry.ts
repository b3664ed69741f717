import { FST_RRL_AMBIGUOUS_TARGET, FST_RRL_INVALID_API_CALL, FST_RRL_UNKNOWN_POLICY } from '../errors.js'
import { constraintText, routeLabel } from '../keys/constraints.js'
import type { CompiledPolicy } from '../policy/policy.js'
import type { TargetRegistry } from '../policy/summary.js'
import type { PolicySummary } from '../types/index.js'
import { item } from '../util/item.js'

/*
 * Where the programmatic API finds a target's policy: by route label (one
 * per method and constraints), by `{ method, url, constraints }`, or by a
 * name (a route, a block, a `policies` entry). A name several policies claim
 * reaches none of them: the error lists a target that reaches each alone.
 */

/** A route given as `{ method, url, constraints? }`: its exact label (keys/constraints.ts), or undefined when `target` is not one. */
function routeTarget (target: unknown, method: string): string | undefined {
  if (target === null || typeof target !== 'object') return undefined
  const { method: verb, url, constraints } = target as Record<string, unknown>
  if (typeof verb !== 'string' || typeof url !== 'string' || (constraints !== undefined && (constraints === null || typeof constraints !== 'object'))) {
    throw new FST_RRL_INVALID_API_CALL(method, 'a route target is { method, url, constraints? } with strings for method and url and the route\'s constraints object')
  }
  return routeLabel(verb.toUpperCase(), url, constraintText(constraints))
}

export class PolicyRegistry implements TargetRegistry {
  readonly #targets = new Map<string, CompiledPolicy[]>()
  /** Exact route labels (one per method) → the route: `{ method, url, constraints }` targets and policies() rows. */
  readonly #routes = new Map<string, CompiledPolicy>()
  /** Each route's way of being named alone, for the ambiguity error. */
  readonly #hints = new Map<CompiledPolicy, { label: string, object: string }>()

  /** Registers a target name; a name several policies claim reaches none of them (find says how to reach each). */
  add (name: string, policy: CompiledPolicy): void {
    const known = this.#targets.get(name)
    if (known === undefined) this.#targets.set(name, [policy])
    else if (!known.includes(policy)) known.push(policy)
  }

  route ({ method, url, constraints }: { method: string, url: string, constraints: string }, policy: CompiledPolicy): void {
    const label = routeLabel(method, url, constraints)
    this.#routes.set(label, policy)
    if (this.#hints.has(policy)) return
    const object = `{ method: '${method}', url: '${url}'${constraints === '' ? '' : `, constraints: ${constraints}`} }`
    this.#hints.set(policy, { label, object })
  }

  find (target: unknown, method: string): CompiledPolicy {
    const label = routeTarget(target, method)
    if (label !== undefined) {
      const policy = this.#routes.get(label)
      if (policy === undefined) throw new FST_RRL_UNKNOWN_POLICY(JSON.stringify(label))
      return policy
    }
    if (typeof target !== 'string') {
      throw new FST_RRL_INVALID_API_CALL(method, `the target must be a string or { method, url, constraints } (got ${typeof target})`)
    }
    const policies = this.#targets.get(target)
    if (policies === undefined) throw new FST_RRL_UNKNOWN_POLICY(JSON.stringify(target))
    if (policies.length > 1) {
      throw new FST_RRL_AMBIGUOUS_TARGET(method, JSON.stringify(target), `${policies.length} routes: ${policies.map((policy) => this.#hint(policy)).join(', ')}`)
    }
    return item(policies, 0)
  }

  /** The route of a policies() row (its first method). */
  findRow (row: PolicySummary): CompiledPolicy | undefined {
    return this.#routes.get(routeLabel(item(row.method.split(','), 0), row.url, constraintText(row.constraints)))
  }

  /** A target that reaches `policy` alone: its label when no other policy shares it, else its object form; plus its own unshared names. */
  #hint (policy: CompiledPolicy): string {
    const hint = this.#hints.get(policy)
    const alone = (name: string): boolean => {
      const claims = this.#targets.get(name)
      return claims?.length === 1 && claims[0] === policy
    }
    const names = policy.blocks.flatMap((block) => !block.global && alone(block.name) ? [JSON.stringify(block.name)] : [])
    const route = hint === undefined ? `'${policy.route}'` : alone(hint.label) ? `'${hint.label}'` : hint.object
    return names.length === 0 ? route : `${route} (or ${names.join(', ')})`
  }
}
