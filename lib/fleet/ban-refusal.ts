import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Bans } from './bans.js'
import { recordBan } from '../decide/evaluate.js'
import { TELEMETRY_THREW } from '../diagnostics.js'
import type { CompiledPolicy } from '../policy/policy.js'
import type { Refuse } from '../reply/problem.js'
import type { Reporter } from '../decide/evaluate.js'
import type { RateLimitBan, RateLimitDecision } from '../types/index.js'

/*
 * Operator bans on the request path: the route hook asks the local ban map
 * (fleet/bans.ts, refreshed by a poll: never Redis) before anything else, and
 * only while it holds a ban. A banned request is refused with no store call
 * and no RateLimit fields: no quota applies to it.
 */

/** What a ban's refusal reads from the runtime: the reporter, this instance's clock, the fleet's bans, the refusal path. */
export interface BanRuntime extends Reporter {
  clock: () => number
  bans: Bans
  refuse: Refuse
}

/** A ban is logged once per ban per minute, not once per request under a flood. */
const LOG_EVERY_MS = 60_000

/**
 * Refuses a banned request: counted, published, logged once per ban per
 * minute. That telemetry is isolated; it comes first because the refusal may
 * be thrown (useErrorHandler).
 */
export function refuseBanned (route: { policy: CompiledPolicy, runtime: BanRuntime }, request: FastifyRequest, reply: FastifyReply, ban: RateLimitBan, startedAt: number): FastifyReply {
  const { policy, runtime } = route
  const now = runtime.clock()
  // The time left by the time bans are judged by (Redis's), not this host's clock.
  const leftMs = ban.expiresAt === null ? -1 : Math.max(1, ban.expiresAt - runtime.bans.now())
  const decision: RateLimitDecision = { allowed: false, limit: 0, remaining: 0, resetMs: leftMs, retryAfterMs: leftMs, policy: policy.name, degraded: false, outcome: 'banned', delayMs: 0, tier: undefined, policies: [] }
  request.rateLimit = decision
  try {
    recordBan(runtime, policy, startedAt)
    if (runtime.rejections.first(`ban ${ban.id}`, now, now + LOG_EVERY_MS)) {
      // The ban's route, kind and who set it: never the identity value.
      request.log.info({ route: policy.route, identityKind: ban.kind, ban: { route: ban.route, statusCode: ban.statusCode, actor: ban.actor, setAt: new Date(ban.setAt).toISOString() } }, 'rate limit ban refused a request')
    }
  } catch (error) {
    runtime.telemetry.report(request.log, { err: error }, TELEMETRY_THREW)
  }
  const retryAfter = ban.statusCode === 429 ? Math.max(1, Math.ceil(leftMs / 1000)) : 0
  return runtime.refuse(request, reply, policy, { statusCode: ban.statusCode, retryAfter, violatedPolicies: [], decision })
}
