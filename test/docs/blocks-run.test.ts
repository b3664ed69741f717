/**
 * Every complete ```ts and ```js block of the documents runs as pasted:
 * against one private redis-server (`REDIS_URL`), listening where `PORT`
 * says (0 here: any free port), it starts, answers a request on a route it
 * declares, and stops, closing its Redis connections. A block that is a test
 * file (it imports `node:test`) runs in a child process, as `node` runs it,
 * and must pass. The README's Quick Start is also held to the limits it states.
 *
 * The other blocks run in this process, one after another, so the docs cost
 * one process start and not one per block: each is imported (that runs it);
 * the `fastify.initialization` diagnostics channel hands over every Fastify
 * instance it creates, with an `onRoute` hook that lists its routes. A
 * block's console output is collected (stderr must stay empty) and
 * `process.exit` is refused while it runs.
 */
import { test, type Test } from 'tap'
import diagnostics from 'node:diagnostics_channel'
import { once } from 'node:events'
import { request as httpRequest } from 'node:http'
import { pathToFileURL } from 'node:url'
import type { FastifyInstance, RouteOptions } from 'fastify'
import { Redis } from 'ioredis'
import { blockModule, codeBlocks, entry, extensionOf, root, within, type Block } from '../helpers/doc-blocks.js'
import { spawnOwned } from '../helpers/processes.js'
import { startRedisServer } from '../helpers/redis.js'
import { waitFor } from '../helpers/topologies.js'

const complete = codeBlocks().filter((block) => block.excerptOf === undefined)
/** What a block may read besides REDIS_URL and PORT (named in the prose beside it). */
const BLOCK_ENV = { JWT_SECRET: 'a-secret-for-the-docs-test', INTERNAL_TOKEN: 'docs-internal' }

const apps: Array<{ app: FastifyInstance, routes: RouteOptions[] }> = []
diagnostics.subscribe('fastify.initialization', (message) => {
  const { fastify } = message as { fastify: FastifyInstance }
  const routes: RouteOptions[] = []
  fastify.addHook('onRoute', (route) => { routes.push(route) })
  apps.push({ app: fastify, routes })
})

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: string }

/** One request to the first GET route the app declares (else its first POST, with `{}`), over HTTP. */
async function ask (app: FastifyInstance, routes: RouteOptions[]): Promise<Answer & { route: string }> {
  const methods = (route: RouteOptions): string[] => [route.method].flat()
  const route = routes.find((r) => methods(r).includes('GET') && r.url !== '*') ?? routes.find((r) => methods(r).includes('POST'))
  if (route === undefined) throw new Error(`no GET or POST route among ${routes.map((r) => `${methods(r).join(',')} ${r.url}`).join('; ')}`)
  const method = methods(route).includes('GET') ? 'GET' : 'POST'
  const path = route.url.replace(/:\w+/g, 'docs')
  const host = (route.constraints as { host?: unknown } | undefined)?.host
  const { address, port } = app.addresses()[0] as { address: string, port: number }
  const headers: Record<string, string> = typeof host === 'string' ? { host } : {}
  if (method === 'POST') headers['content-type'] = 'application/json'
  const req = httpRequest({ host: address, port, path, method, headers })
  req.end(method === 'POST' ? '{}' : undefined)
  const [res] = await once(req, 'response') as [import('node:http').IncomingMessage]
  let body = ''
  res.on('data', (chunk: Buffer) => { body += chunk.toString() })
  await once(res, 'end')
  return { status: res.statusCode ?? 0, headers: res.headers, body, route: `${method} ${path}` }
}

/** Runs `fn` with console output collected and process.exit refused. */
async function captured (fn: () => Promise<void>): Promise<{ out: string[], err: string[], exits: unknown[] }> {
  const saved = { log: console.log, info: console.info, warn: console.warn, error: console.error, exit: process.exit }
  const out: string[] = []
  const err: string[] = []
  const exits: unknown[] = []
  const text = (args: unknown[]): string => args.map((arg) => typeof arg === 'string' ? arg : JSON.stringify(arg) ?? String(arg)).join(' ')
  console.log = console.info = (...args: unknown[]) => { out.push(text(args)) }
  console.warn = console.error = (...args: unknown[]) => { err.push(text(args)) }
  process.exit = ((code?: number) => { exits.push(code); throw new Error(`process.exit(${String(code)})`) }) as typeof process.exit
  try {
    await fn()
  } finally {
    Object.assign(console, { log: saved.log, info: saved.info, warn: saved.warn, error: saved.error })
    process.exit = saved.exit
  }
  return { out, err, exits }
}

/**
 * Under tsx, `require()` of lib/ would compile a second, CommonJS copy of it (a second or two
 * of CPU). Node's `require()` of an ES module returns that module's namespace, the one `import`
 * loads: a CommonJS block gets exactly that. (.ci/pack-check requires the built package for real.)
 */
const PACKAGE = Symbol.for('fastify-redis-rate-limit:docs-test')
async function asRun (block: Block): Promise<string> {
  if (extensionOf(block) !== 'cjs') return block.code
  ;(globalThis as Record<symbol, unknown>)[PACKAGE] = await import(pathToFileURL(entry).href)
  const code = block.code.replace(/require\('fastify-redis-rate-limit'\)/, `globalThis[Symbol.for('${PACKAGE.description as string}')]`)
  if (code === block.code) throw new Error('a CommonJS block that does not require the package')
  return code
}

/** The README's Quick Start states its limits: they hold, over HTTP, against the real Redis. */
async function quickStartLimits (t: Test, base: string): Promise<void> {
  const login = async (username: string): Promise<number> => {
    const res = await fetch(`${base}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password: 'x' }) })
    await res.arrayBuffer()
    return res.status
  }
  // The first decisions load the scripts into the fresh Redis; under load that may exceed the
  // Quick Start's 50 ms timeout once (a fail-closed 503). Warm up with another username.
  for (let i = 0; i < 20 && await login('warm-up') === 503; i++);
  const health = await fetch(`${base}/health`)
  t.equal(health.status, 200)
  t.equal(health.headers.get('ratelimit-policy'), null, '/health opted out')
  const order = await fetch(`${base}/orders/42`)
  t.equal(order.status, 200)
  t.equal(order.headers.get('ratelimit-policy'), '"get-orders-id";q=100;w=60')
  // Quiet machine: 200 ×5, then 429. A decision over the Quick Start's 50 ms timeout answers 503 on
  // this fail-closed route (it may or may not have been counted), so a loaded machine may show one.
  const logins: number[] = []
  while (logins.length < 12 && !logins.includes(429)) logins.push(await login('alice'))
  const admitted = logins.filter((status) => status === 200).length
  t.ok(logins.every((status) => status === 200 || status === 429 || status === 503), `only 200, 429 or 503: ${logins.join(' ')}`)
  t.equal(logins.at(-1), 429, 'refused once the quota is used up')
  t.ok(admitted >= 1 && admitted <= 5 && logins.length >= 6, `login: 5 per 15 minutes per IP and username (${logins.join(' ')})`)
}

type MoreChecks = (t: Test, base: string) => Promise<void>

async function runInProcess (t: Test, block: Block, label: string, admin: Redis, baseline: number, more?: MoreChecks): Promise<void> {
  const file = blockModule(label, await asRun(block), '', extensionOf(block))
  const started: typeof apps = []
  const answers: Array<Answer & { route: string, keys: number }> = []
  const output = await captured(async () => {
    try {
      await within(import(pathToFileURL(file).href), 15_000, 'the block to run')
      started.push(...apps.splice(0))
      if (started.length === 0) throw new Error('it creates no Fastify instance')
      const listening = (): boolean => started.every(({ app }) => app.server.listening)
      // A CommonJS block listens without a top-level await: wait for it; an ES module has listened by now.
      if (extensionOf(block) === 'cjs') await waitFor('the app to listen', listening, 10_000)
      else if (!listening()) throw new Error('it does not listen (end it with `await app.listen({ port: Number(process.env.PORT ?? 3000) })`)')
      for (const { app, routes } of started) {
        const answer = await within(ask(app, routes), 10_000, 'an answer')
        answers.push({ ...answer, keys: await admin.dbsize() })
        const { address, port } = app.addresses()[0] as { address: string, port: number }
        await more?.(t, `http://${address.includes(':') ? `[${address}]` : address}:${port}`)
      }
    } finally {
      for (const { app } of [...started, ...apps.splice(0)]) await within(app.close(), 10_000, 'app.close()')
    }
  })
  for (const line of output.out) t.comment(`stdout: ${line}`)
  t.same(output.err, [], 'nothing on stderr')
  t.same(output.exits, [], 'no process.exit')
  for (const answer of answers) {
    t.ok(answer.status < 500 && answer.status !== 404, `${answer.route} answered ${answer.status}`, { body: answer.body.slice(0, 500) })
    if (answer.headers['ratelimit-policy'] !== undefined && !/store: 'memory'/.test(block.code)) {
      t.ok(answer.keys > 0, 'decided in Redis (a key written), not failed open', { headers: answer.headers, body: answer.body.slice(0, 500) })
    }
  }
  // Stopped: every connection it opened to Redis is closed (its client's onClose, or @fastify/redis's).
  await waitFor('its Redis connections to close', async () => (await admin.client('LIST') as string).trim().split('\n').length <= baseline, 5000)
}

async function runAsTest (t: Test, block: Block, label: string, env: NodeJS.ProcessEnv): Promise<void> {
  const file = blockModule(label, block.code, '', extensionOf(block))
  const child = spawnOwned(process.execPath, ['--import', 'tsx', '--test-reporter=tap', file], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  t.teardown(() => { child.kill('SIGKILL') })
  const [code] = await within(once(child, 'exit'), 60_000, 'the test file to finish')
  const passed = Number(/^# pass (\d+)$/m.exec(output)?.[1] ?? 0)
  t.equal(code, 0, 'it passes')
  t.ok(passed >= 1 && /^# fail 0$/m.test(output), `${passed} tests passed:\n${output}`)
}

test('every complete block runs as pasted: starts, answers on a route it declares, stops', async (t) => {
  t.ok(complete.length >= 20, `${complete.length} complete blocks`)
  t.ok(complete.some((block) => extensionOf(block) === 'cjs'), 'a CommonJS one among them')
  const server = await startRedisServer()
  const admin = new Redis(server.url)
  t.teardown(async () => { admin.disconnect(); await server.stop() })
  const baseline = (await admin.client('LIST') as string).trim().split('\n').length
  const env = { ...BLOCK_ENV, REDIS_URL: server.url, PORT: '0' }
  const saved = Object.fromEntries(Object.keys(env).map((name) => [name, process.env[name]]))
  Object.assign(process.env, env)
  t.teardown(() => {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name]
      else process.env[name] = value
    }
  })
  const quickStart = complete.find((block) => block.lang === 'ts')
  t.ok(quickStart?.file === 'README.md' && /app\.post\('\/login'/.test(quickStart.code), 'the first ```ts block is the README\'s Quick Start')
  for (const block of complete) {
    const label = `${block.file.replace(/\W/g, '-')}-${block.line}`
    await t.test(`${block.file} block at line ${block.line}`, async (t) => {
      await admin.flushall()
      if (/from 'node:test'/.test(block.code)) await runAsTest(t, block, label, process.env)
      else await runInProcess(t, block, label, admin, baseline, block === quickStart ? quickStartLimits : undefined)
    })
  }
})
