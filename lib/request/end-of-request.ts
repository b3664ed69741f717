import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import type { DecisionInput, Runtime } from '../decide/evaluate.js'
import type { CompiledPolicy } from '../policy/policy.js'
import { onlySlots, type Adjustment, type SlotAdjustment } from '../store/port.js'
import type { HeldSlots } from '../decide/slots.js'

/*
 * The one end-of-request mechanism. Contract:
 *
 * - The route hook calls `trackEnd` once per request it admitted through the
 *   store, on routes whose policy has `endOfRequest` (some block has
 *   refundOn or settle). Deny-cache, degraded and refused answers charged
 *   nothing and are never tracked.
 * - It fires exactly once, when the raw response closes: after it finished,
 *   on a client abort, on a timeout (light-my-request's inject emits 'close'
 *   one tick after 'finish'). A response already closed fires at once.
 * - At that moment each source in `ended` (refunds, settles) turns the
 *   request's `Ending` (the blocks that charged it, their keys and costs,
 *   the charge time) into store adjustments; a sync source is read in the
 *   same tick (a refund is queued before the caller's next request), an
 *   async one is awaited (it bounds its own wait). Whatever they give goes
 *   in ONE `store.adjust` call (one batch entry, one hash slot); a failed
 *   call is logged and dropped. Nothing here delays or fails the response:
 *   it has closed already.
 * - Concurrency slots held for the request (decide/slots.ts) are released
 *   by the same call: one idempotent release entry per slot, taken off the
 *   keeper (so renewals stop) in the tick the response closed. A call of
 *   releases alone is retried after a failure (Store.adjustSlots); when a
 *   call that also carries refunds or settles fails, its releases are sent
 *   again alone (the units are never sent twice). Slots taken by this
 *   instance's local limiter (onRedisError 'local') are released there.
 * - To add a kind of entry: a kind in store/port.ts `Adjustment`, a source
 *   called in `ended`, and the policy flag (`endOfRequest`) that makes the
 *   route hook track the request.
 */

/** What an admitted request charged: its decision input, the decisions, and the plugin clock at the charge. */
export interface Ending {
  policy: CompiledPolicy
  input: DecisionInput
  decisions: ReadonlyArray<RawDecision | undefined>
  at: number
  /** The concurrency slots the request holds, if any. */
  slots?: HeldSlots | undefined
}

/** Whether block i charged this request (every admitted decision was charged). */
export function charged (ending: Ending, i: number): boolean {
  return ending.decisions[i]?.allowed === true && ending.input.runs[i] !== undefined && ending.input.keys[i] !== undefined
}

/** Whether refundOn matches the reply; a throwing predicate is logged and means no. */
function refundMatches (refundOn: (reply: FastifyReply) => boolean, request: FastifyRequest, reply: FastifyReply, runtime: Runtime, route: string): boolean {
  try {
    return refundOn(reply) === true
  } catch (error) {
    runtime.badInput.report(request.log, { err: error, route }, 'rate limit refundOn threw; no refund')
    return false
  }
}

/** refundOn: a matching reply gives back what each such block charged. */
function refunds (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Adjustment[] {
  const { policy, input } = ending
  const out: Adjustment[] = []
  const elapsedMs = runtime.clock() - ending.at
  for (let i = 0; i < input.runs.length; i++) {
    const refundOn = policy.blocks[i]?.refundOn
    const cost = input.costs[i] as number
    if (refundOn === undefined || !charged(ending, i) || cost <= 0) continue
    if (!refundMatches(refundOn, request, reply, runtime, policy.route)) continue
    out.push({ kind: 'units', run: input.runs[i]!, key: input.keys[i]!, units: -cost, elapsedMs })
  }
  return out
}

/** The slots' release entries for the store call; slots of the local limiter are released there at once. */
function releases (ending: Ending, runtime: Runtime): SlotAdjustment[] {
  const held = ending.slots
  if (held === undefined) return []
  if (held.store === runtime.store) return held.take()
  held.release()
  return []
}

/** Sends the adjustments in one store call; a failure is logged once per burst (as store failures are) and dropped. */
async function send (entries: readonly Adjustment[], request: FastifyRequest, runtime: Runtime, route: string): Promise<boolean> {
  try {
    await (onlySlots(entries) ? runtime.store.adjustSlots(entries) : runtime.store.adjust(entries))
    return true
  } catch (error) {
    runtime.failures.report(request.log, { err: error, route }, 'rate limit end-of-request adjustment failed: usage not changed')
    return false
  }
}

/** The request ended: every source's entries in one store call. */
async function ended (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Promise<void> {
  const refunded = refunds(ending, request, reply, runtime)
  const released = releases(ending, runtime)
  const entries = [...refunded, ...released]
  if (entries.length === 0) return
  const sent = await send(entries, request, runtime, ending.policy.route)
  if (sent && refunded.length > 0) runtime.stats.refunded++
  // The units were sent at most once; the slots' releases are idempotent: alone, they are retried.
  if (!sent && refunded.length > 0 && released.length > 0) await send(released, request, runtime, ending.policy.route)
}

/** Fires `ended` once when the raw response closes (at once when it has closed already). */
export function trackEnd (request: FastifyRequest, reply: FastifyReply, ending: Ending, runtime: Runtime): void {
  const raw = reply.raw
  const fire = (): void => {
    ended(ending, request, reply, runtime).catch((error: unknown) => {
      runtime.failures.report(request.log, { err: error, route: ending.policy.route }, 'rate limit end of request failed: usage not changed')
    })
  }
  // Closed already (the client left while the store decided): no 'close' event is coming.
  if (raw.closed || raw.destroyed || request.raw.destroyed) queueMicrotask(fire)
  else raw.once('close', fire)
}
