/**
 * The exported `canonicalIp(raw, ipv6Subnet = 64)` (issue 18): a `by` function
 * that keys on it groups callers exactly as the plugin's 'ip' part does.
 */
import { test } from 'tap'
import type { FastifyRequest } from 'fastify'
import { canonicalIp, errors } from '../../lib/index.js'
import { compileIdentity, type CompiledIdentity } from '../../lib/keys/identity.js'
import { buildApp } from '../helpers/app.js'

const ADDRESSES = [
  '1.2.3.4', '::ffff:1.2.3.4', '::ffff:102:304', '::FFFF:1.2.3.4', '1.2.3.5',
  '2001:db8:1:2::1', '2001:DB8:1:2:aaaa::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::1%eth0',
  '2001:db8:1:3::1', '2001:db8:2::1', '64:ff9b::102:304', '64:ff9b::102:305', 'fe80::1%lo', 'fe80::1'
]

const context = { ipv6Subnet: 64, onPartError: () => {} }

function compiled (by: Parameters<typeof compileIdentity>[0]): CompiledIdentity {
  const identity = compileIdentity(by, context, 'GET /x')
  if (typeof identity === 'string') throw new Error(identity)
  return identity
}

const requestFrom = (ip: string): FastifyRequest => ({ ip, socket: { remoteAddress: ip }, headers: {}, params: {} }) as unknown as FastifyRequest

test('canonicalIp: the default subnet is 64; non-IPs are undefined; a bad subnet is a coded error', async (t) => {
  t.equal(canonicalIp('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64')
  t.equal(canonicalIp('2001:db8:1:2:aaaa::1', 48), '2001:db8:1::/48')
  t.equal(canonicalIp('2001:db8::1', 128), '2001:db8::1')
  t.equal(canonicalIp('::ffff:1.2.3.4'), '1.2.3.4')
  for (const bad of ['not-an-ip', '', '1.2.3.4:80', undefined, 42 as unknown as string]) t.equal(canonicalIp(bad), undefined)
  for (const subnet of [0, 7, 129, 64.5, Number.NaN, '64' as unknown as number]) {
    t.throws(() => canonicalIp('1.2.3.4', subnet), errors.FST_RRL_INVALID_OPTION, `subnet ${String(subnet)} refused`)
  }
})

test("a by function on canonicalIp partitions callers exactly as the 'ip' part", async (t) => {
  const byIp = compiled('ip')
  const byFunction = compiled((request: FastifyRequest) => canonicalIp(request.ip))
  const ipKey = (ip: string) => byIp.resolve(requestFrom(ip)) as string
  const fnKey = (ip: string) => byFunction.resolve(requestFrom(ip)) as string
  for (const a of ADDRESSES) {
    for (const b of ADDRESSES) {
      t.equal(fnKey(a) === fnKey(b), ipKey(a) === ipKey(b), `${a} ~ ${b}: same bucket under both, or under neither`)
    }
  }
  t.equal(ipKey('::ffff:1.2.3.4'), ipKey('1.2.3.4'), 'IPv4-mapped is its IPv4')
  t.equal(ipKey('2001:db8:1:2::1'), ipKey('2001:db8:1:2:ffff::9'), 'one /64, one bucket')
  t.equal(ipKey('2001:db8:1:2::1'), 'ip=2001:db8:1:2::/64', "the 'ip' part keys on exactly what canonicalIp returns")
})

test('through the plugin: a route keyed by canonicalIp refuses the same requests as a route keyed by ip', async (t) => {
  const app = await buildApp({ store: 'memory' })
  t.teardown(async () => { await app.close() })
  app.get('/ip', { config: { rateLimit: { limit: 2, window: '1m', by: 'ip' } } }, async () => 'ok')
  app.get('/fn', { config: { rateLimit: { limit: 2, window: '1m', by: (request) => canonicalIp(request.ip) } } }, async () => 'ok')
  await app.ready()
  const sequence = ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2:ffff::3', '2001:db8:1:3::1', '::ffff:9.9.9.9', '9.9.9.9', '9.9.9.9']
  const statuses = async (url: string) => {
    const out: number[] = []
    for (const remoteAddress of sequence) out.push((await app.inject({ url, remoteAddress })).statusCode)
    return out
  }
  const byIp = await statuses('/ip')
  t.same(byIp, [200, 200, 429, 200, 200, 200, 429], 'one /64 shares a limit; a mapped address is its IPv4')
  t.same(await statuses('/fn'), byIp)
})
