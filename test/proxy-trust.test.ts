/**
 * Proxy trust checked at runtime (issue 18, item 5): a forwarding header
 * reaching a limited route while Fastify ignores it (trustProxy unset, false
 * or a hop count) raises FST_RRL_FORWARDED_UNTRUSTED once per process. Over
 * real sockets: the headers are what a proxy would send.
 */
import { test, type Test } from 'tap'
import Fastify, { type FastifyServerOptions } from 'fastify'
import rateLimit from '../lib/index.js'
import { FST_RRL_FORWARDED_UNTRUSTED } from '../lib/errors.js'
import { untrustedReason } from '../lib/request/proxy-check.js'
import { warningsDelivered, watchWarnings } from './helpers/warnings.js'

async function listen (t: Test, trustProxy: FastifyServerOptions['trustProxy']): Promise<string> {
  const app = Fastify({ trustProxy })
  await app.register(rateLimit, { store: 'memory' })
  app.get('/limited', { config: { rateLimit: { limit: 1000, window: '1m' } } }, async (request) => ({ ip: request.ip }))
  app.get('/open', { config: { rateLimit: false } }, async () => 'ok')
  const origin = await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { await app.close() })
  return origin
}

async function get (url: string, headers: Record<string, string> = {}): Promise<{ status: number, ip: string | undefined }> {
  const response = await fetch(url, { headers })
  const body = await response.text()
  await warningsDelivered()
  return { status: response.status, ip: response.status === 200 && body.startsWith('{') ? (JSON.parse(body) as { ip: string }).ip : undefined }
}

test('X-Forwarded-For with trustProxy unset: one coded warning per process, saying what to set', async (t) => {
  const seen = watchWarnings(t, FST_RRL_FORWARDED_UNTRUSTED)
  const origin = await listen(t, undefined)
  await get(`${origin}/limited`)
  t.equal(seen.length, 0, 'no forwarding header, no warning')
  await get(`${origin}/open`, { 'x-forwarded-for': '203.0.113.7' })
  t.equal(seen.length, 0, 'a route the plugin does not limit is not checked')
  const first = await get(`${origin}/limited`, { 'x-forwarded-for': '203.0.113.7' })
  t.equal(first.status, 200, 'the request itself is served as usual')
  t.equal(first.ip, '127.0.0.1', 'request.ip is the proxy: the situation warned about')
  t.equal(seen.length, 1)
  t.equal(seen[0]?.name, 'FastifyRedisRateLimitWarning')
  t.match(seen[0]?.message, /X-Forwarded-For header, but Fastify trustProxy is unset/)
  t.match(seen[0]?.message, /trustProxy: \['10\.0\.0\.0\/8'\]/, 'says what to set')
  for (let i = 0; i < 5; i++) await get(`${origin}/limited`, { 'x-forwarded-for': `203.0.113.${i}` })
  t.equal(seen.length, 1, 'once per process')
  t.equal(FST_RRL_FORWARDED_UNTRUSTED.emitted, true, 'latched: later requests cost one boolean')
})

test('trustProxy false and a hop count warn too; the hop count is named as ignored', async (t) => {
  for (const [trustProxy, pattern] of [[false, /trustProxy is false/], [1, /trustProxy is 1 \(a hop count, which Fastify 5\.12\.1 and later ignores\)/]] as const) {
    const seen = watchWarnings(t, FST_RRL_FORWARDED_UNTRUSTED)
    // Fastify 5.12.1+ types no longer admit a hop count, but JavaScript callers still pass one.
    const origin = await listen(t, trustProxy as unknown as FastifyServerOptions['trustProxy'])
    const reply = await get(`${origin}/limited`, { 'x-forwarded-for': '198.51.100.1' })
    t.equal(reply.ip, '127.0.0.1', `${String(trustProxy)}: Fastify ignored the header`)
    t.equal(seen.length, 1, `${String(trustProxy)}: warned`)
    t.match(seen[0]?.message, pattern)
  }
})

test('only Forwarded (RFC 7239): the warning says Fastify reads only X-Forwarded-For', async (t) => {
  const seen = watchWarnings(t, FST_RRL_FORWARDED_UNTRUSTED)
  const origin = await listen(t, undefined)
  await get(`${origin}/limited`, { forwarded: 'for=203.0.113.9;proto=https' })
  t.equal(seen.length, 1)
  t.match(seen[0]?.message, /a Forwarded header \(Fastify reads only X-Forwarded-For/)
})

test('trustProxy as addresses, a CIDR string or a function: no warning', async (t) => {
  const trusted: Array<FastifyServerOptions['trustProxy']> = [['127.0.0.1'], '10.0.0.0/8,127.0.0.1', (address: string) => address === '127.0.0.1']
  for (const trustProxy of trusted) {
    const seen = watchWarnings(t, FST_RRL_FORWARDED_UNTRUSTED)
    const origin = await listen(t, trustProxy)
    const reply = await get(`${origin}/limited`, { 'x-forwarded-for': '192.0.2.44' })
    t.equal(reply.ip, '192.0.2.44', 'Fastify took the client from the header')
    await get(`${origin}/limited`, { forwarded: 'for=192.0.2.45' })
    t.equal(seen.length, 0, `no warning for ${typeof trustProxy === 'function' ? 'a function' : JSON.stringify(trustProxy)}`)
  }
})

test('untrustedReason: which settings make Fastify ignore X-Forwarded-For', async (t) => {
  t.equal(untrustedReason(undefined), 'unset')
  t.equal(untrustedReason(false), 'false')
  t.match(untrustedReason(2), /^2 \(a hop count/)
  t.equal(untrustedReason(0), '0 (a hop count, which Fastify 5.12.1 and later ignores)')
  for (const trusted of [true, '127.0.0.1', ['10.0.0.0/8'], () => true]) t.equal(untrustedReason(trusted), undefined)
})
