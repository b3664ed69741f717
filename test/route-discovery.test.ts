/**
 * Route discovery by the router's rules (issue 48, defects 5 and 6), on the
 * newest Fastify 5 installed and on the oldest 5 minor the package supports
 * (the `fastify50` alias devDependency: fastify@5.0.0).
 *
 * Generated route tables: prefixes ('', '/', '/cN', '/cN/', nested), the
 * three prefixTrailingSlash modes on index routes, optional parameters,
 * wildcards, explicit HEAD routes and exposeHeadRoutes, `all`, host, version
 * and custom constraints, a case-insensitive router, ignoreTrailingSlash and
 * ignoreDuplicateSlashes, child contexts with and without `await`, the plugin
 * with and without `await`, routes and children before it. For each table:
 * ready() fails exactly when a route declared after the plugin lacks a limit;
 * a route declared before it answers the coded 500 and runs no handler; each
 * other request is charged to its own route's block (its name in
 * RateLimit-Policy, `r` counting down per declaration), or to none for
 * `rateLimit: false`. The memory store: what is checked is the Fastify side.
 */
import { test, type Test } from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance, type FastifyServerOptions, type InjectOptions, type RouteOptions } from 'fastify'
import Fastify50 from 'fastify50'
import rateLimit from '../lib/index.js'
import { watchWarnings } from './helpers/warnings.js'

type Factory = (options?: FastifyServerOptions) => FastifyInstance

interface Variant {
  name: string
  create: Factory
  /** Fastify 5.12 reads router options from `routerOptions` (the top-level form is FSTDEP022); 5.0 only from the top level. */
  routerOptions: boolean
}

const VARIANTS: Variant[] = [
  { name: `fastify ${Fastify().version}`, create: Fastify as Factory, routerOptions: true },
  { name: `fastify ${(Fastify50 as unknown as Factory)().version}`, create: Fastify50 as unknown as Factory, routerOptions: false }
]

const LIMIT = 50

type Shape = 'static' | 'param' | 'optional' | 'wildcard' | 'index'
type Method = 'GET' | 'POST' | 'HEAD' | 'ALL'
type Constraint = 'none' | 'host' | 'version' | 'tenant'
type Trailing = 'both' | 'slash' | 'no-slash'
interface RouteSpec { shape: Shape, method: Method, constraint: Constraint, limit: 'block' | 'false' | 'none', trailing: Trailing }
interface ChildSpec { prefix: '' | '/' | 'named' | 'named/', await: boolean, routes: RouteSpec[], nested: RouteSpec[] | null }
type Step = { kind: 'route', route: RouteSpec } | { kind: 'child', child: ChildSpec } | { kind: 'plugin', await: boolean }
interface Table { steps: Step[], exposeHeadRoutes: boolean, ignoreTrailingSlash: boolean, ignoreDuplicateSlashes: boolean, caseSensitive: boolean }

const routeArb = (index: boolean): fc.Arbitrary<RouteSpec> => fc.record({
  shape: index ? fc.constant<Shape>('index') : fc.constantFrom<Shape>('static', 'param', 'optional', 'wildcard'),
  method: fc.constantFrom<Method>('GET', 'GET', 'POST', 'HEAD', 'ALL'),
  constraint: fc.constantFrom<Constraint>('none', 'none', 'none', 'host', 'version', 'tenant'),
  limit: fc.constantFrom<RouteSpec['limit']>(...Array<'block'>(30).fill('block'), 'false', 'false', 'none'),
  trailing: fc.constantFrom<Trailing>('both', 'slash', 'no-slash')
})

const childArb: fc.Arbitrary<ChildSpec> = fc.record({
  prefix: fc.constantFrom<ChildSpec['prefix']>('', '/', 'named', 'named', 'named/'),
  await: fc.boolean(),
  routes: fc.array(routeArb(false), { maxLength: 3 }),
  index: fc.option(routeArb(true), { nil: undefined }),
  nested: fc.option(fc.array(routeArb(false), { minLength: 1, maxLength: 2 }), { nil: null })
}).map(({ index, ...child }) => ({
  ...child,
  // An index route only under a prefix of its own: '' and '/' would share the root's.
  routes: index !== undefined && child.prefix.startsWith('named') ? [index, ...child.routes] : child.routes
}))

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: routeArb(false).map((route) => ({ kind: 'route' as const, route })) },
  { weight: 2, arbitrary: childArb.map((child) => ({ kind: 'child' as const, child })) }
)

const tableArb: fc.Arbitrary<Table> = fc.record({
  before: fc.array(stepArb, { maxLength: 2 }),
  pluginAwait: fc.boolean(),
  after: fc.array(stepArb, { minLength: 1, maxLength: 5 }),
  exposeHeadRoutes: fc.boolean(),
  ignoreTrailingSlash: fc.boolean(),
  ignoreDuplicateSlashes: fc.boolean(),
  caseSensitive: fc.boolean()
}).map(({ before, pluginAwait, after, ...options }) => ({ steps: [...before, { kind: 'plugin', await: pluginAwait }, ...after], ...options }))

/** What a declared route should do, filled in while the table is built. */
interface Declared {
  id: number
  spec: RouteSpec
  /** Whether the plugin's onRoute hook exists when the route is declared. */
  seen: boolean
  /** The URL onRoute announced (read by the test's own hook). */
  url?: string
}

const PATHS: Record<Exclude<Shape, 'index'>, (id: number) => string> = {
  static: (id) => `/s${id}`,
  param: (id) => `/p${id}/:id`,
  optional: (id) => `/o${id}/:id?`,
  wildcard: (id) => `/w${id}/*`
}

/** find-my-way's custom strategy: an `x-tenant` header. */
const tenantStrategy = {
  name: 'tenant',
  storage () {
    const handlers = new Map<string, unknown>()
    return { get: (value: string) => handlers.get(value) ?? null, set: (value: string, store: unknown) => { handlers.set(value, store) } }
  },
  deriveConstraint: (request: { headers: Record<string, string | string[] | undefined> }) => request.headers['x-tenant'],
  mustMatchWhenDerived: false,
  // Fastify 5.0's option schema requires it.
  validate () {}
}

function constraintOf (spec: RouteSpec, id: number): { constraints?: Record<string, string>, headers: Record<string, string> } {
  if (spec.constraint === 'host') return { constraints: { host: `h${id}.example` }, headers: { host: `h${id}.example` } }
  if (spec.constraint === 'version') return { constraints: { version: `1.${id}.0` }, headers: { 'accept-version': `1.${id}.x` } }
  if (spec.constraint === 'tenant') return { constraints: { tenant: `t${id}` }, headers: { 'x-tenant': `t${id}` } }
  return { headers: {} }
}

class Builder {
  readonly declared: Declared[] = []
  readonly served = new Map<number, number>()
  pluginRegistered = false
  pluginLoaded = false

  constructor (readonly table: Table) {}

  declare (scope: FastifyInstance, spec: RouteSpec, seen: boolean): void {
    const id = this.declared.length
    this.declared.push({ id, spec, seen })
    const path = spec.shape === 'index' ? '/' : PATHS[spec.shape](id)
    const rateLimitConfig = spec.limit === 'block' ? { limit: LIMIT, window: '1h', name: `b${id}` } : spec.limit === 'false' ? false : undefined
    const config = { rid: id, ...(rateLimitConfig === undefined ? {} : { rateLimit: rateLimitConfig }) }
    const handler = async (): Promise<string> => {
      this.served.set(id, (this.served.get(id) ?? 0) + 1)
      return 'ok'
    }
    const { constraints } = constraintOf(spec, id)
    const options = {
      config,
      ...(constraints === undefined ? {} : { constraints }),
      ...(spec.shape === 'index' ? { prefixTrailingSlash: spec.trailing } : {})
    } as Omit<RouteOptions, 'method' | 'url' | 'handler'>
    if (spec.method === 'ALL') scope.all(path, options, handler)
    else scope.route({ ...options, method: spec.method, url: path, handler })
  }

  async child (scope: FastifyInstance, child: ChildSpec, index: number): Promise<void> {
    const seen = this.pluginRegistered
    const prefix = child.prefix === 'named' ? `/c${index}` : child.prefix === 'named/' ? `/c${index}/` : child.prefix
    const plugin = async (c: FastifyInstance): Promise<void> => {
      for (const spec of child.routes) this.declare(c, spec, seen)
      if (child.nested !== null) {
        const nested = child.nested
        await c.register(async (n) => { for (const spec of nested) this.declare(n, spec, seen) }, { prefix: `/n${index}` })
      }
    }
    if (child.await) {
      await scope.register(plugin, { prefix })
      // Awaiting a registration loads everything queued before it, the plugin included.
      if (this.pluginRegistered) this.pluginLoaded = true
    } else {
      scope.register(plugin, { prefix })
    }
  }

  async build (variant: Variant): Promise<FastifyInstance> {
    const { table } = this
    const router = { ignoreTrailingSlash: table.ignoreTrailingSlash, ignoreDuplicateSlashes: table.ignoreDuplicateSlashes, caseSensitive: table.caseSensitive, constraints: { tenant: tenantStrategy } }
    const options = { exposeHeadRoutes: table.exposeHeadRoutes, ...(variant.routerOptions ? { routerOptions: router } : router) } as FastifyServerOptions
    const app = variant.create(options)
    // The test's own record of what onRoute announced (public API, every context below the root).
    app.addHook('onRoute', (route) => {
      const id = (route.config as { rid?: number } | undefined)?.rid
      const entry = id === undefined ? undefined : this.declared[id]
      if (entry !== undefined && entry.url === undefined) entry.url = route.url
    })
    let children = 0
    for (const step of table.steps) {
      if (step.kind === 'route') this.declare(app, step.route, this.pluginLoaded)
      else if (step.kind === 'child') await this.child(app, step.child, children++)
      else {
        this.pluginRegistered = true
        if (step.await) {
          await app.register(rateLimit, { store: 'memory' })
          this.pluginLoaded = true
        } else {
          app.register(rateLimit, { store: 'memory' })
        }
      }
    }
    return app
  }
}

/** The requests that reach a declared route (each of them routed to it by the router's rules). */
function requestsFor (entry: Declared, table: Table): InjectOptions[] {
  const { spec, id } = entry
  const url = entry.url as string
  const headers = constraintOf(spec, id).headers
  const methods = spec.method === 'ALL' ? ['GET'] : spec.method === 'GET' && table.exposeHeadRoutes ? ['GET', 'HEAD'] : [spec.method]
  const forms: Array<[string, string[]]> = []
  if (spec.shape === 'index') {
    // route.js: a HEAD index route takes no prefixTrailingSlash; 'both' adds the other form unless
    // ignoreTrailingSlash (the router then strips it) or ignoreDuplicateSlashes under a prefix ending in '/'.
    const urls = [url]
    if (spec.trailing === 'both' && spec.method !== 'HEAD') urls.push(table.ignoreTrailingSlash && url.endsWith('/') ? url.slice(0, -1) : url + '/')
    const others = methods.filter((method) => method !== 'HEAD')
    for (const u of urls) forms.push([u, others])
    // A HEAD twin is declared with path '/' as a HEAD route, which a prefix ending in '/' takes as ''.
    // Each GET form gets its own HEAD twin, announced to onRoute with its own URL, which a prefix
    // ending in '/' takes as '' for path '/': the plugin keys each with its GET (register.ts keyUrl).
    if (methods.includes('HEAD')) for (const u of new Set(urls.map((u) => u.endsWith('//') ? u.slice(0, -1) : u))) forms.push([u, ['HEAD']])
  } else {
    const first = spec.shape === 'param'
      ? url.replace(':id', `x${id}`)
      : spec.shape === 'optional' ? url.replace('/:id?', '') : spec.shape === 'wildcard' ? url.replace('*', 'a/b') : url
    forms.push([first, methods])
    if (spec.shape === 'optional') forms.push([url.replace(':id?', `v${id}`), methods])
    // The router's own equivalences.
    if (table.ignoreTrailingSlash) forms.push([first + '/', methods])
    if (table.ignoreDuplicateSlashes) forms.push(['/' + first, methods])
    if (!table.caseSensitive) forms.push([first.toUpperCase(), methods])
  }
  return forms.flatMap(([u, ms]) => ms.map((method) => ({ method: method as 'GET', url: u, headers })))
}

const describe = (table: Table, declared: Declared[]): string => JSON.stringify({ ...table, declared: declared.map(({ id, url, seen, spec }) => ({ id, url, seen, ...spec })) })

/** One table on one Fastify: builds, starts and checks it; returns a failure text or undefined. */
async function checkTable (variant: Variant, table: Table): Promise<string | undefined> {
  const builder = new Builder(table)
  const app = await builder.build(variant)
  try {
    const missing = builder.declared.filter((entry) => entry.seen && entry.spec.limit === 'none')
    const failed = await app.ready().then(() => undefined, (error: Error & { code?: string }) => error)
    if (missing.length > 0) {
      if (failed?.code !== 'FST_RRL_MISSING_LIMIT') return `ready() should fail with FST_RRL_MISSING_LIMIT, got ${String(failed?.code ?? 'success')}`
      for (const entry of missing) if (!failed.message.includes(` ${entry.url as string}`)) return `MISSING_LIMIT does not name ${entry.url as string}: ${failed.message}`
      return undefined
    }
    if (failed !== undefined) return `ready() failed: ${failed.message}`
    for (const entry of builder.declared) {
      let charged = 0
      for (const request of requestsFor(entry, table)) {
        const reply = await app.inject(request)
        const label = `#${entry.id} ${request.method as string} ${request.url as string}`
        if (!entry.seen) {
          if (reply.statusCode !== 500) return `${label}: declared before the plugin, answered ${reply.statusCode}`
          if (request.method !== 'HEAD' && (JSON.parse(reply.body) as { code?: string }).code !== 'FST_RRL_ROUTE_NOT_SEEN') return `${label}: 500 without the code`
          continue
        }
        if (reply.statusCode !== 200) return `${label}: answered ${reply.statusCode}`
        const policy = reply.headers['ratelimit-policy']
        if (entry.spec.limit === 'false') {
          if (policy !== undefined) return `${label}: rateLimit false, yet limited (${String(policy)})`
          continue
        }
        if (policy !== `"b${entry.id}";q=${LIMIT};w=3600`) return `${label}: charged to ${String(policy)}`
        charged++
        if (!String(reply.headers.ratelimit).startsWith(`"b${entry.id}";r=${LIMIT - charged};t=`)) return `${label}: request ${charged} of its block, RateLimit ${String(reply.headers.ratelimit)}`
      }
      if (!entry.seen && builder.served.has(entry.id)) return `#${entry.id}: a refused route ran its handler`
    }
    const unknown = await app.inject('/no-such-route')
    if (unknown.statusCode !== 404) return `a 404 answered ${unknown.statusCode}`
    return undefined
  } finally {
    await app.close()
    // describe() reads the URLs onRoute announced: kept for the failure text.
    lastTable = describe(table, builder.declared)
  }
}

let lastTable = ''

test('generated route tables: ready() fails exactly for a limitless route the plugin saw, no route runs unlimited, each request charges its own block', async (t) => {
  const deprecations = watchWarnings(t, { code: 'FSTDEP022', emitted: false })
  const runs = Number(process.env.ROUTE_TABLE_RUNS ?? 60)
  let tables = 0
  await fc.assert(fc.asyncProperty(tableArb, async (table) => {
    for (const variant of VARIANTS) {
      const failure = await checkTable(variant, table)
      if (failure !== undefined) throw new Error(`${variant.name}: ${failure}\n${lastTable}`)
    }
    tables++
  }), { numRuns: runs })
  t.equal(tables, runs, `${runs} tables on ${VARIANTS.map((v) => v.name).join(' and ')}`)
  t.equal(deprecations.length, 0, 'each Fastify got the router options in the form it reads')
})

for (const variant of VARIANTS) {
  test(`${variant.name}: the reviewer's reproductions`, async (t: Test) => {
    const limited = { config: { rateLimit: { limit: 5, window: '1m' } } }
    const app = variant.create()
    t.teardown(async () => { await app.close() })
    let early = 0
    app.post('/early', limited, async () => { early++; return 'early' })
    await app.register(rateLimit, { store: 'memory' })
    await app.register(async (c) => {
      c.get('/', limited, async () => 'index')
      c.post('/', limited, async () => 'posted')
    }, { prefix: '/api' })
    app.get('/o/:id?', limited, async () => 'optional')
    await app.ready()
    const policy = async (method: 'GET' | 'POST', url: string): Promise<string | undefined> => {
      const reply = await app.inject({ method, url })
      t.equal(reply.statusCode, 200, `${method} ${url}`)
      // The charge, not the window's clock: `t` depends on the current time.
      return String(reply.headers.ratelimit).replace(/;t=\d+$/, '')
    }
    t.same([await policy('GET', '/api'), await policy('GET', '/api/')], ['"get-api";r=4', '"get-api";r=3'], 'a prefixed index route starts; /api and /api/ are one route, one block')
    t.equal(await policy('POST', '/api/'), '"post-api";r=4', 'its POST too')
    const head = await app.inject({ method: 'HEAD', url: '/api/' })
    t.equal(String(head.headers.ratelimit).replace(/;t=\d+$/, ''), '"get-api";r=2', 'HEAD /api/ (its own HEAD twin) shares the GET\'s bucket')
    t.same([await policy('GET', '/o'), await policy('GET', '/o/1')], ['"get-o-id-32f77254";r=4', '"get-o-id-32f77254";r=3'], 'an optional parameter starts: the router\'s two entries, one block')
    const refused = await app.inject({ method: 'POST', url: '/early' })
    t.equal(refused.statusCode, 500, 'a route declared before the plugin is refused while ready() resolved')
    t.equal(JSON.parse(refused.body).code, 'FST_RRL_ROUTE_NOT_SEEN')
    t.equal(early, 0, 'its handler never ran')
  })
}

test('two registrations (configKeys) each mark what they saw: a route only the first saw is refused by the second', async (t) => {
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateLimit, { store: 'memory' })
  app.get('/between', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'between')
  await app.register(rateLimit, { store: 'memory', configKey: 'quota', defaultLimit: { limit: 9, window: '1m', name: 'quota' } })
  app.get('/both', { config: { rateLimit: { limit: 5, window: '1m', name: 'own' } } }, async () => 'both')
  await app.ready()
  const between = await app.inject('/between')
  t.equal(between.statusCode, 500, 'declared before the second registration: refused by its guard')
  t.equal(JSON.parse(between.body).code, 'FST_RRL_ROUTE_NOT_SEEN')
  const both = await app.inject('/both')
  t.equal(both.statusCode, 200)
  t.match(both.headers['ratelimit-policy'], /"quota";q=9;w=60/, 'limited by the second (its headers written last)')
  const statuses = [both.statusCode]
  for (let i = 0; i < 5; i++) statuses.push((await app.inject('/both')).statusCode)
  t.same(statuses, [200, 200, 200, 200, 200, 429], 'and by the first: its block of 5 refuses the sixth')
})

test('the guard and its neighbours: 404s go to the notFound limit; an onRoute hook that drops the mark gets a refusal, not an unlimited route', async (t) => {
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  app.get('/early', async () => 'early')
  await app.register(rateLimit, { store: 'memory', notFound: { limit: 2, window: '1m' } })
  // Registered after the plugin's own: runs after it, and replaces config without its other keys.
  app.addHook('onRoute', (route) => { if (route.url === '/dropped') route.config = { rateLimit: { limit: 5, window: '1m' } } })
  app.get('/dropped', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'dropped')
  await app.ready()
  const missing = [await app.inject('/nope'), await app.inject('/nope'), await app.inject('/nope')]
  t.same(missing.map((reply) => reply.statusCode), [404, 404, 429], '404s are limited by notFound, never refused as unseen')
  t.equal(missing[0]?.headers['ratelimit-policy'], '"not-found";q=2;w=60')
  t.equal((await app.inject('/early')).statusCode, 500, 'declared before: refused')
  const dropped = await app.inject('/dropped')
  t.equal(dropped.statusCode, 500, 'its mark dropped by a later onRoute hook: refused (docs/routes.md says to spread route.config)')
  t.equal(JSON.parse(dropped.body).code, 'FST_RRL_ROUTE_NOT_SEEN')
})
