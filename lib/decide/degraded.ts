import type { RawDecision } from '../store/algorithms.js'
import { UNAVAILABLE_RETRY_SECONDS } from './decision-math.js'
import { combine, type Verdict } from './combine.js'
import type { DecisionInput, DecisionOrigin, Evaluation, Runtime } from './contract.js'
import { toEvaluation } from './evaluation.js'
import { errorCause, storeErrorChannel } from '../diagnostics.js'

/** Publishes and logs (throttled) one store failure: telemetry, run after the degraded decision is delivered. */
export function reportFailure (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime, error: unknown): void {
  const { policy } = input
  const cause = errorCause(error)
  runtime.metrics?.storeError(origin.route, cause)
  if (storeErrorChannel.hasSubscribers) storeErrorChannel.publish({ route: origin.route, cause, error })
  runtime.failures.report(origin.log, { err: error, route: origin.route, policy: policy.name, onRedisError: policy.onRedisError }, failureMessage(failureAnswer(policy), origin))
}

/** What a degraded decision did with the request, by the route's onRedisError (a shadow-only route is never refused). */
function failureAnswer (policy: DecisionInput['policy']): 'local' | 'refused' | 'admitted' {
  if (policy.onRedisError === 'local') return 'local'
  return policy.onRedisError === 'closed' && !policy.allShadow ? 'refused' : 'admitted'
}

/** The store-failure log line says what happened to the request (consume() answers a decision, not a 503). */
function failureMessage (answer: ReturnType<typeof failureAnswer>, origin: DecisionOrigin): string {
  if (answer === 'local') return 'rate limiter degraded: decided by this instance\'s local limit'
  if (answer === 'admitted') return 'rate limiter degraded: request admitted without a decision'
  return origin.source === 'api' ? 'rate limiter degraded: refused (onRedisError closed)' : 'rate limiter degraded: request refused with 503'
}

/** onRedisError 'local': this instance's share of each block (policy.ts made sure every block has one), on its own limiter. */
async function decideLocally (input: DecisionInput, runtime: Runtime): Promise<Evaluation> {
  const blocks = input.blocks.map((block) => ({ ...block, run: { ...block.run, params: block.run.local ?? block.run.params } }))
  const local: DecisionInput = { ...input, blocks, compiledBlocks: undefined }
  const { decisions } = await runtime.localStore().decide(local, 'charge')
  // The decision channel names no shadow refusal of the local limiter.
  const verdict: Verdict = { ...combine(blocks, decisions), shadowViolated: [] }
  if (verdict.rejected) runtime.stats.limited++
  else runtime.stats.allowed++
  return toEvaluation(local, decisions, verdict, 'local', 'charge')
}

/** The store failed: the route's onRedisError decides (counted; reportFailure reports it). */
export async function degraded (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime): Promise<Evaluation> {
  runtime.stats.degraded++
  if (input.policy.onRedisError === 'local') return await decideLocally(input, runtime)
  const closed = failureAnswer(input.policy) === 'refused'
  const top: RawDecision = { allowed: !closed, remaining: 0, resetMs: 0, retryAfterMs: closed ? UNAVAILABLE_RETRY_SECONDS * 1000 : 0, nextMs: 0 }
  const verdict: Verdict = { rejected: closed, binding: 0, top, outcome: 'degraded', violated: [], shadowViolated: [], waitMs: 0, latestRetryMs: -1, queued: false }
  return toEvaluation(input, new Array<RawDecision | undefined>(input.blocks.length), verdict, origin.source, 'charge')
}
