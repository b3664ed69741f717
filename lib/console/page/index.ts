import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import { FST_RRL_CONSOLE_NO_RATE_LIMIT, FST_RRL_CONSOLE_PUBLIC, FST_RRL_INVALID_OPTION } from '../../errors.js'
import type { RateLimitApi } from '../../types/index.js'
import { resolveConsole, type ConsolePageOptions } from './options.js'
import { consoleErrors, consoleRoutes, limitedRoute } from './routes.js'
import { guard, SECURITY_HEADERS } from './security.js'

export type { ConsolePageOptions } from './options.js'

/*
 * `fastify-redis-rate-limit/console`: the operator's console page
 * (docs/console.md, "The console page"), an encapsulated plugin the app
 * registers at a prefix of its choice, after the rate limit plugin:
 *
 *   await app.register(consolePage, { prefix: '/ops/limits', authorize })
 *
 * It serves one HTML page, its script and its stylesheet (plain files under
 * assets/, read once at register) and the JSON API the page calls
 * (routes.ts), all behind `authorize` and the rate limit (security.ts). It
 * reads and steers the fleet only through the rate limit plugin's public
 * decorator, `fastify.rateLimit`.
 */

const ASSETS: Record<string, string> = {
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8'
}

function readAsset (name: string): string {
  return readFileSync(new URL(`./assets/${name}`, import.meta.url), 'utf8')
}

function isApi (value: unknown): value is RateLimitApi {
  return value !== null && typeof value === 'object' && typeof (value as RateLimitApi).fleet === 'function' && typeof (value as RateLimitApi).ban === 'function'
}

const consolePage: FastifyPluginAsync<ConsolePageOptions> = async (fastify: FastifyInstance, opts) => {
  const options = resolveConsole(opts)
  const api = (fastify as unknown as Record<string, unknown>)[options.configKey]
  if (!isApi(api)) throw new FST_RRL_CONSOLE_NO_RATE_LIMIT(options.configKey)
  // The page's path: the prefix once, with one trailing slash, percent-encoded as browsers send it (the cookie's Path).
  if (/[;,]/.test(fastify.prefix)) throw new FST_RRL_INVALID_OPTION('console prefix', `may not hold ';' or ',' (its token cookie's Path could not name it; got ${JSON.stringify(fastify.prefix)})`)
  const base = encodeURI(fastify.prefix.replace(/\/+$/, '') + '/')
  if (options.authorize === undefined) {
    const warning = new FST_RRL_CONSOLE_PUBLIC(base)
    fastify.log.warn({ code: warning.code }, warning.message)
  }
  const page = readAsset('index.html')
  const assets = Object.fromEntries(Object.keys(ASSETS).map((name) => [name, readAsset(name)]))

  // The console's own routes, left out of the targets its forms suggest.
  const own = new Set<string>()
  fastify.addHook('onRoute', (route) => { own.add(route.url) })
  fastify.setErrorHandler(consoleErrors)
  // Before the body is read: a caller `authorize` refuses learns nothing of what the API parses.
  fastify.addHook('preParsing', guard(options.authorize))
  // JSON only: another site's form (text/plain, urlencoded) is a 415 before any check.
  fastify.removeContentTypeParser('text/plain')
  fastify.addHook('onSend', async (_request, reply) => {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) reply.header(name, value)
    // Same-origin only, whatever CORS the app registered: no other site may read an answer.
    for (const name of Object.keys(reply.getHeaders())) if (name.startsWith('access-control-')) reply.removeHeader(name)
  })
  const limited = limitedRoute(options)

  // The page at `<prefix>/`: its relative links need the trailing slash, so `<prefix>` redirects there.
  fastify.get('/', limited, async (request, reply) => {
    const path = request.url.split('?')[0] as string
    // To the page's own path, never one built from the request (`//host/…` would leave the site).
    if (!path.endsWith('/')) return await reply.redirect(base)
    return await reply.type('text/html; charset=utf-8').send(page)
  })
  for (const [name, type] of Object.entries(ASSETS)) {
    fastify.get(`/${name}`, limited, async (_request, reply) => await reply.type(type).send(assets[name]))
  }
  consoleRoutes(fastify, api, options, base, own)
}

/** The console page plugin: register it after fastify-redis-rate-limit, at a prefix, with `authorize`. */
export const fastifyRedisRateLimitConsole = fp(consolePage, {
  fastify: '5.x',
  name: 'fastify-redis-rate-limit-console',
  encapsulate: true
})

export default fastifyRedisRateLimitConsole
