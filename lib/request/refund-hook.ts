import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import type { DecisionInput, Runtime } from '../decide/evaluate.js'
import type { CompiledPolicy } from '../policy/policy.js'
import type { BlockRun } from '../store/port.js'

/** What an admitted request spent, for refundOn (only on routes with a refundOn block). */
interface Charged {
  input: DecisionInput
  decisions: ReadonlyArray<RawDecision | undefined>
  /** Plugin clock at the decision, so the script can find the window the units were spent in. */
  at: number
}
/** Per admitted request on a refundOn route, until its onResponse. */
const charges = new WeakMap<FastifyRequest, Charged>()

/** Remembers what an admitted request spent, for the refund hook. */
export function recordCharge (request: FastifyRequest, input: DecisionInput, decisions: ReadonlyArray<RawDecision | undefined>, at: number): void {
  charges.set(request, { input, decisions, at })
}

/** Whether block i's refundOn matches the reply; a throwing predicate is logged and means no. */
function refundMatches (refundOn: (reply: FastifyReply) => boolean, request: FastifyRequest, reply: FastifyReply, runtime: Runtime, route: string): boolean {
  try {
    return refundOn(reply) === true
  } catch (error) {
    runtime.badInput.report(request.log, { err: error, route }, 'rate limit refundOn threw; no refund')
    return false
  }
}

/**
 * onResponse for routes with a refundOn block: units spent by a request whose
 * reply matches are given back, in one store call, once (the record is taken
 * off the request before the call). Only blocks that charged the request are
 * refunded. A refund that fails is logged (as store failures are) and dropped.
 */
export function createRefundHook (policy: CompiledPolicy, runtime: Runtime) {
  return async function rateLimitRefund (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const charged = charges.get(request)
    if (charged === undefined) return
    charges.delete(request)
    const { input, decisions } = charged
    const runs: BlockRun[] = []
    const keys: string[] = []
    const costs: number[] = []
    for (let i = 0; i < input.runs.length; i++) {
      const refundOn = policy.blocks[i]?.refundOn
      const run = input.runs[i]
      const key = input.keys[i]
      const cost = input.costs[i]
      if (refundOn === undefined || decisions[i]?.allowed !== true || run === undefined || key === undefined || cost === undefined) continue
      if (!refundMatches(refundOn, request, reply, runtime, policy.route)) continue
      runs.push(run)
      keys.push(key)
      costs.push(cost)
    }
    if (runs.length === 0) return
    try {
      await runtime.store.refund({ runs, keys, costs }, runtime.clock() - charged.at)
      runtime.stats.refunded++
    } catch (error) {
      runtime.failures.report(request.log, { err: error, route: policy.route }, 'rate limit refund failed: units not given back')
    }
  }
}
