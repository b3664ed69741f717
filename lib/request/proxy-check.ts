import type { FastifyRequest } from 'fastify'
import { FST_RRL_FORWARDED_UNTRUSTED, FST_RRL_TRUST_PROXY_TRUE } from '../errors.js'
import { peerKind } from '../keys/ip.js'

/*
 * Proxy trust, read from what requests show: Fastify does not expose its
 * `trustProxy` option, and this plugin reads no private symbol. Fastify sets
 * `request.ip` to the socket's address unless it took the client from
 * X-Forwarded-For, so a request carrying a forwarding header shows which of
 * the two it did, and its peer's address says who sent the header:
 *
 * - ignored, from a local peer (loopback, private, link-local, unique-local,
 *   CGNAT: where proxies connect from): the proxy is not trusted, request.ip
 *   is the proxy and every client behind it shares one bucket
 *   (FST_RRL_FORWARDED_UNTRUSTED). Fastify reads only X-Forwarded-For, so a
 *   lone Forwarded header from a local peer warns too;
 * - believed, from a public peer: what `trustProxy: true` does for every peer,
 *   so any client that reaches the server can pick its IP
 *   (FST_RRL_TRUST_PROXY_TRUE). A trusted proxy on a public address (a CDN's
 *   ranges listed on purpose) looks the same: the warning says so;
 * - believed from a local peer: the proxy is trusted, nothing more to learn;
 * - ignored from a public peer: a client forging the header to a server that
 *   rightly ignores it, or a proxy on a public address that is not trusted,
 *   which no request tells apart: no warning, the next request is checked.
 *
 * Checked on every limited route, not only those keyed by 'ip': the identity
 * fallback, `allowList` and most `by` functions read `request.ip` too. Each
 * warning once per process (process-warning). Each route hook keeps one
 * boolean: it stops checking at its first request that settles the case (a
 * warning given, or a local proxy trusted), so from then on a request costs
 * that boolean.
 */

/** The header's address nearest to the peer: what Fastify would have read first. */
function nearestForwarded (header: string): string {
  const comma = header.lastIndexOf(',')
  return (comma === -1 ? header : header.slice(comma + 1)).trim()
}

/** Checks one request; returns whether the caller should check its next request. */
export function checkForwarded (request: FastifyRequest): boolean {
  if (FST_RRL_FORWARDED_UNTRUSTED.emitted && FST_RRL_TRUST_PROXY_TRUE.emitted) return false
  const headers = request.headers
  const forwardedFor = headers['x-forwarded-for']
  if (forwardedFor === undefined && headers.forwarded === undefined) return true
  const peer = request.socket.remoteAddress
  const kind = peerKind(peer)
  if (kind === undefined) return true
  if (request.ip !== peer) {
    // Fastify took the client from the header.
    if (kind === 'local') return false
    FST_RRL_TRUST_PROXY_TRUE(peer)
    return false
  }
  // The header names the peer itself: Fastify may have read it, nothing to tell.
  if (typeof forwardedFor === 'string' && nearestForwarded(forwardedFor) === peer) return true
  if (kind === 'public') return true
  const header = forwardedFor !== undefined
    ? 'an X-Forwarded-For header'
    : 'a Forwarded header (Fastify reads only X-Forwarded-For: have the proxy send X-Forwarded-For as well)'
  FST_RRL_FORWARDED_UNTRUSTED(header, peer)
  return false
}
