/**
 * Proxy trust checked at runtime (issue 18, item 5), from what requests show
 * (issue 48: no private Fastify symbol): a forwarding header from a loopback
 * or private peer that Fastify ignored (request.ip is the peer: trustProxy
 * unset, false, a hop count, or not trusting it) raises
 * FST_RRL_FORWARDED_UNTRUSTED once per process. Over real sockets (a loopback
 * peer: the headers are what a local proxy would send); a public peer is
 * inject's remoteAddress.
 */
import { test, type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import rateLimit from '../lib/index.js'
import { FST_RRL_FORWARDED_UNTRUSTED, FST_RRL_TRUST_PROXY_TRUE } from '../lib/errors.js'
import { peerKind } from '../lib/keys/ip.js'
import { warningsDelivered, watchWarnings } from './helpers/warnings.js'

async function build (t: Test, trustProxy: FastifyServerOptions['trustProxy']): Promise<FastifyInstance> {
  const app = Fastify({ trustProxy })
  await app.register(rateLimit, { store: 'memory' })
  app.get('/limited', { config: { rateLimit: { limit: 1000, window: '1m' } } }, async (request) => ({ ip: request.ip }))
  app.get('/open', { config: { rateLimit: false } }, async () => 'ok')
  t.teardown(async () => { await app.close() })
  return app
}

async function listen (t: Test, trustProxy: FastifyServerOptions['trustProxy']): Promise<string> {
  return await (await build(t, trustProxy)).listen({ port: 0, host: '127.0.0.1' })
}

/** A request from a public peer (inject's socket address). */
async function fromPeer (app: FastifyInstance, remoteAddress: string, headers: Record<string, string>): Promise<string> {
  const reply = await app.inject({ url: '/limited', remoteAddress, headers })
  await warningsDelivered()
  return (JSON.parse(reply.body) as { ip: string }).ip
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
  t.match(seen[0]?.message, /X-Forwarded-For header from 127\.0\.0\.1, but Fastify did not take the client from it/)
  t.match(seen[0]?.message, /trustProxy: \['10\.0\.0\.0\/8'\]/, 'says what to set')
  for (let i = 0; i < 5; i++) await get(`${origin}/limited`, { 'x-forwarded-for': `203.0.113.${i}` })
  t.equal(seen.length, 1, 'once per process')
  t.equal(FST_RRL_FORWARDED_UNTRUSTED.emitted, true, 'latched: later requests cost one boolean')
})

test('trustProxy false, a hop count (ignored from Fastify 5.12.1) and a list without the proxy warn too', async (t) => {
  for (const [trustProxy, pattern] of [[false, /trustProxy unset, false, a hop count/], [1, /from 127\.0\.0\.1/], [['10.0.0.0/8'], /not trusting that peer/]] as const) {
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

test('a public peer\'s ignored header is no proxy\'s by its address: no warning, and the route keeps checking', async (t) => {
  const seen = watchWarnings(t, FST_RRL_FORWARDED_UNTRUSTED)
  const app = await build(t, undefined)
  t.equal(await fromPeer(app, '198.51.100.20', { 'x-forwarded-for': '192.0.2.1' }), '198.51.100.20', 'ignored')
  t.equal(seen.length, 0, 'a client forging the header to a server that ignores it looks the same')
  t.equal(await fromPeer(app, '127.0.0.1', { 'x-forwarded-for': '127.0.0.1' }), '127.0.0.1')
  t.equal(seen.length, 0, 'a header that names the peer itself tells nothing')
  t.equal(await fromPeer(app, '10.1.2.3', { 'x-forwarded-for': '192.0.2.1' }), '10.1.2.3')
  t.equal(seen.length, 1, 'the next request from a private peer (a proxy) warns on the same route')
  t.match(seen[0]?.message, /from 10\.1\.2\.3/)
})

test('trustProxy that believes a public peer\'s X-Forwarded-For (true, a function that trusts all): FST_RRL_TRUST_PROXY_TRUE, once per process', async (t) => {
  const seen = watchWarnings(t, FST_RRL_TRUST_PROXY_TRUE)
  const local = await build(t, true)
  t.equal(await fromPeer(local, '10.0.0.9', { 'x-forwarded-for': '192.0.2.1' }), '192.0.2.1', 'a private proxy believed')
  t.equal(await fromPeer(local, '203.0.113.50', { 'x-forwarded-for': '192.0.2.2' }), '192.0.2.2', 'and then a public peer')
  t.equal(seen.length, 0, 'the route settled at its first forwarded request (a local proxy trusted): one boolean from then on')

  const listed = await build(t, ['10.0.0.0/8'])
  t.equal(await fromPeer(listed, '203.0.113.50', { 'x-forwarded-for': '192.0.2.3' }), '203.0.113.50', 'a list without the public peer ignores it')
  t.equal(seen.length, 0, 'no warning')

  for (const trustProxy of [true, () => true]) {
    const app = await build(t, trustProxy)
    t.equal(await fromPeer(app, '203.0.113.50', { 'x-forwarded-for': '192.0.2.4' }), '192.0.2.4', 'a public peer chose request.ip')
  }
  t.equal(seen.length, 1, 'warned once per process')
  t.equal(seen[0]?.name, 'FastifyRedisRateLimitWarning')
  t.match(seen[0]?.message, /X-Forwarded-For header of 203\.0\.113\.50, a public address/)
  t.match(seen[0]?.message, /trustProxy: \['10\.0\.0\.0\/8'\]/, 'says what to set')
})

test('peerKind: loopback, private, link-local, unique-local and CGNAT peers are local; other addresses public', async (t) => {
  for (const local of ['127.0.0.1', '::1', '::ffff:127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '100.64.0.1', 'fe80::1', 'fd00::1', '::ffff:10.0.0.1']) t.equal(peerKind(local), 'local', local)
  for (const remote of ['8.8.8.8', '203.0.113.5', '2001:4860::1', '::ffff:8.8.8.8']) t.equal(peerKind(remote), 'public', remote)
  for (const none of [undefined, '', 'not-an-ip']) t.equal(peerKind(none), undefined, String(none))
})
