/*
 * CORS preflights. @fastify/cors adds a catch-all `OPTIONS *` route and, by
 * default, answers preflights in its own app-level onRequest hook, before any
 * route-level hook could limit them. So that route, when it declares no limit
 * of its own, is treated as opted out (`rateLimit: false`) whatever the
 * registration order: it does not fail strict mode, it is not reported as
 * declared before the plugin, and policies() lists it as `false`, which is
 * what happens to preflights. See docs/routes.md, "CORS and preflights".
 */

/** The route a CORS plugin adds to accept every preflight. */
export function isPreflightCatchAll (method: string | string[], url: string): boolean {
  return url === '*' && (method === 'OPTIONS' || (Array.isArray(method) && method.length === 1 && method[0] === 'OPTIONS'))
}

/** Splits ready()'s list of routes the plugin never saw (`METHOD url`) into preflight catch-alls and the rest. */
export function partitionUnseen (unseen: string[]): { preflight: string[], others: string[] } {
  const preflight = unseen.filter((entry) => entry === 'OPTIONS *')
  return { preflight, others: unseen.filter((entry) => entry !== 'OPTIONS *') }
}
