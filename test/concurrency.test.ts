import { test } from 'tap'
import { request } from 'undici'
import type { FastifyInstance } from 'fastify'
import { ALGORITHMS } from '../lib/index.js'
import { buildApp } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * Two instances with their own Redis connections, one shared prefix: the
 * fleet. 200 concurrent requests from one identity over real sockets must
 * admit exactly the limit, because each decision is one atomic script.
 */
const LIMIT = 25
const REQUESTS = 200

async function instance (url: string, prefix: string): Promise<{ app: FastifyInstance, base: string, close: () => Promise<void> }> {
  const redis = createClient({ url } as never)
  // Atomicity is under test, not latency: a loaded 2-core CI machine may exceed the 50 ms default.
  const app = await buildApp({ redis, prefix, timeout: 5000, user: (req) => req.headers['x-user'] as string | undefined })
  for (const algorithm of ALGORITHMS) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: LIMIT, window: '1h', by: 'user' } } }, async () => 'ok')
  }
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, base, close: async () => { await app.close(); redis.disconnect() } }
}

test('two instances, 200 concurrent requests, limit 25: exactly 25 admitted, for every algorithm', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('cc')
  const fleet = [await instance(server.url, prefix), await instance(server.url, prefix)]
  const inspector = createClient(server)
  cleanUpPrefix(t, inspector, prefix, async () => { for (const member of fleet) await member.close() })

  for (const algorithm of ALGORITHMS) {
    const results = await Promise.all(Array.from({ length: REQUESTS }, async (_, i) => {
      const res = await request(`${(fleet[i % 2] as typeof fleet[0]).base}/${algorithm}`, { headers: { 'x-user': 'one-identity' } })
      await res.body.dump()
      return res.statusCode
    }))
    const admitted = results.filter((code) => code === 200).length
    const limited = results.filter((code) => code === 429).length
    t.equal(admitted, LIMIT, `${algorithm}: admitted`)
    t.equal(limited, REQUESTS - LIMIT, `${algorithm}: the rest got 429, none failed`)

    const [key] = await inspector.keys(`${prefix}:{GET:/${algorithm}|*`)
    t.ok(key, `${algorithm}: state key exists`)
    if (algorithm === 'sliding-log') {
      t.equal(await inspector.zcard(key as string), LIMIT, 'sliding-log holds one entry per admitted request')
    }
    // Whatever the representation, a further request is refused: the stored state agrees.
    const after = await request(`${(fleet[0] as typeof fleet[0]).base}/${algorithm}`, { headers: { 'x-user': 'one-identity' } })
    await after.body.dump()
    t.equal(after.statusCode, 429, `${algorithm}: state agrees after the burst`)
    // draft-10 §4.1.2: t is when one more unit frees, never later than Retry-After.
    t.equal(after.headers['ratelimit'], `"get-${algorithm}";r=0;t=${Number(after.headers['retry-after'])}`, 'r=0: one more unit frees at the retry of a one-unit request, so t = Retry-After')
  }
  for (const member of fleet) t.equal(member.app.rateLimit.stats().degraded, 0)
})
