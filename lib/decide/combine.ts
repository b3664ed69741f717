import type { RawDecision } from '../store/algorithms.js'
import type { Outcome } from '../diagnostics.js'
import type { RouteBlock } from '../policy/policy.js'

/** How per-block decisions combine (see combine). */
export interface Verdict {
  rejected: boolean
  binding: number
  /** The binding block's decision (a stand-in on a degraded verdict). */
  top: RawDecision
  outcome: Exclude<Outcome, 'skipped'>
  /** Enforced blocks that refused (names). */
  violated: string[]
  /** Shadow blocks that would have refused, when no enforced block did (names). */
  shadowViolated: string[]
  /** The binding refusal's retry delay (ms), -1 when nothing was refused. */
  latestRetryMs: number
  /** Admitted at a reserved turn: the longest wait over the enforced blocks that delay (ms); 0 when admitted now or refused. */
  waitMs: number
  /** Refused only by concurrency blocks that offered a place in their queue (a block's `wait`): the request may wait. */
  queued: boolean
}

/** The binding decision where no block was decided (a policy always has one; never read then). */
const NO_DECISION: RawDecision = Object.freeze({ allowed: true, remaining: 0, resetMs: 0, retryAfterMs: 0, nextMs: 0 })

/** The names of the blocks that refused: enforced ones when `enforced`, else shadow ones. */
function refusedNames (blocks: readonly RouteBlock[], decisions: ReadonlyArray<RawDecision | undefined>, enforced: boolean): string[] {
  const names: string[] = []
  for (const [i, { run, compiled }] of blocks.entries()) {
    const decision = decisions[i]
    if (decision === undefined || decision.allowed || run.shadow === enforced) continue
    names.push(compiled.name)
  }
  return names
}

/**
 * The one rule for several blocks: refused when any enforced block refuses,
 * and then the binding block is the refusing one with the latest retry;
 * otherwise the enforced block with the fewest units left, or, with no
 * enforced block, the first shadow block that would have refused. Blocks
 * without a decision (a deny-cache answer knows only some) are skipped. Pure.
 */
export function combine (blocks: readonly RouteBlock[], decisions: ReadonlyArray<RawDecision | undefined>): Verdict {
  let rejected = false
  let binding = 0
  let top = decisions[0] ?? NO_DECISION
  let latest = -1
  let fewest = Infinity
  let shadowBinding = -1
  let waitMs = 0
  let queued = true
  for (const [i, { run }] of blocks.entries()) {
    const decision = decisions[i]
    if (decision === undefined) continue
    if (run.shadow) {
      if (!decision.allowed && shadowBinding === -1) shadowBinding = i
      continue
    }
    if (!decision.allowed) {
      rejected = true
      if (decision.queued === undefined) queued = false
      if (decision.retryAfterMs > latest) {
        latest = decision.retryAfterMs
        binding = i
        top = decision
      }
    } else {
      // A block without delay admitted now; the delaying ones reserved turns: the request waits for the last.
      if (decision.waitMs !== undefined && decision.waitMs > waitMs) waitMs = decision.waitMs
      if (!rejected && decision.remaining < fewest) {
        fewest = decision.remaining
        binding = i
        top = decision
      }
    }
  }
  const shadowLimited = !rejected && shadowBinding !== -1
  if (shadowLimited && fewest === Infinity) {
    binding = shadowBinding
    top = decisions[shadowBinding] ?? NO_DECISION
  }
  return {
    rejected,
    binding,
    top,
    outcome: rejected ? (top.penalized === true ? 'penalized' : 'limited') : waitMs > 0 ? 'delayed' : shadowLimited ? 'shadow-limited' : 'allowed',
    violated: rejected ? refusedNames(blocks, decisions, true) : [],
    shadowViolated: shadowLimited ? refusedNames(blocks, decisions, false) : [],
    latestRetryMs: latest,
    waitMs: rejected ? 0 : waitMs,
    queued: rejected && queued
  }
}
