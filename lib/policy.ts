import type { FastifyRequest } from 'fastify'
import { ALGORITHMS, MAX_LIMIT, MAX_SLIDING_LOG_LIMIT, type AlgorithmName, type BlockParams } from './algorithm-types.js'
import { parseWindow } from './duration.js'
import { FST_RRL_INVALID_BLOCK } from './errors.js'
import { compileIdentity, type CompiledIdentity, type IdentityContext } from './identity.js'
import { keyHead, keyTail, routeSegment } from './keys.js'
import type { FailurePolicy, RateLimitBlock } from './types.js'

/**
 * Everything a request needs, computed once when the route is added: the
 * per-request path only reads these fields.
 */
export interface CompiledPolicy {
  /** `GET /orders/:id`, for logs and errors. */
  route: string
  name: string
  algorithm: AlgorithmName
  params: BlockParams
  /** limit, windowMs, burst as script arguments. */
  scriptArgs: readonly [string, string, string]
  keyHead: string
  keyTail: string
  identity: CompiledIdentity
  cost: number | ((request: FastifyRequest) => number)
  onRedisError: FailurePolicy
  fromDefault: boolean
  by: string[]
  /** The `RateLimit-Policy` field value, e.g. `"orders";q=100;w=60`. */
  policyHeader: string
  /** The policy name as a Structured Fields string, e.g. `"orders"`. */
  nameItem: string
  /** Whether a 429 body may echo the request path (not when the identity comes from a path param). */
  echoPath: boolean
}

const BLOCK_FIELDS = new Set(['limit', 'window', 'algorithm', 'burst', 'by', 'cost', 'onRedisError', 'name'])
const SUFFIX: Record<AlgorithmName, string> = {
  'fixed-window': 'fw',
  'sliding-window': 'sw',
  'sliding-log': 'sl',
  'token-bucket': 'tb',
  gcra: 'gc'
}
const PRINTABLE_NAME = /^[\x20-\x7e]{1,64}$/

export interface CompileContext extends IdentityContext {
  prefix: string
  onRedisError: FailurePolicy
}

/** The HEAD route Fastify adds for a GET shares the GET's bucket, and so does an explicit HEAD. */
export function keyMethod (method: string | string[]): string {
  if (Array.isArray(method)) return [...new Set(method.map(keyMethod))].sort().join(',')
  const upper = method.toUpperCase()
  return upper === 'HEAD' ? 'GET' : upper
}

function defaultName (method: string, url: string): string {
  const slug = url.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-+|-+$/g, '')
  return `${method.toLowerCase().replace(/,/g, '-')}-${slug === '' ? 'root' : slug}`
}

/** A Structured Fields string: printable ASCII with `"` and `\` escaped. */
function sfString (value: string): string {
  return '"' + value.replace(/[\\"]/g, '\\$&') + '"'
}

function isCount (value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max
}

function describeBy (by: RateLimitBlock['by'], hasUser: boolean): string[] {
  if (by === undefined) return hasUser ? ['user', 'ip (when no user)'] : ['ip']
  return (Array.isArray(by) ? by : [by]).map((part) => typeof part === 'function' ? `function ${part.name || '(anonymous)'}` : part)
}

/**
 * Validates a route block and compiles it. Throws FST_RRL_INVALID_BLOCK naming
 * the route and the field: bad configuration fails startup, never a request.
 */
export function compilePolicy (block: unknown, method: string | string[], url: string, context: CompileContext, fromDefault: boolean): CompiledPolicy {
  const methodLabel = Array.isArray(method) ? method.join(',') : method
  const route = `${methodLabel} ${url}`
  const fail = (field: string, message: string): never => {
    throw new FST_RRL_INVALID_BLOCK(fromDefault ? `${route} (from defaultLimit)` : route, field, message)
  }
  if (block === null || typeof block !== 'object' || Array.isArray(block)) {
    return fail('rateLimit', Array.isArray(block)
      ? 'is an array; this version takes one block per route'
      : 'must be an object like { limit: 100, window: \'1m\' } or false')
  }
  const input = block as Record<string, unknown>
  for (const field of Object.keys(input)) {
    if (!BLOCK_FIELDS.has(field)) fail(field, `is not a rate limit field (known: ${[...BLOCK_FIELDS].join(', ')})`)
  }

  const algorithm = (input.algorithm ?? 'sliding-window') as AlgorithmName
  if (!ALGORITHMS.includes(algorithm)) fail('algorithm', `must be one of ${ALGORITHMS.join(', ')} (got ${JSON.stringify(input.algorithm)})`)

  const maxLimit = algorithm === 'sliding-log' ? MAX_SLIDING_LOG_LIMIT : MAX_LIMIT
  if (!isCount(input.limit, maxLimit)) fail('limit', `must be an integer from 1 to ${maxLimit}${algorithm === 'sliding-log' ? ' for sliding-log (one sorted-set entry per request)' : ''} (got ${String(input.limit)})`)
  const limit = input.limit as number

  const windowMs = parseWindow(input.window)
  if (typeof windowMs === 'string') return fail('window', windowMs)

  let burst = limit
  if (input.burst !== undefined) {
    if (algorithm !== 'token-bucket' && algorithm !== 'gcra') fail('burst', `only applies to token-bucket and gcra (algorithm is ${algorithm})`)
    if (!isCount(input.burst, MAX_LIMIT)) fail('burst', `must be an integer from 1 to ${MAX_LIMIT} (got ${String(input.burst)})`)
    burst = input.burst as number
  }
  const capacity = algorithm === 'token-bucket' || algorithm === 'gcra' ? burst : limit

  let cost: CompiledPolicy['cost'] = 1
  if (input.cost !== undefined) {
    if (typeof input.cost === 'function') cost = input.cost as (request: FastifyRequest) => number
    else if (isCount(input.cost, capacity)) cost = input.cost
    else fail('cost', `must be an integer from 1 to the capacity (${capacity}) or a function (got ${String(input.cost)})`)
  }

  const onRedisError = (input.onRedisError ?? context.onRedisError) as FailurePolicy
  if (onRedisError !== 'open' && onRedisError !== 'closed') fail('onRedisError', `must be 'open' or 'closed' (got ${JSON.stringify(input.onRedisError)})`)

  const method4key = keyMethod(method)
  const name = input.name ?? defaultName(method4key, url)
  if (typeof name !== 'string' || !PRINTABLE_NAME.test(name)) fail('name', `must be 1 to 64 printable ASCII characters (got ${JSON.stringify(input.name)})`)

  const identity = compileIdentity(input.by as RateLimitBlock['by'], context, route)
  if (typeof identity === 'string') return fail('by', identity)
  if (identity.usesParams) {
    for (const part of (Array.isArray(input.by) ? input.by : [input.by])) {
      if (typeof part === 'string' && part.startsWith('param:') && !routeHasParam(url, part.slice(6))) {
        fail('by', `uses ${JSON.stringify(part)} but the route has no :${part.slice(6)} parameter`)
      }
    }
  }

  const nameItem = sfString(name as string)
  return {
    route,
    name: name as string,
    algorithm,
    params: { limit, windowMs, burst },
    scriptArgs: [String(limit), String(windowMs), String(burst)],
    keyHead: keyHead(context.prefix, routeSegment(method4key, url)),
    keyTail: keyTail(SUFFIX[algorithm] + windowMs),
    identity,
    cost,
    onRedisError,
    fromDefault,
    by: describeBy(input.by as RateLimitBlock['by'], context.user !== undefined),
    policyHeader: `${nameItem};q=${limit};w=${Math.max(1, Math.ceil(windowMs / 1000))}`,
    nameItem,
    echoPath: !identity.usesParams
  }
}

function routeHasParam (url: string, name: string): boolean {
  // Fastify params: `/:id`, `/:id(^\\d+)`, `/:from-:to`, `/:file.:ext`.
  let at = url.indexOf(':' + name)
  while (at !== -1) {
    const next = url.charAt(at + name.length + 1)
    if (!/[A-Za-z0-9_]/.test(next)) return true
    at = url.indexOf(':' + name, at + 1)
  }
  return false
}
