import { performance } from 'node:perf_hooks'
import type { RawDecision } from '../store/algorithms.js'
import { combine } from './combine.js'
import type { DecisionInput, DecisionOrigin, Evaluation, RequestBlock, Runtime } from './contract.js'
import { degraded, reportFailure } from './degraded.js'
import type { DenyCache } from './deny-cache.js'
import { publish, toEvaluation } from './evaluation.js'
import { decisionChannel, TELEMETRY_THREW } from '../diagnostics.js'
import type { RateLimitDecision } from '../types/index.js'
import { withoutTurns } from '../kinds/delay/turns.js'
import type { Place } from '../kinds/delay/holds.js'

export { combine, type Verdict } from './combine.js'
export type { DecisionInput, DecisionOrigin, Engine, Evaluation, Reporter, RequestBlock, Runtime } from './contract.js'
export { recordBan, recordSkip } from './evaluation.js'

/*
 * The decision engine: one request's (or one API call's) blocks in, one
 * Evaluation out. Three ways to an answer, in order: the local deny cache, the
 * store (one call for every block), or, when the store fails, the route's
 * onRedisError (degraded.ts). `combine` is the one rule that turns per-block
 * decisions into an outcome and a binding block; `toEvaluation` is the one
 * place an Evaluation is built. Nothing here knows header syntax or reply bodies.
 */

/** Any enforced block the local deny cache still refuses: the decisions it knows, else undefined. */
function fromDenyCache (denyCache: DenyCache, input: DecisionInput, now: number): Array<RawDecision | undefined> | undefined {
  const { blocks } = input
  let cached: Array<RawDecision | undefined> | undefined
  for (const [i, { run, key, cost }] of blocks.entries()) {
    if (run.shadow) continue
    const entry = denyCache.get(key, cost, now, run)
    if (entry === undefined) continue
    cached ??= new Array<RawDecision | undefined>(blocks.length)
    const waitMs = entry.until - now
    cached[i] = { allowed: false, remaining: entry.remaining, resetMs: waitMs, retryAfterMs: waitMs, nextMs: Math.max(1, entry.nextAt - now), penalized: entry.penalized }
  }
  return cached
}

/** Remembers each enforced refusal locally until the store's own retry time (measured from `now`, before the call). */
function rememberRefusals (denyCache: DenyCache, input: DecisionInput, decisions: readonly RawDecision[], now: number): void {
  for (const [i, { run, key, cost }] of input.blocks.entries()) {
    const decision = decisions[i]
    if (decision === undefined || run.shadow || decision.allowed) continue
    // A block with a penalty counts its refusals in the store, so they reach it until the penalty starts.
    if (run.penalty !== undefined && decision.penalized !== true) continue
    const until = now + decision.retryAfterMs
    // The kind bounds the hold: a quota's about a second, a slot's none (it may free at any moment).
    const expiresAt = run.kind.denyHold(run, now, until)
    if (expiresAt === undefined) continue
    denyCache.set(key, { until, expiresAt, cost, remaining: decision.remaining, run, penalized: decision.penalized === true, nextAt: now + decision.nextMs })
  }
}

/**
 * One evaluateThen call that went to the store, built once: its callbacks
 * and its report share it (it stands where a closure over the same values was).
 */
interface StoreCall {
  input: DecisionInput
  origin: DecisionOrigin
  runtime: Runtime
  done: (evaluation: Evaluation) => void
  fail: (error: Error) => void
  /** The place under maxDelayed taken before the call (turnsFor), if any. */
  place: Place | undefined
  /** performance.now() when the call started; 0 when nothing measures. */
  startedAt: number
  /** The plugin clock when the call started. */
  now: number
}

/** Once per identity per window, not once per request under a flood. */
function logRefusal (call: StoreCall, evaluation: Evaluation): void {
  const { input: { blocks }, origin, runtime, now } = call
  const { binding, rejected, decision } = evaluation
  const block = blocks[binding]
  if (!runtime.rejections.first(block?.key ?? '', now, now + Math.max(decision.resetMs, decision.retryAfterMs, 1000))) return
  const fields = { route: origin.route, identityKind: block?.compiled.identity.kinds, policy: decision.policy, limit: decision.limit, violated: rejected ? evaluation.violated : evaluation.shadowViolated }
  if (rejected) origin.log.info(fields, 'rate limit exceeded')
  else origin.log.info(fields, 'rate limit exceeded in shadow mode (not enforced)')
}

/**
 * After `done` has the evaluation: the store failure's report, the refusal
 * log, metrics and the decision channel. Telemetry runs after delivery and
 * isolated (metrics instruments are: diagnostics.ts; Node isolates channel
 * subscribers), so a throwing meter or logger never leaves a request
 * unanswered; a throw is logged once per burst. `failure`: the store's error
 * when onRedisError decided.
 */
function report (call: StoreCall, evaluation: Evaluation, durationMs: number, failure: unknown): void {
  const { input, origin, runtime } = call
  try {
    if (failure !== undefined) reportFailure(input, origin, runtime, failure)
    else if (evaluation.rejected || evaluation.decision.outcome === 'shadow-limited') logRefusal(call, evaluation)
    publish(runtime, input, origin, evaluation, durationMs, failure)
  } catch (error) {
    runtime.telemetry.report(origin.log, { err: error }, TELEMETRY_THREW)
  }
}

/** A deny-cache answer's report: metrics and the decision channel alone (its refusal was logged when the store gave it), isolated as report's. */
function reportCached (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime, evaluation: Evaluation, durationMs: number): void {
  try {
    publish(runtime, input, origin, evaluation, durationMs)
  } catch (error) {
    runtime.telemetry.report(origin.log, { err: error }, TELEMETRY_THREW)
  }
}

/** Delivers a store call's evaluation (its duration measured before), then reports it. */
function deliver (call: StoreCall, evaluation: Evaluation, failure: unknown): void {
  const durationMs = since(call.startedAt)
  // The place goes with a decision that holds or queues (its caller passes it on), else it is returned now.
  const { place } = call
  if (place !== undefined) {
    if (evaluation.turnMs > 0 || evaluation.queued) evaluation.place = place
    else place.release()
  }
  call.done(evaluation)
  // A place in a slot's queue is not an answer: the wait's end is reported (kinds/concurrency/slot-wait.ts).
  if (!evaluation.queued) report(call, evaluation, durationMs, failure)
}

/**
 * The store failed (or its node's breaker is open): the route's onRedisError
 * decides, and the waiters on the same node meet it now, not at their next
 * poll (those on other nodes are decided as usual).
 */
function storeFailed (call: StoreCall, error: unknown): void {
  const { waiters, store } = call.runtime
  if (waiters.size > 0) {
    const node = store.nodeOf(call.input.blocks[0]?.key ?? '')
    queueMicrotask(() => { waiters.wakeWhere((key) => store.nodeOf(key) === node) })
  }
  degraded(call.input, call.origin, call.runtime).then((evaluation) => { deliver(call, evaluation, error) }, call.fail)
}

/** Ms since `startedAt`; 0 when nothing measures (startedAt 0). */
function since (startedAt: number): number {
  return startedAt === 0 ? 0 : performance.now() - startedAt
}

/**
 * Decides one request (or one consume() call): the local deny cache first,
 * then one store call for every block. `done` gets the Evaluation once, and
 * only then is the decision reported (see report); a store failure becomes a
 * degraded decision by the route's onRedisError. `fail` gets what went wrong
 * in deciding after the store call; before it, such an error is thrown. On
 * the common path no promise of its own: the route hook continues straight
 * from the store's reply.
 */
export function evaluateThen (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime, done: (evaluation: Evaluation) => void, fail: (error: Error) => void): void {
  const startedAt = runtime.metrics !== undefined || decisionChannel.hasSubscribers ? performance.now() : 0
  const { denyCache } = runtime
  const now = runtime.clock()

  // 1. The local deny cache: any enforced block still refused → answer here.
  const cached = denyCache !== undefined && denyCache.size > 0 ? fromDenyCache(denyCache, input, now) : undefined
  if (cached !== undefined) {
    const evaluation = fromCache(input, runtime, cached)
    const durationMs = since(startedAt)
    done(evaluation)
    reportCached(input, origin, runtime, evaluation, durationMs)
    return
  }

  // 2. One store call for every block; its failure → onRedisError.
  let place: Place | undefined
  if (input.policy.delays) {
    const turns = turnsFor(input, origin, runtime)
    input = turns.input
    place = turns.place
    // A waiter's wake-up may arrive before this call's reply (kinds/concurrency/waiters.ts add).
    input.sentAt = performance.now()
  }
  // A failure after the call returns the place too (deliver returns it on every answer).
  const failed = place === undefined ? fail : (error: Error): void => { place.release(); fail(error) }
  const call: StoreCall = { input, origin, runtime, done, fail: failed, place, startedAt, now }
  try {
    // The store asks the breaker of the node that holds these keys (store/redis/breakers.ts).
    runtime.store.decide(input, 'charge').then(({ decisions, at, call: measured }) => {
      let evaluation: Evaluation
      try {
        evaluation = fromStore(call, decisions, at)
        evaluation.storeCall = measured
      } catch (error) {
        failed(error as Error)
        return
      }
      deliver(call, evaluation, undefined)
    }, (error: unknown) => {
      storeFailed(call, error)
    })
  } catch (error) {
    // Thrown before the call was made: the caller gets the throw, the place comes back.
    place?.release()
    throw error
  }
}

/** Whether a block's run may hold the request (a `delay`, for a caller that holds) or queue it (a `wait`, for one that waits). */
function mayHoldOrQueue (blocks: readonly RequestBlock[], holds: boolean, waits: boolean): boolean {
  for (const { run } of blocks) {
    if (run.params.delayMs !== undefined && (run.kind.holdsSlot ? waits : holds)) return true
  }
  return false
}

/**
 * A policy with `delay` or `wait`: its runs may reserve a later turn when the
 * caller holds the request, or join a slot's queue when it waits, when a
 * place under maxDelayed is free: taken now, before the call, so a burst in
 * flight counts (kinds/delay/holds.ts). None free: only what fits now is admitted,
 * counted `undelayed`. A waiter's own polls keep their place (it is counted
 * among the waiters).
 */
function turnsFor (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime): { input: DecisionInput, place?: Place } {
  if (origin.inQueue === true) return { input }
  const holds = origin.holds === true
  const waits = origin.waits === true
  if (mayHoldOrQueue(input.blocks, holds, waits)) {
    const place = runtime.holds.take()
    if (place !== undefined) return { input: holds && waits ? input : withoutTurnsOf(input, holds, waits), place }
    runtime.stats.undelayed++
  }
  return { input: withoutTurnsOf(input) }
}

/** The input with its delaying runs' turns left out (withoutTurns); its runs are no compiled list then. */
function withoutTurnsOf (input: DecisionInput, turns = false, waits = false): DecisionInput {
  return { ...input, blocks: withoutTurns(input.blocks, turns, waits), compiledBlocks: undefined }
}

/** evaluateThen as a promise (the API, and the hook's paths that already wait on the application). Never rejects for a store failure. */
export function evaluate (input: DecisionInput, origin: DecisionOrigin, runtime: Runtime): Promise<Evaluation> {
  return new Promise((resolve, reject) => { evaluateThen(input, origin, runtime, resolve, reject) })
}

/** A refusal the deny cache answered. */
function fromCache (input: DecisionInput, runtime: Runtime, cached: Array<RawDecision | undefined>): Evaluation {
  runtime.stats.limited++
  const verdict = combine(input.blocks, cached)
  if (verdict.outcome === 'penalized') runtime.stats.penalized++
  return toEvaluation(input, cached, verdict, 'deny-cache', 'charge')
}

/** The store's decisions (taken at `at`, its clock), combined, counted and remembered (refusals). */
function fromStore ({ input, origin, runtime, now }: StoreCall, decisions: RawDecision[], at: number): Evaluation {
  const { stats, denyCache } = runtime
  const verdict = combine(input.blocks, decisions)
  const { rejected, outcome } = verdict
  if (verdict.queued) {
    // Waiting for a slot: counted when the wait ends.
  } else if (rejected) {
    stats.limited++
    if (outcome === 'penalized') stats.penalized++
    if (denyCache !== undefined) rememberRefusals(denyCache, input, decisions, now)
  }
  const evaluation = toEvaluation(input, decisions, verdict, origin.source, 'charge')
  evaluation.chargedAt = at
  if (!rejected) {
    stats.allowed++
    if (evaluation.decision.outcome === 'shadow-limited') stats.shadowLimited++
    else if (evaluation.decision.outcome === 'delayed') stats.delayed++
  }
  return evaluation
}

/**
 * A wait for a slot ran out: its last queued answer as the refusal (a slot
 * refusal's Retry-After), counted and reported as a store's refusal is.
 */
export function refusedAfterWait (last: Evaluation, origin: DecisionOrigin, runtime: Runtime): Evaluation {
  const { input } = last
  const decisions = last.decisions.map((decision) => decision?.queued === undefined ? decision : { ...decision, remaining: 0, queued: undefined })
  const verdict = combine(input.blocks, decisions)
  const evaluation = toEvaluation({ ...input, waitedMs: undefined }, decisions, verdict, origin.source, 'charge')
  evaluation.chargedAt = last.chargedAt
  runtime.stats.limited++
  runtime.stats.waitExpired++
  const call: StoreCall = { input, origin, runtime, done: () => {}, fail: () => {}, place: undefined, startedAt: 0, now: runtime.clock() }
  report(call, evaluation, 0, undefined)
  return evaluation
}

/**
 * A dry decision (the API's peek): the store decides and writes nothing, and
 * the same combine applies; `remaining` is what is available now. Store
 * failures reject (the caller asked for state, not for a request to pass).
 */
export async function peek (input: DecisionInput, runtime: Runtime): Promise<RateLimitDecision> {
  const { decisions } = await runtime.store.decide(input, 'peek')
  return toEvaluation(input, decisions, combine(input.blocks, decisions), 'api', 'peek').decision
}
