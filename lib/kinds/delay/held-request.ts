import type { FastifyReply, FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { CompiledPolicy } from '../../policy/policy.js'
import { endNow, type Ending } from '../../request/end-of-request.js'
import type { InputRuntime } from '../../request/inputs.js'
import type { Runtime } from '../../decide/evaluate.js'
import type { Refuse } from '../../reply/problem.js'
import { retryAfterSeconds } from '../../decide/decision-math.js'
import type { RateLimitDecision } from '../../types/index.js'
import type { Place } from './holds.js'

/*
 * A request admitted at a later turn (a block's `delay`): its headers are
 * written, and it waits on this instance (kinds/delay/holds.ts) until the turn,
 * then goes on to its handler. While it waits its Ending is `held`: if the
 * client leaves, the end of the request gives back what it charged
 * (end-of-request.ts abandoned); if the plugin closes, it is answered 503
 * through the route's refusal path (Retry-After: the time its turn was
 * still away) and gives back the same way, sent at once (endNow) so the
 * plugin's close awaits it before the client closes.
 */

/** What holding a request reads from the runtime: the engine's holds, the end of the request (endNow), the refusal path. */
export interface HeldRuntime extends Runtime, InputRuntime {
  refuse: Refuse
}

/**
 * Refuses a request the plugin answers at close (held, or waiting for a slot)
 * with 503, and `Connection: close`: Fastify's server.close() reaps only the
 * connections idle at that moment, and this reply, sent in preClose, may
 * still be on its way then; kept alive, its connection would hold close()
 * for the server's keepAliveTimeout (72 s by default).
 */
export function refuseAtClose (runtime: HeldRuntime, request: FastifyRequest, reply: FastifyReply, policy: CompiledPolicy, retryAfter: number, decision: RateLimitDecision): void {
  if (request.raw.httpVersionMajor !== 2) reply.header('connection', 'close')
  runtime.refuse(request, reply, policy, { statusCode: 503, retryAfter, violatedPolicies: [], decision })
}

/**
 * Resolves false at the turn (go on), true when the request ended without
 * going on; rejects with a refusal thrown for the error handler. `place`: its
 * place under maxDelayed, which the hold takes over (or returned, when the
 * client has left already).
 */
export function holdRequest (ctx: { policy: CompiledPolicy, runtime: HeldRuntime }, request: FastifyRequest, reply: FastifyReply, ending: Ending, decision: RateLimitDecision, delayMs: number, place: Place | undefined): Promise<boolean> {
  const { policy, runtime } = ctx
  ending.held = true
  const raw = reply.raw
  // The client left while the store decided: the end of the request has fired already.
  if (raw.closed || raw.destroyed) {
    place?.release()
    return Promise.resolve(true)
  }
  const turnAt = performance.now() + delayMs
  return new Promise((resolve, reject) => {
    const left = (): void => {
      cancel()
      resolve(true)
    }
    const cancel = runtime.holds.hold(delayMs, () => {
      raw.off('close', left)
      ending.held = false
      resolve(false)
    }, () => {
      raw.off('close', left)
      endNow(ending, request, reply, runtime)
      const retryAfter = retryAfterSeconds(Math.max(1, turnAt - performance.now()))
      try {
        refuseAtClose(runtime, request, reply, policy, retryAfter, decision)
        resolve(true)
      } catch (error) {
        reject(error)
      }
    }, place)
    raw.once('close', left)
  })
}
