import type { FastifyReply } from 'fastify'
import type { RawDecision } from './algorithm-types.js'
import { retryAfterSeconds, secondsCeil, shownRemaining } from './decision-math.js'
import type { BlockRun } from './store.js'
import type { HeaderMode } from './types.js'

/*
 * The only module that knows header syntax: IETF httpapi-ratelimit-headers
 * draft-10 (Structured Fields) and the legacy X-RateLimit-* trio. A later
 * draft is a change here and nowhere else: the block compiler asks this module
 * for the strings it precomputes (sfString, policyItem, policyHeaderValue).
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

/** A Structured Fields string: printable ASCII with `"` and `\` escaped. */
export function sfString (value: string): string {
  return '"' + value.replace(/[\\"]/g, '\\$&') + '"'
}

/** One `RateLimit-Policy` list member: `"name";q=100;w=60` (plus `;tier="pro"`). */
export function policyItem (nameItem: string, limit: number, windowMs: number, tier: string | undefined): string {
  return `${nameItem};q=${limit};w=${Math.max(1, secondsCeil(windowMs))}` + (tier === undefined ? '' : `;tier=${sfString(tier)}`)
}

/** The `RateLimit-Policy` value for one list of runs: enforced ones only; '' = send none. */
export function policyHeaderValue (runs: readonly BlockRun[]): string {
  return runs.filter((run) => !run.shadow).map((run) => run.policyItem).join(', ')
}

/** What the writers read from a compiled policy (its precomputed header strings). */
export interface HeaderSource {
  /** The `RateLimit-Policy` value per run list (see policyHeaderValue). */
  policyHeaders: ReadonlyMap<readonly BlockRun[], string>
  /** Per block, its name as a Structured Fields string. */
  blocks: ReadonlyArray<{ nameItem: string }>
}

/**
 * `decisions[i]` is undefined when block i was not decided (a local deny
 * cache answer knows only the blocks it holds); `binding` indexes the block
 * the legacy headers report.
 */
export type HeaderWriter = (reply: FastifyReply, policy: HeaderSource, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean, binding: number) => void

function resetSeconds (decision: RawDecision): number {
  return decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs)
}

function rateLimitValue (runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean, policy: HeaderSource): string {
  let value = ''
  for (let i = 0; i < runs.length; i++) {
    const decision = decisions[i]
    if ((runs[i] as BlockRun).shadow || decision === undefined) continue
    value += (value === '' ? '' : ', ') + `${(policy.blocks[i] as { nameItem: string }).nameItem};r=${shownRemaining(decision, costs[i] as number, !rejected)};t=${resetSeconds(decision)}`
  }
  return value
}

const writeIetf: HeaderWriter = (reply, policy, runs, decisions, costs, rejected) => {
  // A run list made for one request (requestLimit) is not precomputed: rendered here.
  const policyHeader = policy.policyHeaders.get(runs) ?? policyHeaderValue(runs)
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
  reply.header('x-ratelimit-remaining', shownRemaining(decision, costs[binding] as number, !rejected))
  reply.header('x-ratelimit-reset', resetSeconds(decision))
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
