import type { FastifyRequest } from 'fastify'
import { FST_RRL_FORWARDED_UNTRUSTED } from '../errors.js'
import { fastifyTrustProxy } from '../keys/ip.js'

/*
 * The most common failure of an IP-keyed limiter: behind a proxy with
 * `trustProxy` off, `request.ip` is the proxy and every caller shares one
 * bucket. Checked on every limited route, not only those keyed by 'ip': the
 * identity fallback, `allowList` and most `by` functions read `request.ip` too.
 * Once per process (process-warning). Each route hook keeps one boolean: it
 * stops checking once its server is known to trust its proxy, or once the
 * warning has been emitted, so from then on a request costs that boolean.
 */

/** Per Fastify instance: why its trustProxy ignores X-Forwarded-For, or undefined when it honours it. */
const untrustedBy = new WeakMap<object, string | undefined>()

/** Why `trustProxy` makes Fastify ignore forwarding headers, or undefined when it reads them. */
export function untrustedReason (trustProxy: unknown): string | undefined {
  if (trustProxy === undefined) return 'unset'
  if (trustProxy === false) return 'false'
  // From Fastify 5.12.1 a hop count fails closed: request.ip is the socket address.
  if (typeof trustProxy === 'number') return `${trustProxy} (a hop count, which Fastify 5.12.1 and later ignores)`
  // true (warned at startup), address / CIDR strings and lists, functions: Fastify reads X-Forwarded-For.
  return undefined
}

function reasonFor (server: object): string | undefined {
  if (untrustedBy.has(server)) return untrustedBy.get(server)
  const reason = untrustedReason(fastifyTrustProxy(server))
  untrustedBy.set(server, reason)
  return reason
}

/**
 * Warns (once per process) when a forwarding header reaches a server that does
 * not trust its proxy. Returns whether the caller should check its next request.
 */
export function checkForwarded (request: FastifyRequest): boolean {
  if (FST_RRL_FORWARDED_UNTRUSTED.emitted) return false
  const reason = reasonFor(request.server)
  if (reason === undefined) return false
  const headers = request.headers
  const forwardedFor = headers['x-forwarded-for'] !== undefined
  if (!forwardedFor && headers.forwarded === undefined) return true
  const header = forwardedFor
    ? 'an X-Forwarded-For header'
    : 'a Forwarded header (Fastify reads only X-Forwarded-For: have the proxy send X-Forwarded-For as well)'
  FST_RRL_FORWARDED_UNTRUSTED(header, reason)
  return false
}
