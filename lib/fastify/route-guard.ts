import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify'
import { FST_RRL_ROUTE_NOT_SEEN } from '../errors.js'
import { routeLabel } from '../keys/constraints.js'
import { isPreflightCatchAll } from './preflight.js'

/*
 * Routes the plugin never saw, through Fastify's public API only.
 *
 * Fastify announces a route to `onRoute` hooks only if they exist when the
 * route is declared, and nothing public lists the routes declared earlier
 * (`hasRoute` and `findRoute` need a method and URL). Two public facts close
 * the gap (Fastify 5.0 to 5.12, lib/route.js):
 * - onRoute gets the route's options before Fastify builds the route's
 *   context config as `{ ...opts.config, url, method }`, so a key put on
 *   `route.config` there reaches `request.routeOptions.config` (the `''`/`'/'`
 *   pair of a prefixed index route reuses those options after one onRoute call);
 * - a context's hooks are bound to each of its routes at preReady, so a hook
 *   added to a context also runs for routes declared in it earlier, and
 *   addHook adds it to the child contexts the context already has too (their
 *   own hook lists were copied when they were created).
 * So each registration marks every route it sees with a Symbol of its own and
 * adds one onRequest hook to its context: a routed request whose config lacks
 * the mark is refused with a coded 500, logged once per route, never served
 * unlimited. Parent and sibling contexts are out of reach, by encapsulation.
 * test/route-discovery.test.ts holds both facts on 5.0.0 and the newest 5.x.
 */

/** One registration's route mark. */
export type RouteMark = symbol

export function routeMark (): RouteMark {
  return Symbol('fastify-redis-rate-limit route seen')
}

/** onRoute: a fresh config carrying the mark (the user's config object may be shared by several routes). */
export function markRoute (route: RouteOptions, mark: RouteMark): void {
  route.config = { ...route.config, [mark]: true } as RouteOptions['config']
}

/** Where the refusal's body sends the reader (no route detail reaches a client). */
const BODY = JSON.stringify({
  type: 'about:blank',
  title: 'Internal Server Error',
  status: 500,
  code: 'FST_RRL_ROUTE_NOT_SEEN',
  detail: 'This route is not covered by the rate limiter; the server log says why.'
})

/**
 * Adds the guard to `fastify`'s context. The common case (a marked route)
 * costs one `routeOptions` read and one property test; no promise.
 */
export function guardUnseenRoutes (fastify: FastifyInstance, mark: RouteMark): void {
  // One log line per route: the route's config object is its own.
  const logged = new WeakSet<object>()
  fastify.addHook('onRequest', function rateLimitRouteGuard (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    const options = request.routeOptions
    const config = options.config as unknown as Record<symbol, unknown>
    if (config?.[mark] === true) {
      done()
      return
    }
    const { method, url } = options
    // 404s have no URL (the notFound option limits them); preflight.ts exempts the CORS catch-all.
    if (url === undefined || isPreflightCatchAll(method, url)) {
      done()
      return
    }
    if (!logged.has(config)) {
      logged.add(config)
      // routeOptions shows no constraints: twins on one URL log the same label (the host tells them apart).
      const label = routeLabel(Array.isArray(method) ? method.join(',') : method, url, '')
      request.log.error({ err: new FST_RRL_ROUTE_NOT_SEEN(label), host: request.host }, 'rate limit: a route declared before the plugin is refused')
    }
    reply.code(500).type('application/problem+json').send(BODY)
  })
}
