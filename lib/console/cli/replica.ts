import Fastify, { type FastifyInstance } from 'fastify'
import { rateLimitPlugin } from '../../fastify/register.js'
import { constraintText, routeLabel } from '../../keys/constraints.js'
import { declaredBlock, declaredLease } from '../../kinds/index.js'
import type { IdentityPartSpec, PolicyBlockSummary, PolicySummary, RateLimitApi, RateLimitPluginOptions } from '../../types/index.js'
import { CliError, EXIT } from './exit.js'

/*
 * One implementation, not a second reader of the layouts: the CLI reaches
 * Redis through the plugin itself, registered on an in-process Fastify app
 * that never listens, with the user's client and prefix, `picture: false`,
 * and, for the commands that name a route or a caller, the routes and global
 * blocks rebuilt from the newest instance's published `policies` (a replica).
 * Its keys and records are then the ones the live instances use:
 * `app.rateLimit.*` computes them with the same code.
 */

/** What every app the CLI starts shares. */
export interface ReplicaSettings {
  client: object
  prefix: string
  timeoutMs: number
  hashSecret?: string
  ipv6Subnet?: number
}

/** A route as the replica declares it, or why it cannot. */
export interface RebuiltRoute {
  /** `GET /orders/:id`, `GET /api {"host":"a.example.com"}`. */
  label: string
  row: PolicySummary
  /** Why its keys may differ from the instance's (a function `by` part, a week period); undefined: exact. */
  custom?: string
  /** Whether the replica declares it (constraints that survive JSON); a route it does not declare is unknown to the API. */
  declared: boolean
  /** The names the API finds it by: each method's label, and its own blocks' names. */
  names: string[]
}

export interface Replica {
  api: RateLimitApi
  routes: RebuiltRoute[]
  close: () => Promise<void>
}

/** What a placeholder identity function returns: the caller's values come from the command line instead (the API takes them as given). */
const noValue = (): undefined => undefined

/** Fastify's own constraint strategies; any other name is a custom strategy, declared on the replica as one that never matches a request. */
const BUILT_IN_CONSTRAINTS = new Set(['host', 'version'])

function customStrategy (name: string): unknown {
  return {
    name,
    storage () {
      const map = new Map<string, unknown>()
      return { get: (value: string) => map.get(value) ?? null, set: (value: string, store: unknown) => { map.set(value, store) } }
    },
    deriveConstraint: noValue,
    mustMatchWhenDerived: false
  }
}

/** Constraints are rebuilt when every value is a string (a RegExp host, for one, is `{}` once in JSON). */
function constraintsSurvive (constraints: Record<string, unknown> | undefined): boolean {
  return constraints === undefined || Object.values(constraints).every((value) => typeof value === 'string')
}

/** A row's `by` as a block declares it: the default identity back to undefined, function parts as named placeholders. */
function declaredBy (by: readonly string[], placeholders: Map<string, IdentityPartSpec>): { by: IdentityPartSpec[] | undefined, custom?: string } {
  if (by.length === 2 && by[0] === 'user' && by[1] === 'ip (when no user)') return { by: undefined }
  let custom: string | undefined
  const parts = by.map((part): IdentityPartSpec => {
    if (!part.startsWith('function ')) return part as IdentityPartSpec
    custom = `its \`by\` has a function part (${part}), which only the app can call`
    let placeholder = placeholders.get(part)
    if (placeholder === undefined) {
      // One placeholder per name: two blocks naming one function share an identity, as in the app.
      placeholder = () => undefined
      placeholders.set(part, placeholder)
    }
    return placeholder
  })
  return custom === undefined ? { by: parts } : { by: parts, custom }
}

interface Declared { fields: Record<string, unknown>, custom?: string }

function declare (row: PolicyBlockSummary, placeholders: Map<string, IdentityPartSpec>): Declared {
  const block = declaredBlock(row)
  const by = declaredBy(row.by, placeholders)
  const fields = by.by === undefined ? block.fields : { ...block.fields, by: by.by }
  const custom = by.custom ?? block.inexact
  return custom === undefined ? { fields } : { fields, custom }
}

interface Plan {
  routes: RebuiltRoute[]
  declare: Array<{ route: RebuiltRoute, method: string[], url: string, constraints?: Record<string, unknown>, blocks: Array<Record<string, unknown>> }>
  globalLimits: Array<Record<string, unknown>>
  notFound?: Array<Record<string, unknown>>
  strategies: Record<string, unknown>
  lease?: number
}

/** The replica's routes, global blocks and options from one instance's published rows. */
export function planReplica (policies: readonly PolicySummary[]): Plan {
  const placeholders = new Map<string, IdentityPartSpec>()
  const plan: Plan = { routes: [], declare: [], globalLimits: [], strategies: {} }
  const globals = new Map<string, Declared>()
  const labels = new Set(policies.map((row) => routeLabel(row.method, row.url, constraintText(row.constraints))))
  for (const row of policies) {
    if (row.limits.length === 0) continue
    const constraints = constraintText(row.constraints)
    const methods = row.method.split(',')
    // Fastify adds the HEAD twin of a GET itself.
    if (row.method === 'HEAD' && labels.has(routeLabel('GET', row.url, constraints))) continue
    const own: Declared[] = []
    let custom: string | undefined
    for (const block of row.limits) {
      const declared = declare(block, placeholders)
      custom ??= declared.custom
      if (block.global) {
        if (!globals.has(block.name)) globals.set(block.name, declared)
      } else own.push(declared)
      plan.lease ??= declaredLease(block)
    }
    const survives = constraintsSurvive(row.constraints)
    if (!survives) custom ??= 'its constraints do not survive JSON (a RegExp or a function)'
    const names = [...methods.map((method) => routeLabel(method, row.url, '')), ...methods.map((method) => routeLabel(method, row.url, constraints)), ...row.limits.filter((block) => !block.global).map((block) => block.name)]
    const route: RebuiltRoute = { label: routeLabel(row.method, row.url, constraints), row, declared: survives, names: [...new Set(names)] }
    if (custom !== undefined) route.custom = custom
    plan.routes.push(route)
    if (!survives) continue
    if (row.method === 'ANY' && row.url === '(not-found)') {
      plan.notFound = own.map((block) => block.fields)
      continue
    }
    for (const name of Object.keys(row.constraints ?? {})) {
      if (!BUILT_IN_CONSTRAINTS.has(name)) plan.strategies[name] = customStrategy(name)
    }
    plan.declare.push({ route, method: methods, url: row.url, ...(row.constraints === undefined ? {} : { constraints: row.constraints }), blocks: own.map((block) => block.fields) })
  }
  plan.globalLimits = [...globals.values()].map((block) => block.fields)
  return plan
}

/** The plugin's options for an app of the CLI. */
function pluginOptions (settings: ReplicaSettings, plan: Plan | undefined): RateLimitPluginOptions {
  const options: Record<string, unknown> = {
    redis: settings.client,
    prefix: settings.prefix,
    timeout: settings.timeoutMs,
    picture: false,
    // The caller's values come from the command line: the API takes user, apiKey and tier as given.
    user: noValue,
    apiKey: noValue,
    tier: noValue,
    // A peek asks Redis, never this process's memory of a refusal.
    denyCache: false,
    circuitBreaker: false,
    metrics: false
  }
  if (settings.hashSecret !== undefined) options.hashSecret = settings.hashSecret
  if (settings.ipv6Subnet !== undefined) options.ipv6Subnet = settings.ipv6Subnet
  if (plan !== undefined) {
    if (plan.globalLimits.length > 0) options.globalLimits = plan.globalLimits
    if (plan.notFound !== undefined) options.notFound = plan.notFound
    if (plan.lease !== undefined) options.lease = plan.lease
  }
  return options as RateLimitPluginOptions
}

/** What a plugin error at startup means to the CLI: a bad option it was given (exit 2), else Redis (exit 1). */
function startupError (error: unknown): CliError {
  const { code, message } = error as { code?: string, message?: string }
  const line = (message ?? String(error)).split('\n')[0] as string
  if (code === 'FST_RRL_INVALID_OPTION') return new CliError(line, EXIT.usage)
  if (code === 'FST_RRL_INVALID_BLOCK') return new CliError(`the published limits cannot be rebuilt: ${line}`, EXIT.failure)
  return new CliError(`Redis: ${line}`, EXIT.failure)
}

/**
 * An app of the plugin on the user's client: without routes (reading the
 * picture, listing and lifting records), or with the routes and global
 * blocks `policies` declare (peek, reset, a ban or override naming a route).
 */
export async function startReplica (settings: ReplicaSettings, policies?: readonly PolicySummary[]): Promise<Replica> {
  const plan = policies === undefined ? undefined : planReplica(policies)
  const app: FastifyInstance = Fastify(Object.keys(plan?.strategies ?? {}).length === 0 ? {} : { routerOptions: { constraints: plan?.strategies } } as never) as unknown as FastifyInstance
  try {
    // The plugin function itself, on the root: its decorator is this app's (no fastify-plugin wrapper needed).
    await rateLimitPlugin(app, pluginOptions(settings, plan))
    for (const { method, url, constraints, blocks } of plan?.declare ?? []) {
      app.route({ method, url, ...(constraints === undefined ? {} : { constraints }), config: (blocks.length === 0 ? {} : { rateLimit: blocks }) as never, handler: async () => '' })
    }
    await app.ready()
  } catch (error) {
    await app.close().catch(() => {})
    throw startupError(error)
  }
  return {
    api: (app as unknown as { rateLimit: RateLimitApi }).rateLimit,
    routes: plan?.routes ?? [],
    close: async () => { await app.close() }
  }
}
