import { test } from 'tap'
import { connect } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import { Client } from 'undici'
import rateLimit from '../lib/index.js'
import { TestClock } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * Hostile values in every field that feeds a key, over real HTTP connections
 * (inject skips the HTTP parser and header validation). Every reply must be a
 * valid 2xx or 429 with correct RateLimit fields and an enforced limit, or,
 * where Node's HTTP parser refuses the bytes before any plugin code runs, a
 * 400/431. Never a 500, and never the degraded (fail-open) path.
 */

const LIMIT = 2
const HOSTILE = ['{', '}', '{}', '}{', '{a}', 'a}x', '☃', 'x'.repeat(8192), 'a|b', 'u=x,ip=1.2.3.4', '%H', '"q"', '\\', 'k~1', ' lead and trail ']
const BIG = 'y'.repeat(8192)

interface Reply { status: number, headers: Record<string, string>, body: string }

let nextIp = 1
/** A fresh client address per case, so fallback buckets never mix cases. */
const freshIp = () => { const n = nextIp++; return `198.18.${n >> 8}.${n & 255}` }

async function raw (port: number, bytes: Buffer): Promise<Reply> {
  return await new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    socket.on('data', (chunk) => chunks.push(chunk))
    socket.on('error', reject)
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      const lines = text.slice(0, end).split('\r\n')
      const headers: Record<string, string> = {}
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(':')
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
      }
      resolve({ status: Number(lines[0]?.split(' ')[1]), headers, body: text.slice(end + 4) })
    })
    // No half-close: Node's server aborts a request whose client sent FIN before the reply.
    socket.write(bytes)
    socket.setTimeout(10_000, () => socket.destroy(new Error('no reply within 10 s')))
  })
}

function rawGet (path: string, headerLines: Array<string | Buffer>): Buffer {
  const parts: Buffer[] = [Buffer.from(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n`, 'latin1')]
  for (const line of headerLines) parts.push(typeof line === 'string' ? Buffer.from(line, 'latin1') : line, Buffer.from('\r\n'))
  parts.push(Buffer.from('\r\n'))
  return Buffer.concat(parts)
}

test('hostile identity values over real sockets', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  const prefix = uniquePrefix('hostile')
  const clock = new TestClock()
  const lines: Array<Record<string, unknown>> = []
  const app: FastifyInstance = Fastify({
    trustProxy: ['127.0.0.1'],
    routerOptions: { maxParamLength: 20_000 },
    logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
  })
  await app.register(rateLimit, {
    redis,
    prefix,
    clock: clock.read,
    timeout: 5000,
    user: (req) => req.headers['x-user'] as string | undefined,
    apiKey: (req) => req.headers['x-api-key'] as string | undefined
  })
  const block = (name: string, by: unknown) => ({ config: { rateLimit: { limit: LIMIT, window: '1m', name, by: by as never } } })
  const echo = async () => ({ ok: true })
  app.get('/h', block('h', 'header:x-tenant'), echo)
  app.get('/k', block('k', 'api-key'), echo)
  app.get('/u', block('u', 'user'), echo)
  app.get('/f', block('f', (req: { headers: Record<string, unknown> }) => req.headers['x-custom'] as string | undefined), echo)
  app.get('/ip', block('ip', 'ip'), echo)
  app.get('/p/:tenant', block('p', 'param:tenant'), echo)
  app.post('/login', block('login', ['ip', 'body:username']), echo)
  app.post('/b', block('b', 'body:username'), echo)
  const origin = await app.listen({ port: 0, host: '127.0.0.1' })
  const port = Number(new URL(origin).port)
  const client = new Client(origin, { pipelining: 1 })
  cleanUpPrefix(t, redis, prefix, async () => { await client.close(); await app.close() })

  const send = async (method: 'GET' | 'POST', path: string, headers: Record<string, string>, body?: string): Promise<Reply> => {
    const res = await client.request({ method, path, headers, body })
    const text = await res.body.text()
    return { status: res.statusCode, headers: res.headers as Record<string, string>, body: text }
  }

  /** Checks one reply of a sequence: the i-th request of one caller in one bucket. */
  const check = (reply: Reply, name: string, i: number, label: string, instance: string) => {
    const admitted = i < LIMIT
    t.equal(reply.status, admitted ? 200 : 429, `${label}: request ${i + 1} → ${admitted ? 200 : 429}`)
    t.equal(reply.headers['ratelimit-policy'], `"${name}";q=${LIMIT};w=60`, `${label}: RateLimit-Policy`)
    if (admitted) {
      t.match(reply.headers.ratelimit, new RegExp(`^"${name}";r=${LIMIT - i - 1};t=\\d+$`), `${label}: RateLimit`)
    } else {
      const retry = Number(reply.headers['retry-after'])
      t.ok(Number.isInteger(retry) && retry >= 1 && retry <= 120, `${label}: Retry-After ${reply.headers['retry-after']}`)
      // t is when one more unit frees (draft-10 §4.1.2); with r=0 and a one-unit request that is the retry: t = Retry-After.
      t.equal(reply.headers.ratelimit, `"${name}";r=0;t=${retry}`, `${label}: RateLimit on the 429`)
      t.match(reply.headers['content-type'], /^application\/problem\+json/)
      const problem = JSON.parse(reply.body)
      t.same(Object.keys(problem).sort(), ['detail', 'instance', 'status', 'title', 'type', 'violated-policies'])
      t.same({ status: problem.status, instance: problem.instance, violated: problem['violated-policies'] }, { status: 429, instance, violated: [name] }, `${label}: problem body`)
    }
  }

  const sequence = async (label: string, name: string, instance: string, once: () => Promise<Reply>) => {
    for (let i = 0; i <= LIMIT; i++) check(await once(), name, i, label, instance)
  }

  const short = (value: string) => JSON.stringify(value.length > 20 ? `${value.slice(0, 8)}…(${value.length})` : value)

  await t.test('header, API key, user and custom-function values (undici)', async (t) => {
    for (const value of [...HOSTILE, BIG]) {
      if (/[^\x20-\x7e]/.test(value)) continue // non-ASCII goes over the raw socket below
      await sequence(`header ${short(value)}`, 'h', '/h', async () => await send('GET', '/h', { 'x-tenant': value, 'x-forwarded-for': '203.0.113.1' }))
      await sequence(`api key ${short(value)}`, 'k', '/k', async () => await send('GET', '/k', { 'x-api-key': value, 'x-forwarded-for': '203.0.113.1' }))
      await sequence(`user ${short(value)}`, 'u', '/u', async () => await send('GET', '/u', { 'x-user': value, 'x-forwarded-for': '203.0.113.1' }))
      await sequence(`custom ${short(value)}`, 'f', '/f', async () => await send('GET', '/f', { 'x-custom': value, 'x-forwarded-for': '203.0.113.1' }))
    }
  })

  await t.test('raw bytes undici refuses to send: UTF-8, CRLF attempts, NUL, bare CR/LF, obs-fold, oversize', async (t) => {
    for (const [header, path, name] of [['X-Tenant', '/h', 'h'], ['X-Api-Key', '/k', 'k'], ['X-User', '/u', 'u'], ['X-Custom', '/f', 'f']] as const) {
      const snowman = Buffer.concat([Buffer.from(`${header}: `), Buffer.from('☃ {☃}', 'utf8')])
      await sequence(`${header} UTF-8 bytes`, name, path, async () => await raw(port, rawGet(path, [snowman, 'X-Forwarded-For: 203.0.113.2'])))
      // "Injecting" a header only adds a header the client could have sent anyway.
      await sequence(`${header} CRLF attempt`, name, path, async () => await raw(port, rawGet(path, [`${header}: a\r\nX-Forwarded-For: 10.0.0.1`, 'X-Forwarded-For: 203.0.113.3'])))
      await sequence(`${header} 8 KB + braces`, name, path, async () => await raw(port, rawGet(path, [`${header}: {${'z'.repeat(8190)}}`, 'X-Forwarded-For: 203.0.113.4'])))
      const before = app.rateLimit.stats()
      for (const [label, bytes] of [
        ['NUL', `${header}: a\0b`],
        ['bare CR', `${header}: a\rb`],
        ['bare LF', `${header}: a\nb`],
        ['obs-fold', `${header}: a\r\n b`],
        ['20 KB', `${header}: ${'w'.repeat(20_000)}`]
      ] as const) {
        const reply = await raw(port, rawGet(path, [bytes, 'X-Forwarded-For: 203.0.113.5']))
        t.ok(reply.status === 400 || reply.status === 431, `${header} ${label}: refused by Node's HTTP parser (${reply.status}), never a 500`)
      }
      t.same(app.rateLimit.stats(), before, 'parser-refused requests never reach the limiter')
    }
  })

  await t.test('path params: braces, CRLF, NUL, U+2603 and 8 KB, percent-encoded and raw', async (t) => {
    for (const value of [...HOSTILE, '\r\n', '\0', '\r\nX-Evil: 1', BIG]) {
      const path = `/p/${encodeURIComponent(value)}`
      await sequence(`param ${short(value)}`, 'p', '/p/:tenant', async () => await send('GET', path, { 'x-forwarded-for': '203.0.113.6' }))
    }
    await sequence('param raw braces', 'p', '/p/:tenant', async () => await raw(port, rawGet('/p/{a}}{', ['X-Forwarded-For: 203.0.113.6'])))
    const utf8Path = Buffer.concat([Buffer.from('GET /p/'), Buffer.from('☃', 'utf8'), Buffer.from(' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')])
    const reply = await raw(port, utf8Path)
    t.ok(reply.status === 400 || reply.status === 200, `raw UTF-8 bytes in the request line: ${reply.status}, never a 500`)
  })

  await t.test('X-Forwarded-For behind the trusted proxy: valid forms are keyed, junk pools at the proxy address', async (t) => {
    for (const value of ['203.0.113.77', '::ffff:203.0.113.78', '10.1.1.1, 203.0.113.79', '{evil}, 203.0.113.80']) {
      await sequence(`XFF ${short(value)}`, 'ip', '/ip', async () => await send('GET', '/ip', { 'x-forwarded-for': value }))
    }
    // Junk as the client address: every such request falls back to the socket address (127.0.0.1), one bucket.
    const junk = ['{evil}', '1.2.3.4:5555', 'not-an-ip', 'x'.repeat(8192), '203.0.113.9, {', '}{', 'a|b', '1.2.3.4\\', ' , ']
    const codes: number[] = []
    for (const value of junk) {
      const reply = await send('GET', '/ip', { 'x-forwarded-for': value })
      codes.push(reply.status)
      t.match(reply.headers.ratelimit, /^"ip";r=\d+;t=\d+$/, `XFF ${short(value)}: RateLimit`)
    }
    const rawSnowman = await raw(port, rawGet('/ip', [Buffer.concat([Buffer.from('X-Forwarded-For: '), Buffer.from('☃', 'utf8')])]))
    codes.push(rawSnowman.status)
    t.equal(codes.filter((code) => code === 200).length, LIMIT, 'exactly the limit admitted across all junk values')
    t.equal(codes.filter((code) => code === 429).length, junk.length + 1 - LIMIT)
  })

  await t.test('JSON bodies: hostile usernames, and bodies that are not an object', async (t) => {
    for (const path of ['/login', '/b']) {
      const name = path === '/login' ? 'login' : 'b'
      for (const value of [...HOSTILE, '\r\n', '\0', BIG]) {
        const ip = freshIp()
        await sequence(`${path} username ${short(value)}`, name, path, async () => await send('POST', path, { 'content-type': 'application/json', 'x-forwarded-for': ip }, JSON.stringify({ username: value })))
      }
      // Not a usable field: falls back to the caller's IP (its own bucket), never an error.
      for (const body of ['[1,2]', 'null', '"username"', '42', 'true', '{"username":{"$ne":1}}', '{"username":""}', '{"username":null}', '{"user":"a"}', '{"username":["a",{"b":1}]}']) {
        const ip = freshIp()
        await sequence(`${path} body ${body}`, name, path, async () => await send('POST', path, { 'content-type': 'application/json', 'x-forwarded-for': ip }, body))
      }
      {
        const ip = freshIp()
        await sequence(`${path} text/plain body`, name, path, async () => await send('POST', path, { 'content-type': 'text/plain', 'x-forwarded-for': ip }, 'username=alice'))
      }
      // Refused by Fastify's body parsing before the limiter (preValidation) runs.
      for (const [body, type, expected] of [
        ['{"username":', 'application/json', 400],
        ['{"__proto__":{"username":"x"}}', 'application/json', 400],
        ['username=alice', 'application/x-www-form-urlencoded', 415]
      ] as const) {
        const reply = await send('POST', path, { 'content-type': type, 'x-forwarded-for': freshIp() }, body)
        t.equal(reply.status, expected, `${path} ${type} ${body}: ${expected} from Fastify's parser`)
      }
    }
  })

  t.equal(app.rateLimit.stats().degraded, 0, 'nothing an attacker sent reached the fail-open path')
  t.equal(lines.filter((line) => (line.level as number) >= 50).length, 0, 'no error-level log line (no 500)')
  t.notOk(lines.some((line) => (line.res as { statusCode?: number } | undefined)?.statusCode === 500), 'no 500 was logged')
  // Every key written: bounded and with a single, client-free hash tag.
  const keys = await redis.keys(`${prefix}:*`)
  t.ok(keys.length > 100, `${keys.length} keys written`)
  for (const key of keys) {
    if (Buffer.byteLength(key) > 128 || /[{}]/.test(key.slice(key.indexOf('{') + 1, key.lastIndexOf('}')))) t.fail(`bad key ${key}`)
  }
  t.pass('every key ≤ 128 bytes with no client brace inside its hash tag')
})
