import { STATUS_CODES } from 'node:http'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { FST_RRL_REDIS_UNAVAILABLE } from '../../errors.js'
import { constraintText, routeLabel } from '../../keys/constraints.js'
import { CONSOLE_STORE_WAIT_MS, MAX_CHANGE_TEXT_LENGTH, MAX_CONSOLE_BODY_BYTES, MAX_CONSOLE_TTL_MS, MAX_CONSOLE_VALUE_LENGTH, MAX_LIMIT } from '../../limits.js'
import type { RateLimitApi, RateLimitBanInput, RateLimitIdentity, RateLimitOverrideInput } from '../../types/index.js'
import type { ResolvedConsole } from './options.js'
import { settleWithin } from '../../util/await-within.js'
import { cookieToken, newToken, tokenCookie } from './security.js'

/*
 * The console's JSON API, under the page's prefix: GET `api/session` (the
 * page's token and settings), GET `api/state` (the fleet, bans, overrides and
 * audit trail, read together), and one POST per change. Bodies are checked by
 * JSON schemas; the API's own checks answer the rest (FST_RRL_INVALID_API_CALL
 * and the target errors become 400 and 404 with their codes).
 */

const text = (maxLength: number): Record<string, unknown> => ({ type: 'string', minLength: 1, maxLength })
const value = text(MAX_CONSOLE_VALUE_LENGTH)
const reason = text(MAX_CHANGE_TEXT_LENGTH)
const ttl = { anyOf: [{ type: 'integer', minimum: 1000, maximum: MAX_CONSOLE_TTL_MS }, { type: 'string', enum: ['permanent'] }] }
/** A caller as the API names it: the values its `by` parts read (any of them). */
const identity = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: { ip: text(64), user: value, apiKey: value, tier: text(64) }
}

const BAN_BODY = {
  type: 'object',
  additionalProperties: false,
  required: ['identity', 'ttl', 'reason'],
  properties: {
    // Exactly one of them; keyHash: a caller from the top list (PictureCaller.hash).
    identity: {
      type: 'object',
      additionalProperties: false,
      minProperties: 1,
      maxProperties: 1,
      properties: { ip: text(64), user: value, apiKey: value, keyHash: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_-]+$' } }
    },
    target: value,
    ttl,
    statusCode: { type: 'integer', enum: [403, 429] },
    reason
  }
}
const OVERRIDE_BODY = {
  type: 'object',
  additionalProperties: false,
  required: ['target', 'limit', 'ttl', 'reason'],
  properties: { target: value, identity, limit: { type: 'integer', minimum: 1, maximum: MAX_LIMIT }, ttl, reason }
}
const RESET_BODY = {
  type: 'object',
  additionalProperties: false,
  required: ['target', 'identity', 'reason'],
  properties: { target: value, identity, reason }
}
const LIFT_BODY = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'reason'],
  properties: { id: value, reason }
}

/** An API call that reaches the store: a failure that is not one of the plugin's coded errors is the store's (503, with the client's message); a store that does not answer within CONSOLE_STORE_WAIT_MS is one too. */
async function stored<T> (call: () => Promise<T>): Promise<T> {
  try {
    return await settleWithin(call(), CONSOLE_STORE_WAIT_MS, () => new FST_RRL_REDIS_UNAVAILABLE(`no answer within ${CONSOLE_STORE_WAIT_MS} ms`))
  } catch (error) {
    const code = (error as FastifyError).code
    if (typeof code === 'string' && code.startsWith('FST_RRL_')) throw error
    throw new FST_RRL_REDIS_UNAVAILABLE((error as Error).message)
  }
}

/** What each failure of a console call answers: a coded 4xx for input, the store's 503, else a logged 500 without details. */
export function consoleErrors (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const code = error.code as string | undefined
  let status = error.statusCode ?? 500
  if (error.validation !== undefined) status = 400
  else if (code === 'FST_RRL_INVALID_API_CALL' || code === 'FST_RRL_AMBIGUOUS_TARGET') status = 400
  else if (code === 'FST_RRL_UNKNOWN_POLICY') status = 404
  if (status >= 500 && status !== 503) {
    request.log.error({ err: error }, 'rate limit console: a call failed')
    reply.code(500).send({ statusCode: 500, code: 'FST_RRL_CONSOLE_FAILED', error: 'Internal Server Error', message: 'The console call failed; see the server log' })
    return
  }
  if (status >= 500) request.log.warn({ err: error }, 'rate limit console: the store did not answer')
  reply.code(status).send({
    statusCode: status,
    code: code ?? (error.validation !== undefined ? 'FST_ERR_VALIDATION' : 'FST_RRL_CONSOLE_FAILED'),
    error: STATUS_CODES[status] ?? 'Error',
    message: error.message
  })
}

/** The targets the forms suggest: every route this instance limits but HEAD twins and the console's own (`own`: their URLs). */
function targets (api: RateLimitApi, own: ReadonlySet<string>): string[] {
  const found = new Set<string>()
  for (const summary of api.policies()) {
    if (summary.limit === false || summary.method === 'HEAD' || own.has(summary.url)) continue
    found.add(routeLabel(summary.method, summary.url, constraintText(summary.constraints)))
  }
  return [...found].sort()
}

/** Settles every part of a page read: a failed one is named in `problems`, the others still show. */
async function part<T> (name: string, read: () => Promise<T>, problems: string[]): Promise<T | null> {
  try {
    return await stored(read)
  } catch (error) {
    problems.push(`${name}: ${(error as Error).message}`)
    return null
  }
}

/** What the console's routes share: the API, the options, the route options that limit them, and how a change is logged. */
interface RouteParts {
  api: RateLimitApi
  options: ResolvedConsole
  limited: Record<string, unknown>
  actorOf: (request: FastifyRequest) => Promise<string>
  changed: (request: FastifyRequest, action: string, actor: string, subject: unknown) => void
}

/** Every console route is limited by the rate limit plugin: its onRoute reads the route's config under its configKey. */
export function limitedRoute (options: ResolvedConsole): Record<string, unknown> {
  return { config: { [options.configKey]: options.rateLimit } }
}

export function consoleRoutes (fastify: FastifyInstance, api: RateLimitApi, options: ResolvedConsole, cookiePath: string, own: ReadonlySet<string>): void {
  const limited = limitedRoute(options)
  const parts: RouteParts = {
    api,
    options,
    limited,
    actorOf: async (request) => await options.actor(request),
    changed: (request, action, actor, subject) => {
      request.log.info({ rateLimitConsole: { action, actor, subject } }, `rate limit console: ${action}`)
    }
  }

  fastify.get('/api/session', limited, async (request, reply) => {
    let token = cookieToken(request)
    if (token === undefined) {
      token = newToken()
      reply.header('set-cookie', tokenCookie(token, cookiePath, request.protocol === 'https'))
    }
    return { token, actor: await parts.actorOf(request), refreshMs: options.refreshMs, targets: targets(api, own) }
  })

  fastify.get('/api/state', limited, async () => {
    const problems: string[] = []
    const [fleet, bans, overrides, audit] = await Promise.all([
      part('fleet', async () => await api.fleet(), problems),
      part('bans', async () => await api.listBans(), problems),
      part('overrides', async () => await api.listOverrides(), problems),
      part('audit trail', async () => await api.auditTrail(options.audit), problems)
    ])
    // The instances' declared policies are long and the page shows the disagreements instead.
    const slim = fleet === null ? null : { ...fleet, instances: fleet.instances.map(({ policies: _, ...rest }) => rest) }
    return { fleet: slim, bans, overrides, audit, problems }
  })
  changeRoutes(fastify, parts)
}

/** One POST per change, each made as the app's actor, logged, and audited by the API. */
function changeRoutes (fastify: FastifyInstance, { api, limited, actorOf, changed }: RouteParts): void {
  const change = (body: Record<string, unknown>): Record<string, unknown> => ({ ...limited, bodyLimit: MAX_CONSOLE_BODY_BYTES, schema: { body } })

  fastify.post('/api/bans', change(BAN_BODY), async (request) => {
    const body = request.body as Omit<RateLimitBanInput, 'actor'>
    const actor = await actorOf(request)
    const ban = await stored(async () => await api.ban({ ...body, actor }))
    changed(request, 'ban', actor, ban.id)
    return ban
  })

  // Lifting a record by id: a ban, an override.
  const lift = (path: string, action: string, answer: string, remove: (id: string, change: { actor: string, reason: string }) => Promise<boolean>): void => {
    fastify.post(path, change(LIFT_BODY), async (request) => {
      const { id, reason: why } = request.body as { id: string, reason: string }
      const actor = await actorOf(request)
      const removed = await stored(async () => await remove(id, { actor, reason: why }))
      changed(request, action, actor, id)
      return { [answer]: removed }
    })
  }
  lift('/api/bans/lift', 'unban', 'lifted', api.unban)
  lift('/api/overrides/clear', 'clear override', 'cleared', api.clearOverride)

  fastify.post('/api/overrides', change(OVERRIDE_BODY), async (request) => {
    const body = request.body as Omit<RateLimitOverrideInput, 'actor'>
    const actor = await actorOf(request)
    const override = await stored(async () => await api.setOverride({ ...body, actor }))
    changed(request, 'override', actor, override.id)
    return override
  })

  fastify.post('/api/reset', change(RESET_BODY), async (request) => {
    const { target, identity: caller, reason: why } = request.body as { target: string, identity: RateLimitIdentity, reason: string }
    const actor = await actorOf(request)
    await stored(async () => { await api.reset(target, caller, { actor, reason: why }) })
    changed(request, 'reset', actor, target)
    return { reset: true }
  })
}
