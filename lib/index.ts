import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify'
import fp from 'fastify-plugin'
import { FST_RRL_IDENTITY_FAILED, FST_RRL_INVALID_OPTION, FST_RRL_REPLY_BUILDER_FAILED, FST_RRL_MISSING_LIMIT, FST_RRL_NO_REDIS, FST_RRL_ROUTES_BEFORE_PLUGIN, FST_RRL_TRUST_PROXY_TRUE } from './errors.js'
import { createApi, policyTable, PolicyRegistry, summarize } from './api/api.js'
import { CircuitBreaker } from './decide/circuit-breaker.js'
import { DenyCache } from './decide/deny-cache.js'
import { loadMetrics } from './diagnostics.js'
import { headerWriter } from './reply/headers.js'
import type { IdentityKind } from './keys/identity.js'
import { fastifyTrustProxy } from './keys/ip.js'
import { BurstLogger, OncePerWindow } from './util/log-throttle.js'
import { MemoryStore } from './store/memory/store.js'
import { isPreflightCatchAll, partitionUnseen } from './policy/preflight.js'
import { resolveOptions, type ResolvedOptions } from './options.js'
import { Overrides } from './api/overrides.js'
import { overridesKey } from './keys/layout.js'
import { compileGlobals, compilePolicy, globalPolicy, type CompileContext, type CompiledPolicy } from './policy/policy.js'
import { RedisStore } from './store/redis/store.js'
import { createRefuse } from './reply/problem.js'
import { createRefundHook, createRouteHook, type RouteRuntime } from './request/route-hook.js'
import { markContexts, scopeMarker, unseenRoutes, type RouteEntry } from './policy/routes.js'
import type { Store } from './store/port.js'
import type { PolicySummary, RateLimitBlock, RateLimitPluginOptions } from './types.js'

export * from './types.js'
export { ALGORITHMS } from './store/algorithms.js'
export { canonicalClientIp as canonicalIp } from './keys/ip.js'
export * as errors from './errors.js'
export { CHANNELS, METRICS, type DecisionMessage, type StoreErrorMessage } from './diagnostics.js'

function createStore (fastify: FastifyInstance, options: ResolvedOptions, onStoreCall: (size: number, latencyMs: number) => void): Store {
  if (options.store === 'memory') return new MemoryStore(options.clock, options.maxKeys)
  const client = options.redis ?? (fastify.hasDecorator('redis') ? (fastify as unknown as { redis: ResolvedOptions['redis'] }).redis : undefined)
  if (client === undefined || client === null || typeof client.evalsha !== 'function') throw new FST_RRL_NO_REDIS()
  return new RedisStore(client, {
    timeout: options.timeout,
    maxBatch: options.maxBatch,
    maxPending: options.maxPending,
    coalesce: options.batchWrites,
    onBatch: onStoreCall
  }, options.clock)
}

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
    throw new FST_RRL_INVALID_OPTION('configKey', `is 'rateLimit', which ${PEER} (registered in this app) also reads from route config: give this plugin another key, e.g. configKey: 'redisRateLimit' (see README, Migrating from ${PEER})`)
  }
}

async function rateLimitPlugin (fastify: FastifyInstance, input: RateLimitPluginOptions): Promise<void> {
  const options = resolveOptions(input)
  checkConfigKey(fastify, options.configKey)
  // Metrics load at ready(); until then a store call records nothing.
  const store = createStore(fastify, options, (size, latencyMs) => { runtime.metrics?.storeCall(size, latencyMs) })
  // Every peer trusted: X-Forwarded-For is forgeable by anyone who reaches the server (warned once per process).
  if (fastifyTrustProxy(fastify) === true) FST_RRL_TRUST_PROXY_TRUE()
  const clock = options.clock ?? Date.now
  const identityErrors = new BurstLogger(clock)
  const context: CompileContext = {
    prefix: options.prefix,
    onRedisError: options.onRedisError,
    user: options.user,
    apiKey: options.apiKey,
    ipv6Subnet: options.ipv6Subnet,
    hashSecret: options.hashSecret,
    mode: options.mode,
    cluster: store instanceof RedisStore && store.cluster,
    fleetSize: options.fleetSize,
    hook: options.hook,
    identityTimeout: options.identityTimeout,
    onPartError: (kind: IdentityKind, error: unknown, route: string) => {
      identityErrors.report(fastify.log, { err: new FST_RRL_IDENTITY_FAILED(kind, route), cause: error instanceof Error ? error.message : String(error) }, 'rate limit identity part threw or returned an unusable value; falling back to the client IP')
    }
  }
  // Fails at register: a bad defaultLimit or global block must not wait for the first route to surface.
  const globals = compileGlobals(options.globalLimits, context)
  if (options.defaultLimit !== undefined) compilePolicy(options.defaultLimit, 'GET', '/', context, true, globals)
  const registry = new PolicyRegistry()
  for (const block of globals) registry.add(block.name, globalPolicy(block, context))
  // Named limits outside HTTP routes (fastify.rateLimit.consume): no global blocks.
  const named: Array<[string, CompiledPolicy]> = Object.entries(options.policies).map(([name, declared]) => {
    const blocks = Array.isArray(declared) ? declared.map((block, index) => ({ name: index === 0 ? name : `${name}-${index}`, ...block })) : { name, ...declared }
    return [name, compilePolicy(blocks, 'API', name, context, false)]
  })
  for (const [name, policy] of named) registry.add(name, policy)

  let local: MemoryStore | undefined
  const runtime: RouteRuntime = {
    store,
    writeHeaders: headerWriter(options.headers),
    allowList: options.allowList,
    refuse: createRefuse(options.replyBuilder, options.useErrorHandler, (request, error) => {
      runtime.badInput.report(request.log, { err: new FST_RRL_REPLY_BUILDER_FAILED(request.routeOptions.method + ' ' + (request.routeOptions.url ?? '')), cause: error instanceof Error ? error.message : String(error) }, 'rate limit replyBuilder failed; sent the default reply')
    }),
    stats: { allowed: 0, limited: 0, degraded: 0, shadowLimited: 0, refunded: 0, penalized: 0, skipped: 0 },
    failures: new BurstLogger(clock),
    badInput: new BurstLogger(clock),
    // The memory store answers locally anyway: the deny cache would only duplicate its state.
    denyCache: options.denyCacheMax > 0 && options.store === 'redis' ? new DenyCache(options.denyCacheMax) : undefined,
    rejections: new OncePerWindow(),
    clock,
    tier: options.tier,
    metrics: undefined,
    // The memory store has no Redis to fail; a breaker would only ever stay closed.
    breaker: options.circuitBreaker === undefined || options.store === 'memory' ? undefined : new CircuitBreaker(options.circuitBreaker, clock),
    localStore: () => (local ??= new MemoryStore(clock, options.maxKeys)),
    overrides: new Overrides(store instanceof RedisStore ? store.client : undefined, overridesKey(options.prefix), clock, fastify.log),
    identityTimeout: options.identityTimeout
  }
  const summaries: PolicySummary[] = []
  const seen: RouteEntry[] = []
  const undeclared: string[] = []

  if (fastify.hasDecorator(options.configKey)) {
    throw new FST_RRL_INVALID_OPTION('configKey', `names the decorator fastify.${options.configKey}, which is already taken: choose a free name`)
  }
  // A registration in a context below another one's finds the request decorator there already.
  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null)
  // Marks this context (and those below it) for the routes-before-plugin check at ready (routes.ts).
  const scope = scopeMarker()
  fastify.addHook('onTimeout', scope)
  markContexts(fastify, scope)

  fastify.addHook('onRoute', (route) => {
    for (const method of methodsOf(route.method)) seen.push({ method, url: route.url })
    const methodLabel = methodsOf(route.method).join(',')
    const declared = (route.config as Record<string, RateLimitPluginOptions['defaultLimit'] | false> | undefined)?.[options.configKey]
    if (declared === false || (declared === undefined && isPreflightCatchAll(route.method, route.url))) {
      summaries.push({ method: methodLabel, url: route.url, limit: false, limits: [] })
      return
    }
    const block = declared ?? options.defaultLimit
    if (block === undefined && globals.length === 0) {
      // HEAD routes Fastify adds for a GET inherit its config: report the GET once.
      if (route.method !== 'HEAD' || !undeclared.includes(`GET ${route.url}`)) undeclared.push(`${methodLabel} ${route.url}`)
      return
    }
    const policy = compilePolicy(block, route.method, route.url, context, declared === undefined, globals)
    const limits = policy.blocks.map((compiled) => summarize(compiled, policy.fromDefault))
    summaries.push({ method: methodLabel, url: route.url, limit: limits[0] ?? false, limits })
    for (const method of methodsOf(route.method)) registry.add(`${method} ${route.url}`, policy)
    // Fastify's automatic HEAD twin shares the GET's keys: only the GET answers to the block names.
    if (route.method !== 'HEAD') for (const compiled of policy.blocks) if (!compiled.global) registry.add(compiled.name, policy)
    const decide = createRouteHook(policy, runtime)
    const stage = policy.stage
    // A preParsing hook's resolved value would become the request payload: this one resolves to nothing.
    const hook = stage === 'preParsing' ? async (request: FastifyRequest, reply: FastifyReply): Promise<void> => { await decide(request, reply) } : decide
    const existing = route[stage]
    // After the route's own hooks of that stage, so an auth hook can set the user first.
    route[stage] = (existing === undefined ? [hook] : Array.isArray(existing) ? [...existing, hook] : [existing, hook]) as never
    if (policy.refunds) {
      const refund = createRefundHook(policy, runtime)
      const onResponse = route.onResponse
      route.onResponse = (onResponse === undefined ? [refund] : Array.isArray(onResponse) ? [...onResponse, refund] : [onResponse, refund]) as never
    }
  })

  if (options.notFound !== undefined) limitNotFound(fastify, options.notFound, context, globals, registry, summaries, runtime)

  fastify.addHook('onReady', async function checkEveryRouteIsLimited () {
    checkConfigKey(this, options.configKey)
    if (undeclared.length > 0) throw new FST_RRL_MISSING_LIMIT(options.configKey, options.configKey, undeclared.join(', '))
    const { preflight, others } = partitionUnseen(unseenRoutes(fastify.printRoutes({ commonPrefix: false, includeMeta: ['onTimeout'] }), seen, scope.name))
    if (others.length > 0) throw new FST_RRL_ROUTES_BEFORE_PLUGIN(others.join(', '))
    if (preflight.length > 0) summaries.push({ method: 'OPTIONS', url: '*', limit: false, limits: [] })
    if (options.metrics) runtime.metrics = await loadMetrics()
    if (options.printPolicies) fastify.log.info({ routes: summaries.length }, `rate limits:\n${policyTable(copySummaries())}`)
    await store.warmUp(fastify.log)
    runtime.overrides.start()
  })

  fastify.addHook('onClose', async () => {
    store.close()
    runtime.overrides.close()
    local?.close()
    runtime.metrics?.close()
  })

  const copySummaries = (): PolicySummary[] => summaries.map((summary) => {
    const limits = summary.limits.map((block) => ({ ...block, by: [...block.by], tiers: block.tiers === undefined ? undefined : structuredClone(block.tiers) }))
    return { ...summary, limit: limits[0] ?? false, limits }
  })
  fastify.decorate(options.configKey, createApi(registry, runtime, fastify.log, copySummaries, runtime.overrides))
}

/** The key's route segment of every not-found request: no real route has this URL. */
const NOT_FOUND_ROUTE = { method: 'ANY', url: '(not-found)' } as const

/**
 * `notFound`: the not-found handler of this context (Fastify runs a context's
 * hooks for its 404s) is limited by these blocks, every 404 sharing one bucket
 * per caller whatever its method and URL. The hook returns at once for
 * requests that matched a route (callback style: no promise for them).
 */
function limitNotFound (fastify: FastifyInstance, declared: RateLimitBlock | RateLimitBlock[], context: CompileContext, globals: CompiledPolicy['blocks'], registry: PolicyRegistry, summaries: PolicySummary[], runtime: RouteRuntime): void {
  const named = Array.isArray(declared)
    ? declared.map((block, index) => ({ name: index === 0 ? 'not-found' : `not-found-${index}`, ...block }))
    : { name: 'not-found', ...declared }
  const policy = compilePolicy(named, NOT_FOUND_ROUTE.method, NOT_FOUND_ROUTE.url, context, false, globals)
  const limits = policy.blocks.map((compiled) => summarize(compiled, false))
  summaries.push({ method: NOT_FOUND_ROUTE.method, url: NOT_FOUND_ROUTE.url, limit: limits[0] ?? false, limits })
  registry.add(`${NOT_FOUND_ROUTE.method} ${NOT_FOUND_ROUTE.url}`, policy)
  for (const compiled of policy.blocks) if (!compiled.global) registry.add(compiled.name, policy)
  const hook = createRouteHook(policy, runtime)
  fastify.addHook(policy.needsBody ? 'preValidation' : 'onRequest', function rateLimitNotFound (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    if (!request.is404) {
      done()
      return
    }
    // A refusal was sent (or thrown to the error handler): the chain stops there.
    hook(request, reply).then((sent) => { if (sent === undefined) done() }, done)
  })
}

export const fastifyRedisRateLimit = fp(rateLimitPlugin, {
  fastify: '5.x',
  name: 'fastify-redis-rate-limit'
})

export default fastifyRedisRateLimit
