import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { compilePolicy, type CompileContext, type CompiledBlock } from '../policy/policy.js'
import { listPolicy, ownBlockNames, type Listing } from '../policy/summary.js'
import type { RateLimitBlock } from '../types/index.js'
import { FST_RRL_INVALID_OPTION } from '../errors.js'
import { createRouteHook, type RouteRuntime } from '../request/route-hook.js'

/** The key's route segment of every not-found request: no real route has this URL. */
const NOT_FOUND_ROUTE = { method: 'ANY', url: '(not-found)' } as const

/** What limiting the not-found handler needs: the `notFound` option and the plugin's shared state. */
export interface NotFoundLimit {
  fastify: FastifyInstance
  declared: RateLimitBlock | RateLimitBlock[]
  context: CompileContext
  globals: readonly CompiledBlock[]
  listing: Listing
  runtime: RouteRuntime
}

/**
 * `notFound`: the not-found handler of this context (Fastify runs a context's
 * hooks for its 404s) is limited by these blocks, every 404 sharing one bucket
 * per caller whatever its method and URL. The hook returns at once for
 * requests that matched a route (callback style: no promise for them).
 */
export function limitNotFound ({ fastify, declared, context, globals, listing, runtime }: NotFoundLimit): void {
  const named = Array.isArray(declared)
    ? declared.map((block, index) => ({ name: index === 0 ? 'not-found' : `not-found-${index}`, ...block }))
    : { name: 'not-found', ...declared }
  const { method, url } = NOT_FOUND_ROUTE
  const policy = compilePolicy(named, { method, url, source: 'declared' }, context, globals)
  // A 404 is answered at once: a slot would hold nothing, and its release would need a route.
  const slots = policy.blocks.find((block) => block.kind.holdsSlot && !block.global)
  if (slots !== undefined) {
    throw new FST_RRL_INVALID_OPTION('notFound', `has a concurrency block (${JSON.stringify(slots.name)}): limit not-found requests by rate (limit and window)`)
  }
  listPolicy(listing, { method, url }, policy, ownBlockNames(policy))
  const hook = createRouteHook(policy, runtime)
  fastify.addHook(policy.needsBody ? 'preValidation' : 'onRequest', function rateLimitNotFound (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    if (!request.is404) {
      done()
      return
    }
    hook(request, reply, done)
  })
}
