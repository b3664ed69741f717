import type { FastifyReply } from 'fastify'
import type { RawDecision } from './algorithm-types.js'
import type { BlockRun, CompiledPolicy } from './policy.js'
import type { HeaderMode } from './types.js'

/*
 * The only module that knows header syntax: IETF httpapi-ratelimit-headers
 * draft-10 (Structured Fields) and the legacy X-RateLimit-* trio. A later
 * draft is a change here and nowhere else.
 *
 * `t` (and X-RateLimit-Reset) is the seconds until the quota is fully
 * restored on an admitted request, and equals the policy's own retry delay on
 * a rejected one, so a client never reads a reset earlier than it may retry.
 *
 * Several policies (multi-limits): `RateLimit-Policy` lists each (a Structured
 * Fields list) and `RateLimit` reports each, in declaration order. On a
 * rejected request, a policy that would have admitted reports the units it has
 * now (nothing was charged). Shadow policies are never shown: they must not
 * make clients slow down. The legacy trio shows the binding policy (the
 * violated one with the latest retry, or the one with the fewest units left).
 */

export function secondsCeil (ms: number): number {
  return Math.ceil(ms / 1000)
}

/** Whole seconds for Retry-After: at least 1, never earlier than the decision says. */
export function retryAfterSeconds (retryAfterMs: number): number {
  return Math.max(1, secondsCeil(retryAfterMs))
}

/**
 * `decisions[i]` is undefined when block i was not decided (a local deny
 * cache answer knows only the blocks it holds); `binding` indexes the block
 * the legacy headers report.
 */
export type HeaderWriter = (reply: FastifyReply, policy: CompiledPolicy, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean, binding: number) => void

function rateLimitValue (runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean, policy: CompiledPolicy): string {
  let value = ''
  for (let i = 0; i < runs.length; i++) {
    const run = runs[i] as BlockRun
    const decision = decisions[i]
    if (run.shadow || decision === undefined) continue
    const remaining = rejected && decision.allowed ? decision.remaining + (costs[i] as number) : decision.remaining
    const t = decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs)
    value += (value === '' ? '' : ', ') + `${(policy.blocks[i] as { nameItem: string }).nameItem};r=${remaining};t=${t}`
  }
  return value
}

const writeIetf: HeaderWriter = (reply, policy, runs, decisions, costs, rejected) => {
  const policyHeader = policy.policyHeaders.get(runs) ?? ''
  if (policyHeader === '') return
  reply.header('ratelimit-policy', policyHeader)
  const value = rateLimitValue(runs, decisions, costs, rejected, policy)
  if (value !== '') reply.header('ratelimit', value)
}

const writeLegacy: HeaderWriter = (reply, _policy, runs, decisions, costs, rejected, binding) => {
  const run = runs[binding] as BlockRun
  const decision = decisions[binding]
  if (run.shadow || decision === undefined) return
  reply.header('x-ratelimit-limit', run.params.limit)
  reply.header('x-ratelimit-remaining', rejected && decision.allowed ? decision.remaining + (costs[binding] as number) : decision.remaining)
  reply.header('x-ratelimit-reset', decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs))
}

const writeBoth: HeaderWriter = (reply, policy, runs, decisions, costs, rejected, binding) => {
  writeIetf(reply, policy, runs, decisions, costs, rejected, binding)
  writeLegacy(reply, policy, runs, decisions, costs, rejected, binding)
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
