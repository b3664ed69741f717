import type { FastifyReply } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import { retryAfterSeconds, secondsCeil, shownRemaining } from '../decide/decision-math.js'
import type { BlockRun } from '../store/port.js'
import type { HeaderMode } from '../types.js'

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

/**
 * A block's quota as the headers state it: `q` units per `w` seconds. For
 * token-bucket and gcra the quota is the burst capacity and `w` the time to
 * refill it from empty (burst × window / limit), so `r` never exceeds `q` and
 * `t` (time until full) never exceeds `w`; otherwise `q` = limit, `w` = window.
 */
export function headerQuota (limit: number, windowMs: number, burst: number, bursty: boolean): { quota: number, windowSeconds: number } {
  const quota = bursty ? burst : limit
  const quotaMs = bursty ? Math.ceil(burst * windowMs / limit) : windowMs
  return { quota, windowSeconds: Math.max(1, secondsCeil(quotaMs)) }
}

/** One `RateLimit-Policy` list member: `"name";q=100;w=60` (plus `;frrl-tier="pro"`: a vendor-prefixed extension parameter, draft-10 §3.1). */
export function policyItem (nameItem: string, quota: number, windowSeconds: number, tier: string | undefined): string {
  return `${nameItem};q=${quota};w=${windowSeconds}` + (tier === undefined ? '' : `;frrl-tier=${sfString(tier)}`)
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

/**
 * `t`: seconds until the quota is fully restored (admitted) or until this
 * policy admits again (refused), at most `w`. Only a penalty may say more (the
 * documented exception): the client must wait it out. Capping matters for the
 * sliding window, whose weighted previous window can keep part of the quota
 * busy up to one more window; Retry-After on a 429 stays exact.
 */
function resetSeconds (decision: RawDecision, run: BlockRun): number {
  const seconds = decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs)
  return decision.penalized === true ? seconds : Math.min(seconds, run.windowSeconds)
}

/** `r`: units left, never more than `q` (a fresh token bucket reports its capacity). */
function remainingShown (decision: RawDecision, cost: number, charged: boolean, run: BlockRun): number {
  return Math.min(shownRemaining(decision, cost, charged), run.quota)
}

function rateLimitValue (runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>, costs: readonly number[], rejected: boolean, policy: HeaderSource): string {
  let value = ''
  for (let i = 0; i < runs.length; i++) {
    const decision = decisions[i]
    if ((runs[i] as BlockRun).shadow || decision === undefined) continue
    const run = runs[i] as BlockRun
    value += (value === '' ? '' : ', ') + `${(policy.blocks[i] as { nameItem: string }).nameItem};r=${remainingShown(decision, costs[i] as number, !rejected, run)};t=${resetSeconds(decision, run)}`
  }
  return value
}

/** `RateLimit-Policy` for the blocks that were decided: all of them, except on a local deny-cache answer. */
function policyValue (policy: HeaderSource, runs: readonly BlockRun[], decisions: ReadonlyArray<RawDecision | undefined>): string {
  for (let i = 0; i < runs.length; i++) {
    if (decisions[i] === undefined && !(runs[i] as BlockRun).shadow) return policyHeaderValue(runs.filter((_, j) => decisions[j] !== undefined))
  }
  // A run list made for one request (a runtime override, requestLimit) is not precomputed: join its runs' items.
  return policy.policyHeaders.get(runs) ?? policyHeaderValue(runs)
}

const writeIetf: HeaderWriter = (reply, policy, runs, decisions, costs, rejected) => {
  // Both fields list the same policies: a deny-cache answer knows only some blocks, so both show those.
  const policyHeader = policyValue(policy, runs, decisions)
  if (policyHeader === '') return
  reply.header('ratelimit-policy', policyHeader)
  const value = rateLimitValue(runs, decisions, costs, rejected, policy)
  if (value !== '') reply.header('ratelimit', value)
}

const writeLegacy: HeaderWriter = (reply, _policy, runs, decisions, costs, rejected, binding) => {
  const run = runs[binding] as BlockRun
  const decision = decisions[binding]
  if (run.shadow || decision === undefined) return
  reply.header('x-ratelimit-limit', run.quota)
  reply.header('x-ratelimit-remaining', remainingShown(decision, costs[binding] as number, !rejected, run))
  reply.header('x-ratelimit-reset', resetSeconds(decision, run))
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
