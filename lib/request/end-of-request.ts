import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import type { DecisionInput, RequestBlock, Runtime as DecisionRuntime } from '../decide/evaluate.js'
import type { CompiledPolicy } from '../policy/policy.js'
import { onlySlots, type Adjustment, type BlockRun, type SlotAdjustment } from '../store/port.js'
import type { HeldSlots } from '../kinds/concurrency/slot-keeper.js'
import { chargeTimeOf, changeUsage, unitsBack, type UsageSource } from '../decide/given-back.js'
import { awaitWithin, isThenable, strayThenable, type Outcome } from '../util/await-within.js'
import { reportValue, type InputRuntime } from './inputs.js'

/** What the end of a request reads: the decision runtime and the time a settle may take. */
type Runtime = DecisionRuntime & InputRuntime

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
 *   the charge's time on the store's clock, which the store compares with
 *   its own: never this instance's) into store adjustments; a sync source
 *   is read in the same tick (a refund is queued before the caller's next
 *   request), an async one is awaited (it bounds its own wait). Whatever
 *   they give goes in ONE `store.adjust` call (one batch entry, one hash
 *   slot), through decide/given-back.ts (the one path for units given back:
 *   deny cache, stats, metrics); a failed call is logged and dropped.
 *   Nothing here delays or fails the response: it has closed already.
 * - Concurrency slots held for the request (kinds/concurrency/decide.ts) are released
 *   by the same call: one idempotent release entry per slot, taken off the
 *   keeper (so renewals stop) in the tick the response closed. A call of
 *   releases alone is retried after a failure (Store.adjustSlots); when a
 *   call that also carries refunds or settles fails, its releases are sent
 *   again alone (the units are never sent twice). Slots taken by this
 *   instance's local limiter (onRedisError 'local') are released there.
 * - Each end's store work is tracked in `runtime.pendingWork`: the plugin's
 *   close awaits it before the client may close (a request that ends while
 *   the server closes still releases its slots). A held request answered at
 *   close ends at once (`endNow`), not at its response's 'close'.
 * - To add a kind of entry: a kind in store/port.ts `Adjustment`, a source
 *   called in `ended`, and the policy flag (`endOfRequest`) that makes the
 *   route hook track the request.
 */

/** What an admitted request charged: its decision input, the decisions, and the store's time of the charge. */
export interface Ending {
  policy: CompiledPolicy
  input: DecisionInput
  decisions: ReadonlyArray<RawDecision | undefined>
  /** Evaluation.chargedAt: the store's clock when it charged (undefined: nothing charged). */
  chargedAt: number | undefined
  /** The concurrency slots the request holds, if any. */
  slots?: HeldSlots | undefined
  /** Waiting for its reserved turn (kinds/delay/held-request.ts): ending now, it never ran, and gives back what it charged. */
  held: boolean
  /** Its end has been handled (at the response's close, or at once by endNow): it fires once. */
  over?: true
}

/** Whether block i charged this request (every admitted decision was charged). */
export function charged (ending: Ending, i: number): boolean {
  return ending.decisions[i]?.allowed === true
}

/** Whether refundOn matches the reply; a throw or a Promise (it must be synchronous) is logged and means no. */
function refundMatches (refundOn: (reply: FastifyReply) => boolean, request: FastifyRequest, reply: FastifyReply, runtime: Runtime, route: string): boolean {
  let matched: unknown
  try {
    matched = refundOn(reply)
  } catch (error) {
    reportValue(request, runtime, { ok: false, error }, { what: 'refundOn', route, instead: 'no refund' })
    return false
  }
  if (!strayThenable(matched)) return matched === true
  reportValue(request, runtime, { ok: false, error: new TypeError('returned a Promise; refundOn must be synchronous') }, { what: 'refundOn', route, instead: 'no refund' })
  return false
}

/** The time a units change of block i (its run `run`) sends with (given-back.ts chargeTimeOf). */
function chargeTime (ending: Ending, run: BlockRun, i: number): number | undefined {
  return chargeTimeOf(run, ending.decisions[i], ending.chargedAt)
}

/** refundOn: a matching reply gives back what each such block charged. */
function refunds (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Adjustment[] {
  const { policy, input } = ending
  const out: Adjustment[] = []
  for (const [i, { run, key, cost, compiled: { refundOn } }] of input.blocks.entries()) {
    if (refundOn === undefined || !charged(ending, i) || cost <= 0) continue
    if (!refundMatches(refundOn, request, reply, runtime, policy.route)) continue
    out.push({ kind: 'units', run, key, units: -cost, chargedAt: chargeTime(ending, run, i) })
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

/** Calls `settle(request, reply)`; a promise it returns is awaited at most identityTimeout ms. */
function callSettle (settle: NonNullable<CompiledPolicy['blocks'][number]['settle']>, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Outcome | Promise<Outcome> {
  let value: unknown
  try {
    value = settle(request, reply)
  } catch (error) {
    return { ok: false, error }
  }
  return isThenable(value) ? awaitWithin(value, runtime.identityTimeout, 'identityTimeout') : { ok: true, value }
}

/** A block's settle answer as its difference from the reservation (0: none); anything unusable is logged and changes nothing. */
function difference (outcome: Outcome, ending: Ending, { run, cost, compiled }: RequestBlock, request: FastifyRequest, runtime: Runtime): number {
  const capacity = Math.max(run.params.limit, run.params.burst)
  const value = outcome.ok ? outcome.value : undefined
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= capacity) return value - cost
  const route = `${ending.policy.route} (${compiled.name})`
  reportValue(request, runtime, outcome, { what: 'settle', route, instead: `leaving the reservation charged (settle must give an integer from 0 to ${capacity})` })
  return 0
}

/** settle: per block that charged, the actual units minus the reservation; sync unless a settle returned a promise. */
function settles (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Adjustment[] | Promise<Adjustment[]> {
  const { input } = ending
  // One entry per settled block, in block order; units filled in as each settle answers.
  const settled: Array<{ block: RequestBlock, i: number, units: number }> = []
  let pending: Array<Promise<void>> | undefined
  for (const [i, block] of input.blocks.entries()) {
    const settle = block.compiled.settle
    if (settle === undefined || !charged(ending, i)) continue
    const outcome = callSettle(settle, request, reply, runtime)
    const entry = { block, i, units: 0 }
    settled.push(entry)
    if (outcome instanceof Promise) {
      pending ??= []
      pending.push(outcome.then((result) => { entry.units = difference(result, ending, block, request, runtime) }))
    } else {
      entry.units = difference(outcome, ending, block, request, runtime)
    }
  }
  const entries = (): Adjustment[] => {
    const out: Adjustment[] = []
    for (const { block: { run, key }, i, units } of settled) if (units !== 0) out.push({ kind: 'units', run, key, units, chargedAt: chargeTime(ending, run, i) })
    return out
  }
  return pending === undefined ? entries() : Promise.all(pending).then(entries)
}

/** Sends the adjustments in one store call (units through the given-back path); a failure is logged once per burst (as store failures are) and dropped. */
async function send (entries: readonly Adjustment[], sources: readonly UsageSource[], request: FastifyRequest, runtime: Runtime, route: string): Promise<boolean> {
  try {
    if (onlySlots(entries)) await runtime.store.adjustSlots(entries)
    else await changeUsage(runtime, { route, log: request.log, sources, entries })
    return true
  } catch (error) {
    runtime.failures.report(request.log, { err: error, route }, 'rate limit end-of-request adjustment failed: usage not changed')
    return false
  }
}

/** The request ended: every source's entries in one store call (counted there, when it succeeded). */
async function ended (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): Promise<void> {
  if (ending.held) {
    const entries = [...unitsBack(ending.input, ending.decisions, ending.chargedAt), ...releases(ending, runtime)]
    if (entries.length > 0) await send(entries, ['abort'], request, runtime, ending.policy.route)
    return
  }
  const refunded = refunds(ending, request, reply, runtime)
  // Taken in the tick the response closed: renewals stop now, whatever a settle awaits.
  const released = releases(ending, runtime)
  let settled = settles(ending, request, reply, runtime)
  if (settled instanceof Promise) settled = await settled
  const units = settled.length === 0 ? refunded : [...refunded, ...settled]
  const entries = released.length === 0 ? units : [...units, ...released]
  if (entries.length === 0) return
  const sources: UsageSource[] = []
  if (refunded.length > 0) sources.push('refund')
  if (settled.length > 0) sources.push('settle')
  if (await send(entries, sources, request, runtime, ending.policy.route)) return
  // The units were sent at most once; the slots' releases are idempotent: alone, they are retried.
  if (units.length > 0 && released.length > 0) await send(released, [], request, runtime, ending.policy.route)
}

/**
 * Runs the end once, tracked for the plugin's close: at the response's close,
 * or earlier for a held request answered at close (its give-back is sent at
 * once, not when its 503 has gone out).
 */
export function endNow (ending: Ending, request: FastifyRequest, reply: FastifyReply, runtime: Runtime): void {
  if (ending.over === true) return
  ending.over = true
  runtime.pendingWork.add(ended(ending, request, reply, runtime).catch((error: unknown) => {
    runtime.failures.report(request.log, { err: error, route: ending.policy.route }, 'rate limit end of request failed: usage not changed')
  }))
}

/** Fires `ended` once when the raw response closes (at once when it has closed already). */
export function trackEnd (request: FastifyRequest, reply: FastifyReply, ending: Ending, runtime: Runtime): void {
  const raw = reply.raw
  const fire = (): void => { endNow(ending, request, reply, runtime) }
  // Closed already (the client left while the store decided): no 'close' event is coming. A request
  // stream destroyed after its body was read is not a departure: Node destroys it once consumed.
  if (raw.closed || raw.destroyed || (request.raw.destroyed && !request.raw.complete)) queueMicrotask(fire)
  else raw.once('close', fire)
}
