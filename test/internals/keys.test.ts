import { test } from 'tap'
import { createHash, createHmac } from 'node:crypto'
import fc from 'fast-check'
import type { FastifyRequest } from 'fastify'
import { constraintText, routeLabel } from '../../lib/keys/constraints.js'
import { compileIdentity, type IdentityPartSpec } from '../../lib/keys/identity.js'
import { canonicalIp } from '../../lib/keys/ip.js'
import {
  assembleKeys, boundIdentity, distinctSuffixes, hashValue, identityHasher, keyHead, keyLayout, keyMethod, keyTail, routeSegment
} from '../../lib/keys/layout.js'
import { NOMINAL_PERIOD_MS } from '../../lib/kinds/period/policy.js'
import { KINDS } from '../../lib/kinds/index.js'
import type { CalendarSpec } from '../../lib/kinds/period/calendar.js'
import type { AlgorithmName } from '../../lib/store/algorithms.js'

/** A block's key suffix as its kind names it: a window's, or a calendar period's. */
function keySuffix (algorithm: AlgorithmName, windowMs: number, period?: CalendarSpec): string {
  return (period === undefined ? KINDS.window : KINDS.period).keySuffix({ algorithm, windowMs, period: period && { spec: period } })
}
import { DAY_MS, MAX_IDENTITY_LENGTH, MAX_KEY_BYTES, MAX_PREFIX_LENGTH, MAX_WINDOW_MS } from '../../lib/limits.js'
import { penaltyKey } from '../../lib/store/port.js'
import { parseWindow } from '../../lib/policy/duration.js'
import { crc16, keySlot } from '../../lib/store/redis/cluster-slots.js'

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
  // Zone ids name the receiving host's interface: dropped, so they cannot mint buckets.
  t.equal(canonicalIp('fe80::1%eth0', 128), 'fe80::1')
  t.equal(canonicalIp('2001:db8::1%a', 128), canonicalIp('2001:db8::1%b', 128))
  t.equal(canonicalIp('64:ff9b::1.2.3.4%x', 64), '64:ff9b::102:304', 'NAT64 with a zone id is still one address')
  t.equal(canonicalIp('::ffff:1.2.3.4%eth0', 64), '1.2.3.4')
  for (const odd of ['127.1', '0x7f.1', ' 1.2.3.4', '1.2.3.4 ', '::ffff:1.2.3.4/24', '2001:db8::1%a}b']) {
    t.equal(canonicalIp(odd, 64), undefined, `refuses ${JSON.stringify(odd)}`)
  }
  t.equal(canonicalIp('2001:DB8::1', 64), '2001:db8::/64')
})

test('windows: numbers and duration strings', async (t) => {
  t.equal(parseWindow('500ms'), 500)
  t.equal(parseWindow('15m'), 900_000)
  t.equal(parseWindow('1d'), 86_400_000)
  t.equal(parseWindow(1), 1)
  t.equal(parseWindow('1.5s'), 1500)
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
  const suffixes = ['FC86400000', 'SW60000', 'sl1000', 'TB1', 'GC86400000']
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
    const k1 = fullKey(m1, u1, i1, 'SW60000')
    const k2 = fullKey(m2, u2, i2, 'SW60000')
    if (Buffer.byteLength(k1) > MAX_KEY_BYTES) return false
    const same = m1 === m2 && u1 === u2 && i1 === i2
    return same === (k1 === k2)
  }), { numRuns: 3000 }), 'no collision and no oversized key in 3000 random pairs')
  // The separator trick from the issue: route `a:b` + id `c` versus route `a` + id `b:c`.
  t.not(fullKey('GET', '/a:b', 'u=c', 'SW1'), fullKey('GET', '/a', 'u=b:c', 'SW1'))
  t.not(fullKey('GET', '/a|u=b', 'u=c', 'SW1'), fullKey('GET', '/a', 'u=b|u=c', 'SW1'))
})

test('a route\'s constraints: one stable text, hashed into a bounded segment; without any the segment is as it was', async (t) => {
  for (const none of [undefined, null, {}, { host: undefined }, 'x']) t.equal(constraintText(none), '', `${JSON.stringify(none) ?? 'undefined'}: no constraints`)
  t.equal(constraintText({ version: '1.0.0', host: 'a' }), '{"host":"a","version":"1.0.0"}', 'keys sorted')
  t.equal(constraintText({ host: 'a', version: '1.0.0' }), constraintText({ version: '1.0.0', host: 'a' }), 'whatever the declaration order')
  t.equal(constraintText({ host: /^a\./i }), '{"host":/^a\\./i}', 'a RegExp by its source and flags')
  t.not(constraintText({ host: /^a\./i }), constraintText({ host: '/^a\\./i' }), 'never a string\'s text')
  t.not(constraintText({ host: /a/i }), constraintText({ host: /a/ }), 'flags count')
  t.equal(constraintText({ tenant: { b: 1, a: [2, 'x'] } }), '{"tenant":{"a":[2,"x"],"b":1}}', 'a custom strategy\'s value, nested, sorted too')
  t.equal(routeLabel('GET', '/api', ''), 'GET /api')
  t.equal(routeSegment('GET', '/api'), 'GET:/api', 'the unconstrained segment is pinned')
  t.equal(routeSegment('GET', '/api', ''), 'GET:/api')
  const text = constraintText({ host: 'a.example.com' })
  t.equal(routeSegment('GET', '/api', text), 'GET:/api%C' + hashValue(text))
  t.not(routeSegment('GET', '/api', text), routeSegment('GET', '/api', constraintText({ host: 'b.example.com' })))
  fc.assert(fc.property(fc.string({ maxLength: 80 }), fc.string({ maxLength: 80 }), (url, value) => {
    const constrained = routeSegment('GET', url, constraintText({ host: value }))
    return Buffer.byteLength(constrained) <= 44 && constrained !== routeSegment('GET', url) && constrained.includes('%') &&
      (constrained.startsWith('%H') || constrained.includes('%C'))
  }), { numRuns: 500 })
})

const HOSTILE_VALUES = ['{', '}', '{}', '}{', '{a}', 'a}x', '\r\n', 'a\r\nX-Evil: 1', '\0', 'a\0b', '☃', '{☃}', 'x'.repeat(8192), 'sk_' + '{k}'.repeat(2730), '|', ',', '=', '~', '%H', 'u=x', 'ip=1.2.3.4', 'a,b', '']
const ALL_SUFFIXES = ['FC1000', 'SW60000', 'sl900000', 'TB1000', 'GC86400000', 'SW3600000']

/** A request as the identity code reads it, carrying `value` in every field that can feed a key. */
function hostileRequest (value: string, ip = '203.0.113.9'): FastifyRequest {
  return {
    ip,
    socket: { remoteAddress: '127.0.0.1' },
    headers: { 'x-user': value, 'x-api-key': value, 'x-tenant': value },
    params: { tenant: value },
    body: { username: value }
  } as unknown as FastifyRequest
}

const identityContext = {
  user: (request: FastifyRequest) => request.headers['x-user'] as string | undefined,
  apiKey: (request: FastifyRequest) => request.headers['x-api-key'] as string | undefined,
  ipv6Subnet: 64,
  onPartError: () => {}
}

const BY_SPECS: Array<IdentityPartSpec | IdentityPartSpec[]> = [
  'ip', 'user', 'api-key', 'header:x-tenant', 'param:tenant', 'body:username',
  (request) => request.headers['x-tenant'] as string | undefined,
  ['ip', 'body:username'], ['user', 'api-key', 'header:x-tenant', 'param:tenant', 'body:username']
]

test('CRC16 slot function matches Redis (CLUSTER KEYSLOT reference values)', async (t) => {
  t.equal(crc16(Buffer.from('123456789')), 0x31c3, 'CRC16/XMODEM check value')
  t.equal(keySlot('foo'), 12182)
  t.equal(keySlot('{user1000}.following'), keySlot('{user1000}.followers'))
  t.equal(keySlot('{user1000}.following'), keySlot('user1000'))
  t.equal(keySlot('foo{}{bar}'), crc16(Buffer.from('foo{}{bar}')) % 16384, 'an empty first tag hashes the whole key')
  t.equal(keySlot('foo{{bar}}zap'), keySlot('{bar'), 'the tag ends at the first }')
})

test('hostile values in every identity field: one slot per decision, ≤ 128 bytes, no client text in the key', async (t) => {
  let checked = 0
  for (const secret of [undefined, Buffer.from('0123456789abcdef0123')]) {
    for (const by of BY_SPECS) {
      const identity = compileIdentity(by, { ...identityContext, hashSecret: secret }, 'GET /x')
      if (typeof identity === 'string') throw new Error(identity)
      for (const value of HOSTILE_VALUES) {
        const rendered = identity.resolve(hostileRequest(value))
        for (const url of ['/orders/:id', '/t/:tenant', '/{weird}/:tenant', '/' + 'a'.repeat(300) + '/:tenant']) {
          const head = keyHead('rl', routeSegment('GET', url))
          const keys = ALL_SUFFIXES.map((suffix) => head + rendered + keyTail(suffix))
          const slots = new Set(keys.map(keySlot))
          if (slots.size !== 1) t.fail(`${JSON.stringify(value.slice(0, 12))} by ${String(by)} on ${url}: ${slots.size} slots`)
          for (const key of keys) {
            if (Buffer.byteLength(key) > MAX_KEY_BYTES) t.fail(`key of ${Buffer.byteLength(key)} bytes`)
            if (!/^[\x21-\x7e]+$/.test(key)) t.fail(`non-printable or non-ASCII byte in ${JSON.stringify(key)}`)
          }
          const tag = hashTag(keys[0] as string)
          if (tag.includes('{') || tag.includes('}')) t.fail(`brace inside the tag ${tag}`)
          if (value.length >= 3 && !/^(ip|u=x|a,b)/.test(value) && keys[0]?.includes(value)) t.fail(`raw value in ${keys[0]}`)
          checked++
        }
      }
    }
  }
  t.equal(checked, 2 * BY_SPECS.length * HOSTILE_VALUES.length * 4, `${checked} decisions checked`)
})

test('property: raw identity values through the real identity code never collide (separator tricks included)', async (t) => {
  const tricky = fc.constantFrom('', ',', '|', '=', '~', ':', '{', '}', '%', 'u=', 'k=', 'ip=', ',u=', '|u=', '%H', '\0', '☃', 'a:b', 'b:c')
  const value = fc.oneof(fc.string({ maxLength: 40, unit: 'grapheme' }), fc.array(tricky, { maxLength: 6 }).map((parts) => parts.join('')), fc.ipV4(), fc.ipV6())
  const url = fc.oneof(fc.constantFrom('/a:b', '/a', '/a|b', '/a/:tenant', '/%7B', '/{'), fc.string({ maxLength: 50 }).map((s) => '/' + s))
  const by = fc.constantFrom<IdentityPartSpec | IdentityPartSpec[]>('user', 'api-key', 'header:x-tenant', ['user', 'api-key'], ['api-key', 'user'], ['ip', 'body:username'])
  const compiled = new Map<string, ReturnType<typeof compileIdentity>>()
  const render = (spec: IdentityPartSpec | IdentityPartSpec[], request: FastifyRequest) => {
    const label = JSON.stringify(spec)
    let identity = compiled.get(label)
    if (identity === undefined) compiled.set(label, identity = compileIdentity(spec, identityContext, 'GET /x'))
    if (typeof identity === 'string') throw new Error(identity)
    return identity.resolve(request)
  }
  const request = (user: string, key: string, ip: string) => ({
    ip, socket: { remoteAddress: '127.0.0.1' }, headers: { 'x-user': user, 'x-api-key': key, 'x-tenant': user }, params: {}, body: { username: key }
  }) as unknown as FastifyRequest
  const caller = fc.record({ url, by, user: value, key: value, ip: fc.ipV4() })
  t.doesNotThrow(() => fc.assert(fc.property(caller, caller, (a, b) => {
    const keyA = keyHead('rl', routeSegment('GET', a.url)) + render(a.by, request(a.user, a.key, a.ip)) + keyTail('SW60000')
    const keyB = keyHead('rl', routeSegment('GET', b.url)) + render(b.by, request(b.user, b.key, b.ip)) + keyTail('SW60000')
    if (Buffer.byteLength(keyA) > MAX_KEY_BYTES || Buffer.byteLength(keyB) > MAX_KEY_BYTES) return false
    // The pair is the same caller on the same route when route, spec and every value the spec reads agree.
    const reads = (c: typeof a) => {
      const spec = JSON.stringify(c.by)
      const user = c.user === '' ? `~${c.ip}` : `=${c.user}`
      const key = c.key === '' ? `~${c.ip}` : `=${c.key}`
      if (spec === '"user"' || spec === '"header:x-tenant"') return [spec, user]
      if (spec === '"api-key"') return [spec, key]
      if (spec === '["ip","body:username"]') return [spec, c.ip, key]
      return [spec, user, key]
    }
    const same = a.url === b.url && JSON.stringify(reads(a)) === JSON.stringify(reads(b))
    return same === (keyA === keyB)
  }), { numRuns: 3000 }), 'no collision in 3000 random pairs of raw callers')
  // The example with real identity values: route `a:b` + id `c` versus route `a` + id `b:c`.
  const userKey = (url: string, user: string) => keyHead('rl', routeSegment('GET', url)) + render('user', request(user, 'k', '1.2.3.4')) + keyTail('SW1')
  t.not(userKey('/a:b', 'c'), userKey('/a', 'b:c'))
  t.not(userKey('/a', 'b|u=c'), userKey('/a|u=b', 'c'))
  t.not(render(['user', 'api-key'], request('a,k=b', 'c', '1.2.3.4')), render(['user', 'api-key'], request('a', 'b,k=c', '1.2.3.4')))
})

test('identity hashes are the SHA-256 of the value\'s UTF-8, 132 bits in base64url, as old instances compute them (shared keys in a rolling deploy)', async (t) => {
  t.equal(hashValue('alice'), 'K9gGyX8OAK8aH8Myj6djqS', 'a known value')
  fc.assert(fc.property(fc.string({ unit: 'grapheme', maxLength: 300 }), (value) => {
    return hashValue(value) === createHash('sha256').update(value, 'utf8').digest('base64url').slice(0, 22)
  }), { numRuns: 2000 })
})

test('hashSecret: HMAC-SHA256 with the same shape; another secret, another key; a private copy of the secret', async (t) => {
  const secret = Buffer.from('0123456789abcdef-secret')
  const keyed = identityHasher(secret)
  t.equal(keyed('alice'), createHmac('sha256', secret).update('alice').digest('base64url').slice(0, 22))
  t.match(keyed('alice'), /^[A-Za-z0-9_-]{22}$/)
  t.not(keyed('alice'), hashValue('alice'))
  t.not(keyed('alice'), identityHasher(Buffer.from('0123456789abcdef-other'))('alice'))
  t.equal(identityHasher(undefined), hashValue)
  const before = keyed('bob')
  secret.fill(0)
  t.equal(keyed('bob'), before, 'mutating the caller\'s buffer afterwards changes nothing')
})

test('the longest window and a calendar period keep every key within 128 bytes, penalty keys and siblings included', async (t) => {
  const longest = 'America/Argentina/ComodRivadavia'
  const suffixes = {
    day: keySuffix('gcra', DAY_MS),
    longest: keySuffix('gcra', MAX_WINDOW_MS),
    period: keySuffix('fixed-window', NOMINAL_PERIOD_MS.month, { unit: 'month', timeZone: longest, weekStart: 1 })
  }
  t.equal(suffixes.day, 'GC86400000', 'windows up to a day keep their suffix (rolling deploys)')
  t.equal(suffixes.longest, 'GC~eiz5s00', '366 days: a compact suffix')
  t.match(suffixes.period, /^PCm[A-Za-z0-9_-]{7}$/)
  t.equal(keySuffix('sliding-window', 2 * DAY_MS), 'SW~2uvpc0', 'two days')
  t.not(keySuffix('fixed-window', 0, { unit: 'week', timeZone: 'UTC', weekStart: 1 }), keySuffix('fixed-window', 0, { unit: 'week', timeZone: 'UTC', weekStart: 7 }), 'weekStart is in the key')
  t.not(keySuffix('fixed-window', 0, { unit: 'month', timeZone: 'UTC', weekStart: 1 }), keySuffix('fixed-window', 0, { unit: 'month', timeZone: 'Europe/Berlin', weekStart: 1 }), 'the time zone is in the key')
  const prefix = 'p'.repeat(MAX_PREFIX_LENGTH)
  const route = { method: 'OPTIONS', url: '/' + 'r'.repeat(35) } // the longest route segment kept as it is: 44 bytes
  const identity = 'u=' + 'i'.repeat(MAX_IDENTITY_LENGTH - 2)
  const lengths: Record<string, number> = {}
  for (const [name, suffix] of Object.entries(suffixes)) {
    for (const global of [false, true]) {
      const blocks = [{ global, suffix }, { global: false, suffix }, { global: false, suffix }]
      distinctSuffixes(blocks)
      const layout = keyLayout(prefix, route, blocks, [0, 0, 0])
      for (const key of assembleKeys(layout, [boundIdentity(identity)])) {
        for (const each of [key, penaltyKey(key)]) {
          lengths[name] = Math.max(lengths[name] ?? 0, Buffer.byteLength(each))
          if (Buffer.byteLength(each) > MAX_KEY_BYTES) t.fail(`${Buffer.byteLength(each)} bytes: ${each}`)
        }
      }
    }
  }
  t.equal(routeSegment('OPTIONS', route.url).length, 44)
  t.equal(lengths.longest, lengths.day, `the 366-day window's worst key is as long as the 1-day one's (${lengths.day ?? 0} bytes)`)
  t.ok((lengths.period ?? 0) <= (lengths.day ?? 0), `a period's worst key: ${lengths.period ?? 0} bytes`)
})
