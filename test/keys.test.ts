import { test } from 'tap'
import fc from 'fast-check'
import { canonicalIp } from '../lib/ip.js'
import { boundIdentity, hashValue, keyHead, keyTail, MAX_KEY_BYTES, routeSegment } from '../lib/keys.js'
import { keyMethod } from '../lib/policy.js'
import { parseWindow } from '../lib/duration.js'
import { parseRouteTree } from '../lib/routes.js'

/** Redis Cluster's hash tag rule: the text between the first `{` and the next `}`, if non-empty. */
function hashTag (key: string): string {
  const open = key.indexOf('{')
  if (open === -1) return key
  const close = key.indexOf('}', open + 1)
  if (close === -1 || close === open + 1) return key
  return key.slice(open + 1, close)
}

const fullKey = (method: string, url: string, identity: string, suffix: string) =>
  keyHead('rl', routeSegment(method, url)) + boundIdentity(identity) + keyTail(suffix)

test('IP canonicalisation', async (t) => {
  t.equal(canonicalIp('1.2.3.4', 64), '1.2.3.4')
  t.equal(canonicalIp('::ffff:1.2.3.4', 64), '1.2.3.4', 'IPv4-mapped IPv6 becomes IPv4')
  t.equal(canonicalIp('::ffff:102:304', 64), '1.2.3.4', 'hex-written mapped address too')
  t.equal(canonicalIp('2001:DB8:0:0::1', 128), canonicalIp('2001:db8::1', 128), 'one spelling for IPv6')
  t.equal(canonicalIp('2001:db8::1', 128), '2001:db8::1')
  t.equal(canonicalIp('2001:db8:1:2:aaaa::1', 64), '2001:db8:1:2::/64', 'grouped by /64 by default')
  t.equal(canonicalIp('2001:db8:1:2:ffff:ffff:ffff:ffff', 64), '2001:db8:1:2::/64')
  t.not(canonicalIp('2001:db8:1:3::1', 64), canonicalIp('2001:db8:1:2::1', 64), 'another /64 is another caller')
  t.equal(canonicalIp('2001:db8:1:2:3::1', 48), '2001:db8:1::/48', 'ipv6Subnet is configurable')
  t.equal(canonicalIp('64:ff9b::102:304', 64), '64:ff9b::102:304', 'NAT64 keeps the embedded IPv4 apart')
  t.not(canonicalIp('64:ff9b::102:305', 64), canonicalIp('64:ff9b::102:304', 64))
  for (const bad of ['not-an-ip', '{evil}', '1.2.3.4:5555', '01.2.3.4', '', 'x'.repeat(8192), '1.2.3.4\r\nX: y']) {
    t.equal(canonicalIp(bad, 64), undefined, `refuses ${JSON.stringify(bad.slice(0, 20))}`)
  }
  t.equal(canonicalIp(undefined, 64), undefined)
})

test('windows: numbers and duration strings', async (t) => {
  t.equal(parseWindow('500ms'), 500)
  t.equal(parseWindow('15m'), 900_000)
  t.equal(parseWindow('1d'), 86_400_000)
  t.equal(parseWindow(1), 1)
  t.type(parseWindow('1.5s'), 'string')
  t.type(parseWindow('1w'), 'string')
  t.type(parseWindow(null), 'string')
})

test('HEAD shares the GET bucket; method arrays share one bucket', async (t) => {
  t.equal(keyMethod('HEAD'), 'GET')
  t.equal(keyMethod('post'), 'POST')
  t.equal(keyMethod(['POST', 'GET', 'HEAD']), 'GET,POST')
})

test('hostile identities and routes: one slot per decision, bounded length, no braces from the client', async (t) => {
  const hostile = ['{', '}', '{}', '}{', '{a}', 'a}x', '\r\n', '\0', '☃', 'x'.repeat(8192), '|', ',', '=', '~', '%H']
  const suffixes = ['fw86400000', 'sw60000', 'sl1000', 'tb1', 'gc86400000']
  for (const value of hostile) {
    const identity = `u=${hashValue(value)}`
    for (const url of ['/orders/:id', '/{weird}/:id', '/' + 'a'.repeat(300), '/a|b', '/%7B']) {
      const keys = suffixes.map((suffix) => fullKey('OPTIONS', url, identity, suffix))
      t.equal(new Set(keys.map(hashTag)).size, 1, 'every key of a decision shares one hash tag')
      for (const key of keys) t.ok(Buffer.byteLength(key) <= MAX_KEY_BYTES, `key length ${Buffer.byteLength(key)}`)
      t.notOk(hashTag(keys[0] as string).includes('{'), 'no brace inside the tag')
    }
  }
})

test('property: distinct (route, identity) pairs never share a key, and keys stay bounded', async (t) => {
  const method = fc.constantFrom('GET', 'POST', 'GET,POST', 'DELETE')
  const url = fc.oneof(fc.string({ maxLength: 60 }).map((s) => '/' + s), fc.constantFrom('/a:b', '/a', '/a|b', '/a%7Cb', '/{x}', '/%7Bx%7D'))
  const part = fc.oneof(
    fc.ipV4().map((ip) => `ip=${ip}`),
    fc.string({ maxLength: 200 }).map((s) => `u=${hashValue(s)}`),
    fc.ipV4().map((ip) => `u~${ip}`)
  )
  const identity = fc.array(part, { minLength: 1, maxLength: 4 }).map((parts) => parts.join(','))
  const pair = fc.tuple(method, url, identity)
  t.doesNotThrow(() => fc.assert(fc.property(pair, pair, ([m1, u1, i1], [m2, u2, i2]) => {
    const k1 = fullKey(m1, u1, i1, 'sw60000')
    const k2 = fullKey(m2, u2, i2, 'sw60000')
    if (Buffer.byteLength(k1) > MAX_KEY_BYTES) return false
    const same = m1 === m2 && u1 === u2 && i1 === i2
    return same === (k1 === k2)
  }), { numRuns: 3000 }), 'no collision and no oversized key in 3000 random pairs')
  // The separator trick from the issue: route `a:b` + id `c` versus route `a` + id `b:c`.
  t.not(fullKey('GET', '/a:b', 'u=c', 'sw1'), fullKey('GET', '/a', 'u=b:c', 'sw1'))
  t.not(fullKey('GET', '/a|u=b', 'u=c', 'sw1'), fullKey('GET', '/a', 'u=b|u=c', 'sw1'))
})

test('the route table parser reads Fastify printRoutes output', async (t) => {
  const printed = [
    '├── /orders (GET, HEAD)',
    '│   └── /:id (GET, HEAD)',
    '│       └── /items (POST)',
    '├── /v (GET, HEAD) {"version":"1.0.0"}',
    '└── /p/orders/:id (PUT)',
    ''
  ].join('\n')
  t.same(parseRouteTree(printed).map((e) => `${e.method} ${e.url}`), [
    'GET /orders', 'HEAD /orders', 'GET /orders/:id', 'HEAD /orders/:id', 'POST /orders/:id/items', 'GET /v', 'HEAD /v', 'PUT /p/orders/:id'
  ])
})
