import type { FastifyInstance } from 'fastify'

/*
 * CORS preflights. @fastify/cors adds a catch-all `OPTIONS *` route and, by
 * default, answers preflights in its own app-level onRequest hook, before any
 * route-level hook could limit them. So that route, when it declares no limit
 * of its own, is treated as opted out (`rateLimit: false`) whatever the
 * registration order: it does not fail strict mode, the route guard does not
 * refuse it when it was declared before the plugin, and policies() lists it as
 * `false`, which is what happens to preflights. See docs/routes.md, "CORS and
 * preflights".
 */

/** The route a CORS plugin adds to accept every preflight. */
export function isPreflightCatchAll (method: string | string[], url: string): boolean {
  return url === '*' && (method === 'OPTIONS' || (Array.isArray(method) && method.length === 1 && method[0] === 'OPTIONS'))
}

/**
 * At ready: whether the app has the catch-all although onRoute never showed it
 * (declared before the plugin), so that policies() lists it too. `hasRoute`
 * asks Fastify's router, app-wide (the catch-all is one per app), which holds
 * `*` as `/*`.
 */
export function preflightDeclaredBefore (fastify: FastifyInstance, seen: boolean): boolean {
  return !seen && fastify.hasRoute({ method: 'OPTIONS', url: '/*' })
}
