import type { FastifyInstance, RouteOptions } from 'fastify'
import fp from 'fastify-plugin'
import { FST_RRL_IDENTITY_FAILED, FST_RRL_MISSING_LIMIT, FST_RRL_NO_REDIS, FST_RRL_ROUTES_BEFORE_PLUGIN } from './errors.js'
import { headerWriter } from './headers.js'
import { BurstLogger, createRouteHook, type Runtime } from './hook.js'
import type { IdentityKind } from './identity.js'
import { MemoryStore } from './memory-store.js'
import { resolveOptions, type ResolvedOptions } from './options.js'
import { compilePolicy, type CompileContext } from './policy.js'
import { RedisStore } from './redis-store.js'
import { unseenRoutes, type RouteEntry } from './routes.js'
import type { Store } from './store.js'
import type { PolicySummary, RateLimitPluginOptions } from './types.js'

export * from './types.js'
export { ALGORITHMS } from './algorithm-types.js'
export * as errors from './errors.js'

function createStore (fastify: FastifyInstance, options: ResolvedOptions): Store {
  if (options.store === 'memory') return new MemoryStore(options.clock)
  const client = options.redis ?? (fastify.hasDecorator('redis') ? (fastify as unknown as { redis: ResolvedOptions['redis'] }).redis : undefined)
  if (client === undefined || client === null || typeof client.evalsha !== 'function') throw new FST_RRL_NO_REDIS()
  return new RedisStore(client, options.timeout, options.clock)
}

function methodsOf (method: RouteOptions['method']): string[] {
  return Array.isArray(method) ? method : [method]
}

async function rateLimitPlugin (fastify: FastifyInstance, input: RateLimitPluginOptions): Promise<void> {
  const options = resolveOptions(input)
  const store = createStore(fastify, options)
  const identityErrors = new BurstLogger()
  const context: CompileContext = {
    prefix: options.prefix,
    onRedisError: options.onRedisError,
    user: options.user,
    apiKey: options.apiKey,
    ipv6Subnet: options.ipv6Subnet,
    onPartError: (kind: IdentityKind, error: unknown, route: string) => {
      identityErrors.report(fastify.log, { err: new FST_RRL_IDENTITY_FAILED(kind, route), cause: error instanceof Error ? error.message : String(error) }, 'rate limit identity part threw; falling back to the client IP')
    }
  }
  // Fails at register: a bad defaultLimit must not wait for the first route to surface.
  if (options.defaultLimit !== undefined) compilePolicy(options.defaultLimit, 'GET', '/', context, true)

  const runtime: Runtime = {
    store,
    writeHeaders: headerWriter(options.headers),
    stats: { allowed: 0, limited: 0, degraded: 0 },
    failures: new BurstLogger(),
    badInput: new BurstLogger()
  }
  const summaries: PolicySummary[] = []
  const seen: RouteEntry[] = []
  const undeclared: string[] = []

  fastify.decorateRequest('rateLimit', null)

  fastify.addHook('onRoute', (route) => {
    for (const method of methodsOf(route.method)) seen.push({ method, url: route.url })
    const methodLabel = methodsOf(route.method).join(',')
    const declared = route.config?.rateLimit
    if (declared === false) {
      summaries.push({ method: methodLabel, url: route.url, limit: false })
      return
    }
    const block = declared ?? options.defaultLimit
    if (block === undefined) {
      // HEAD routes Fastify adds for a GET inherit its config: report the GET once.
      if (route.method !== 'HEAD' || !undeclared.includes(`GET ${route.url}`)) undeclared.push(`${methodLabel} ${route.url}`)
      return
    }
    const policy = compilePolicy(block, route.method, route.url, context, declared === undefined)
    summaries.push({
      method: methodLabel,
      url: route.url,
      limit: {
        name: policy.name,
        algorithm: policy.algorithm,
        limit: policy.params.limit,
        windowMs: policy.params.windowMs,
        burst: policy.params.burst,
        by: policy.by,
        onRedisError: policy.onRedisError,
        fromDefault: policy.fromDefault
      }
    })
    const hook = createRouteHook(policy, runtime)
    const stage = policy.identity.needsBody ? 'preValidation' : 'onRequest'
    const existing = route[stage]
    // After the route's own hooks of that stage, so an auth hook can set the user first.
    route[stage] = (existing === undefined ? [hook] : Array.isArray(existing) ? [...existing, hook] : [existing, hook]) as never
  })

  fastify.addHook('onReady', async function checkEveryRouteIsLimited () {
    if (undeclared.length > 0) throw new FST_RRL_MISSING_LIMIT(undeclared.join(', '))
    const unseen = unseenRoutes(fastify.printRoutes({ commonPrefix: false }), seen)
    if (unseen.length > 0) throw new FST_RRL_ROUTES_BEFORE_PLUGIN(unseen.join(', '))
    await store.warmUp()
  })

  fastify.addHook('onClose', async () => { store.close() })

  fastify.decorate('rateLimit', {
    policies: () => summaries.map((summary) => ({ ...summary, limit: summary.limit === false ? false : { ...summary.limit, by: [...summary.limit.by] } })),
    stats: () => ({ ...runtime.stats })
  })
}

export const fastifyRedisRateLimit = fp(rateLimitPlugin, {
  fastify: '5.x',
  name: 'fastify-redis-rate-limit'
})

export default fastifyRedisRateLimit
