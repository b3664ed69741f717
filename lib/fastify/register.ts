import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import { FST_RRL_INVALID_OPTION, FST_RRL_MISSING_LIMIT } from '../errors.js'
import { createApi, policyTable } from '../api/api.js'
import { PolicyRegistry } from '../api/registry.js'
import { loadMetrics, loadTracing, TELEMETRY_THREW } from '../diagnostics.js'
import { constraintText, routeLabel } from '../keys/constraints.js'
import { identityHasher } from '../keys/layout.js'
import { PicturePublisher, pictureId } from '../picture/publisher.js'
import { awaitWithin } from '../util/await-within.js'
import { isPreflightCatchAll, preflightDeclaredBefore } from './preflight.js'
import { resolveOptions, type ResolvedOptions } from '../options/index.js'
import {
  compileGlobals,
  compilePolicy,
  globalPolicy,
  type CompileContext,
  type CompiledBlock,
  type CompiledPolicy
} from '../policy/policy.js'
import { copySummaries, listPolicy, listUnlimited, ownBlockNames, type Listing } from '../policy/summary.js'
import { limitNotFound } from './not-found.js'
import { createRouteHook, type HookNext } from '../request/route-hook.js'
import { guardUnseenRoutes, markRoute, routeMark, type RouteMark } from './route-guard.js'
import { closeRuntime, compileContext, createRuntime, settleAtClose, type PluginRuntime } from '../runtime.js'
import type { PolicySummary, RateLimitPluginOptions } from '../types/index.js'

/*
 * The Fastify wiring of one registration: options resolved and startup
 * compiled at register, a decision hook and this registration's mark attached
 * to each route by onRoute, the guard against routes declared before the
 * plugin (route-guard.ts), and the ready-time checks (strict mode).
 */

function methodsOf (method: RouteOptions['method']): string[] {
  return Array.isArray(method) ? method : [method]
}

const PEER = '@fastify/rate-limit'

/**
 * `@fastify/rate-limit` reads `config.rateLimit` too and decorates
 * `fastify.rateLimit` when the name is free: beside it, this plugin needs
 * another configKey (checked at register, and at ready for a peer registered after).
 */
function checkConfigKey (fastify: FastifyInstance, configKey: string): void {
  if (configKey === 'rateLimit' && fastify.hasPlugin(PEER)) {
    const fix = 'give this plugin another key, e.g. configKey: \'redisRateLimit\' (see docs/migration.md)'
    throw new FST_RRL_INVALID_OPTION('configKey', `is 'rateLimit', which ${PEER} (registered in this app) also reads from route config: ${fix}`)
  }
}

/** One plugin instance's state, shared by its hooks (passed, never captured from the plugin function). */
interface PluginState {
  fastify: FastifyInstance
  options: ResolvedOptions
  runtime: PluginRuntime
  context: CompileContext
  globals: readonly CompiledBlock[]
  listing: Listing & { registry: PolicyRegistry }
  /** Routes without any limit (strict mode fails ready() on them). */
  undeclared: string[]
  /** This registration's mark on every route its onRoute saw. */
  mark: RouteMark
  /** Whether onRoute saw the CORS catch-all (else ready() asks the router). */
  preflightSeen: boolean
  /** `HEAD <url>/` label to `<url>` for each prefixed index route announced once for two router entries (keyUrl). */
  indexPairs: Map<string, string>
  /** Publishes this instance's picture (lib/picture/); undefined with `picture: false`. */
  publisher?: PicturePublisher
}

/**
 * Compiles what fails at register: the global blocks, defaultLimit (checked
 * once, so a bad one does not wait for the first route) and the named policies.
 */
function compileStartup (
  options: ResolvedOptions,
  context: CompileContext
): { globals: CompiledBlock[], registry: PolicyRegistry } {
  const globals = compileGlobals(options.globalLimits, context)
  if (options.defaultLimit !== undefined) {
    compilePolicy(options.defaultLimit, { method: 'GET', url: '/', source: 'defaultLimit' }, context, globals)
  }
  const registry = new PolicyRegistry()
  for (const block of globals) registry.add(block.name, globalPolicy(block, context))
  // Named limits outside HTTP routes (fastify.rateLimit.consume): no global blocks.
  const named: Array<[string, CompiledPolicy]> = Object.entries(options.policies).map(([name, declared]) => {
    const blocks = Array.isArray(declared)
      ? declared.map((block, index) => ({ name: index === 0 ? name : `${name}-${index}`, ...block }))
      : { name, ...declared }
    return [name, compilePolicy(blocks, { method: 'API', url: name, source: 'declared' }, context)]
  })
  for (const [name, policy] of named) registry.add(name, policy)
  return { globals, registry }
}

function appended<T> (existing: T | T[] | undefined, hook: T): T[] {
  return existing === undefined ? [hook] : Array.isArray(existing) ? [...existing, hook] : [existing, hook]
}

/** Adds the decision hook at the policy's stage (after the route's own); it tracks the end of requests itself. */
function attachHooks (route: RouteOptions, policy: CompiledPolicy, runtime: PluginRuntime): void {
  const decide = createRouteHook(policy, runtime)
  const stage = policy.stage
  // A preParsing hook takes the payload before `done`, and passes it on unchanged.
  const hook = stage === 'preParsing'
    ? function rateLimitPreParsing (request: FastifyRequest, reply: FastifyReply, _payload: unknown, done: HookNext): void { decide(request, reply, done) }
    : decide
  // After the route's own hooks of that stage, so an auth hook can set the user first.
  route[stage] = appended<unknown>(route[stage], hook) as never
  if (runtime.redirectGuard !== undefined && !policy.allShadow) route.onSend = appended<unknown>(route.onSend, runtime.redirectGuard) as never
}

type AnnouncedRoute = RouteOptions & { prefix?: string, routePath?: string }

/**
 * The URL a route's keys carry. Keys name HEAD as GET on the same URL
 * (routes.md: a HEAD shares its GET's bucket), but a prefixed index route's
 * HEAD twin can be announced with another URL than its GET (route.js):
 * - prefixTrailingSlash 'both' under `/api`: the GET is announced once, as
 *   `/api`, and `/api/` added with the same options; the HEAD twin of that
 *   second entry is announced on its own, as `/api/`;
 * - 'slash' under a prefix ending in '/' (`/api/`): the GET is `/api//`, its
 *   HEAD twin, a HEAD route of path '/', lands on `/api/`.
 * Such a twin is keyed with its GET's URL.
 */
function keyUrl (pairs: Map<string, string>, route: AnnouncedRoute, constraints: string): string {
  if (route.method === 'HEAD') return pairs.get(routeLabel('HEAD', route.url, constraints)) ?? route.url
  if (!methodsOf(route.method).includes('GET') || (route.prefix ?? '') === '') return route.url
  const trailing = route.prefixTrailingSlash ?? 'both'
  if (route.routePath === '' && trailing === 'both' && !route.url.endsWith('/')) pairs.set(routeLabel('HEAD', route.url + '/', constraints), route.url)
  if (route.routePath === '/' && trailing === 'slash' && route.url.endsWith('//')) pairs.set(routeLabel('HEAD', route.url.slice(0, -1), constraints), route.url)
  return route.url
}

/** onRoute: compiles the route's block (or the defaultLimit) and attaches its hooks. */
function limitRoute (state: PluginState, route: AnnouncedRoute): void {
  const { options, listing } = state
  // Method, URL and constraints name a route: two hosts' routes on one URL are two routes (keys/constraints.ts).
  const constraints = constraintText(route.constraints)
  // Every route seen, limited or not: the guard refuses only the unmarked.
  markRoute(route, state.mark)
  const url = keyUrl(state.indexPairs, route, constraints)
  const methodLabel = methodsOf(route.method).join(',')
  const row = { method: methodLabel, url: route.url, constraints: route.constraints }
  const config = route.config as Record<string, RateLimitPluginOptions['defaultLimit'] | false> | undefined
  const declared = config?.[options.configKey]
  const preflight = isPreflightCatchAll(route.method, route.url)
  if (preflight) state.preflightSeen = true
  if (declared === false || (declared === undefined && preflight)) {
    listUnlimited(listing, row)
    return
  }
  const block = declared ?? options.defaultLimit
  if (block === undefined && state.globals.length === 0) {
    // HEAD routes Fastify adds for a GET inherit its config: report the GET once.
    if (route.method !== 'HEAD' || !state.undeclared.includes(routeLabel('GET', url, constraints))) {
      state.undeclared.push(routeLabel(methodLabel, route.url, constraints))
    }
    return
  }
  const source = declared === undefined ? 'defaultLimit' : 'declared'
  const policy = compilePolicy(block, { method: route.method, url, source, constraints }, state.context, state.globals)
  // Fastify's automatic HEAD twin shares the GET's keys: only the GET answers to the block names.
  listPolicy(listing, row, policy, route.method === 'HEAD' ? [] : ownBlockNames(policy))
  attachHooks(route, policy, state.runtime)
}

/** printPolicies: one log line per table line (a JSON logger would make one multi-line message a string of \n). */
function logPolicyTable (log: FastifyBaseLogger, summaries: PolicySummary[]): void {
  const [columns, ...rows] = policyTable(copySummaries(summaries))
  log.info({ routes: summaries.length }, `rate limits: ${columns ?? ''}`)
  for (const row of rows) log.info(`rate limits: ${row}`)
}

/** onReady: strict mode, then metrics, the policy table, warm-up, overrides and bans. */
async function checkAtReady (state: PluginState, instance: FastifyInstance): Promise<void> {
  const { fastify, options, runtime, listing } = state
  checkConfigKey(instance, options.configKey)
  if (state.undeclared.length > 0) {
    throw new FST_RRL_MISSING_LIMIT(options.configKey, options.configKey, state.undeclared.join(', '))
  }
  // Routes declared before the plugin cannot be listed here (route-guard.ts refuses them at request time).
  if (preflightDeclaredBefore(fastify, state.preflightSeen)) listUnlimited(listing, { method: 'OPTIONS', url: '*' })
  if (options.metrics) runtime.metrics = await loadMetrics((error) => { runtime.telemetry.report(fastify.log, { err: error }, TELEMETRY_THREW) })
  if (options.metrics) runtime.tracing = await loadTracing((error) => { runtime.telemetry.report(fastify.log, { err: error }, TELEMETRY_THREW) })
  if (options.printPolicies) logPolicyTable(fastify.log, listing.summaries)
  await runtime.store.warmUp(fastify.log)
  runtime.overrides.start()
  runtime.bans.start()
  state.publisher?.start()
}

/** The decorators and the hooks of one plugin instance. */
function install (state: PluginState): void {
  const { fastify, options, runtime, listing } = state
  if (fastify.hasDecorator(options.configKey)) {
    throw new FST_RRL_INVALID_OPTION('configKey', `names the decorator fastify.${options.configKey}, which is already taken: choose a free name`)
  }
  // A registration in a context below another one's finds the request decorator there already.
  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null)
  fastify.addHook('onRoute', (route) => { limitRoute(state, route) })
  // Also reaches the routes this context declared before the plugin (route-guard.ts).
  guardUnseenRoutes(fastify, state.mark)
  if (options.notFound !== undefined) {
    limitNotFound({ fastify, declared: options.notFound, context: state.context, globals: state.globals, listing, runtime })
  }
  fastify.addHook('onReady', async function checkEveryRouteIsLimited () { await checkAtReady(state, this) })
  // Held and waiting requests are answered, and their give-backs and queue leaves
  // sent and awaited, before the server waits for in-flight ones (preClose runs first).
  fastify.addHook('preClose', async () => { await settleAtClose(runtime, fastify.log) })
  // What requests that ended during server.close() sent is awaited before the client may close
  // (an app's onClose registered before the plugin, and @fastify/redis's, run after this one).
  fastify.addHook('onClose', async () => {
    await settleAtClose(runtime, fastify.log, true)
    // The picture leaves the board now, so a deploy's old instances leave the console at once (bounded: a silent Redis lets it lapse).
    if (state.publisher !== undefined) await awaitWithin(state.publisher.close(), runtime.timeout, 'the picture\'s withdrawal')
    closeRuntime(runtime)
  })
  const api = createApi(listing.registry, runtime, fastify.log, () => copySummaries(listing.summaries), runtime)
  fastify.decorate(options.configKey, api)
  if (options.picture !== undefined && runtime.picture !== undefined) {
    state.publisher = new PicturePublisher({
      app: appId(fastify),
      board: runtime.board,
      counters: runtime.picture,
      store: { kind: options.store, cluster: runtime.store.cluster, health: () => runtime.store.health() },
      stats: api.stats,
      policies: api.policies,
      fleet: () => ({ bans: runtime.bans.current().length, overrides: runtime.overrides.current().length }),
      hash: identityHasher(options.hashSecret),
      hashSecret: options.hashSecret !== undefined,
      ipv6Subnet: options.ipv6Subnet,
      rawIdentities: options.picture.rawIdentities,
      intervalMs: options.picture.intervalMs,
      log: fastify.log
    })
    const publisher = state.publisher
    options.picture.onPublisher?.(async () => { await publisher.publish() }, publisher.id)
  }
}

/** One id per app: its registrations share its Fastify server (public API), and their pictures the id. */
const appIds = new WeakMap<object, string>()
function appId (fastify: FastifyInstance): string {
  let id = appIds.get(fastify.server)
  if (id === undefined) appIds.set(fastify.server, id = pictureId())
  return id
}

export async function rateLimitPlugin (fastify: FastifyInstance, input: RateLimitPluginOptions): Promise<void> {
  const options = resolveOptions(input)
  checkConfigKey(fastify, options.configKey)
  const runtime = createRuntime(fastify, options)
  const context = compileContext(fastify, options, runtime)
  const { globals, registry } = compileStartup(options, context)
  const listing: PluginState['listing'] = { registry, summaries: [] }
  install({ fastify, options, runtime, context, globals, listing, undeclared: [], mark: routeMark(), preflightSeen: false, indexPairs: new Map() })
}
