import type { FastifyReply } from 'fastify'
import type { CompiledPolicy } from './policy.js'
import type { HeaderMode } from './types.js'

/*
 * The only module that knows header syntax: IETF httpapi-ratelimit-headers
 * draft-10 (Structured Fields) and the legacy X-RateLimit-* trio. A later
 * draft is a change here and nowhere else.
 *
 * `t` (and X-RateLimit-Reset) is the seconds until the quota is fully
 * restored on an admitted request, and equals Retry-After on a rejected one,
 * so a client never reads a reset earlier than it may retry.
 */

export function secondsCeil (ms: number): number {
  return Math.ceil(ms / 1000)
}

/** Whole seconds for Retry-After: at least 1, never earlier than the decision says. */
export function retryAfterSeconds (retryAfterMs: number): number {
  return Math.max(1, secondsCeil(retryAfterMs))
}

export type HeaderWriter = (reply: FastifyReply, policy: CompiledPolicy, remaining: number, resetSeconds: number) => void

const writeIetf: HeaderWriter = (reply, policy, remaining, resetSeconds) => {
  reply.header('ratelimit-policy', policy.policyHeader)
  reply.header('ratelimit', `${policy.nameItem};r=${remaining};t=${resetSeconds}`)
}

const writeLegacy: HeaderWriter = (reply, policy, remaining, resetSeconds) => {
  reply.header('x-ratelimit-limit', policy.params.limit)
  reply.header('x-ratelimit-remaining', remaining)
  reply.header('x-ratelimit-reset', resetSeconds)
}

const writeBoth: HeaderWriter = (reply, policy, remaining, resetSeconds) => {
  writeIetf(reply, policy, remaining, resetSeconds)
  writeLegacy(reply, policy, remaining, resetSeconds)
}

const writeNone: HeaderWriter = () => {}

/** Picks the writer once at startup, so requests never branch on the mode. */
export function headerWriter (mode: HeaderMode): HeaderWriter {
  switch (mode) {
    case 'ietf': return writeIetf
    case 'legacy': return writeLegacy
    case 'both': return writeBoth
    default: return writeNone
  }
}
