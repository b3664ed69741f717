import type { FastifyBaseLogger } from 'fastify'
import { performance } from 'node:perf_hooks'
import { changeUsage, unitsBack } from '../decide/given-back.js'
import { evaluate, type DecisionInput, type Evaluation, type Runtime } from '../decide/evaluate.js'
import { retryAfterSeconds, UNAVAILABLE_RETRY_SECONDS } from '../decide/decision-math.js'
import { FST_RRL_INVALID_API_CALL, FST_RRL_LIMITER_UNAVAILABLE, FST_RRL_RATE_LIMITED } from '../errors.js'
import type { RateLimitDecision } from '../types/index.js'

/*
 * fastify.rateLimit.schedule: the outbound "wait for my turn". The decision
 * may reserve a later turn (a block's `delay`); the call then resolves at that
 * turn, held on this instance like a request (kinds/delay/holds.ts), and an abort
 * of its signal or the plugin's close before it gives back what it charged
 * (decide/given-back.ts unitsBack, source 'abort').
 */

/** A refusal as the error a schedule() call rejects with: the coded refusal, carrying the decision and Retry-After seconds. */
function refusal (evaluation: Evaluation): Error {
  const { decision, retrySeconds } = evaluation
  const error = decision.degraded ? new FST_RRL_LIMITER_UNAVAILABLE(UNAVAILABLE_RETRY_SECONDS) : new FST_RRL_RATE_LIMITED(retrySeconds)
  return Object.assign(error, { rateLimit: decision, retryAfter: decision.degraded ? UNAVAILABLE_RETRY_SECONDS : retrySeconds })
}

/** The signal option: an AbortSignal or nothing. */
export function scheduleSignal (options: unknown): AbortSignal | undefined {
  if (options === undefined) return undefined
  if (options === null || typeof options !== 'object') throw new FST_RRL_INVALID_API_CALL('schedule', `options must be { signal? } (got ${options === null ? 'null' : typeof options})`)
  const signal = 'signal' in options ? options.signal : undefined
  if (signal === undefined) return undefined
  if (!(signal instanceof AbortSignal)) throw new FST_RRL_INVALID_API_CALL('schedule', `options.signal must be an AbortSignal (got ${signal === null ? 'null' : typeof signal})`)
  return signal
}

/** Gives back what the call charged (tracked: the plugin's close awaits it); a failure is logged once per burst, as the end of a request's. */
function giveBack (evaluation: Evaluation, runtime: Runtime, log: FastifyBaseLogger, route: string): void {
  const entries = unitsBack(evaluation.input, evaluation.decisions, evaluation.chargedAt)
  if (entries.length === 0) return
  runtime.pendingWork.add(changeUsage(runtime, { route, log, sources: ['abort'], entries }).catch((error: unknown) => {
    runtime.failures.report(log, { err: error, route }, 'rate limit give-back of an abandoned turn failed: usage not changed')
  }))
}

/** The decision at its turn: at once when admitted now, after the hold when a turn was reserved; rejects with the refusal, the abort's reason, or at close. */
export function atTurn (evaluation: Evaluation, runtime: Runtime, parts: { log: FastifyBaseLogger, route: string, signal: AbortSignal | undefined }): Promise<RateLimitDecision> {
  const { decision } = evaluation
  if (evaluation.rejected) return Promise.reject(refusal(evaluation))
  if (decision.delayMs === 0) return Promise.resolve(decision)
  const { log, route, signal } = parts
  if (signal?.aborted === true) {
    evaluation.place?.release()
    giveBack(evaluation, runtime, log, route)
    return Promise.reject(signal.reason)
  }
  const turnAt = performance.now() + decision.delayMs
  return new Promise((resolve, reject) => {
    const aborted = (): void => {
      cancel()
      giveBack(evaluation, runtime, log, route)
      reject(signal?.reason)
    }
    const cancel = runtime.holds.hold(decision.delayMs, () => {
      signal?.removeEventListener('abort', aborted)
      resolve(decision)
    }, () => {
      signal?.removeEventListener('abort', aborted)
      giveBack(evaluation, runtime, log, route)
      const retryAfter = retryAfterSeconds(Math.max(1, turnAt - performance.now()))
      reject(Object.assign(new FST_RRL_LIMITER_UNAVAILABLE(retryAfter), { rateLimit: decision, retryAfter }))
    }, evaluation.place)
    signal?.addEventListener('abort', aborted, { once: true })
  })
}

/** schedule(): the decision, taken as one the caller holds, then its turn. */
export async function scheduled (input: DecisionInput, { runtime, log, signal }: { runtime: Runtime, log: FastifyBaseLogger, signal: AbortSignal | undefined }): Promise<RateLimitDecision> {
  const route = `api ${input.policy.route}`
  const evaluation = await evaluate(input, { log, route, source: 'api', holds: true }, runtime)
  let turn: Promise<RateLimitDecision>
  try {
    turn = atTurn(evaluation, runtime, { log, route, signal })
  } finally {
    // Its hold took the place over (or there was none to take): returned on every other path.
    evaluation.place?.release()
  }
  return await turn
}
