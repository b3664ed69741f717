/**
 * The reference model of one block for one caller: the memory store's
 * algorithms (lib/store/memory/), fed a sequence of charges and give-backs at
 * chosen times, then asked whether a request would be admitted. The checker
 * builds one sequence per question: the most favourable to admission when it
 * judges an admission, the least favourable when it judges a refusal.
 */
import { memoryAlgorithms } from '../../lib/kinds/window/memory/algorithms.js'
import type { AlgorithmName, BlockParams } from '../../lib/store/algorithms.js'
import type { ChaosRoute } from './routes.js'

export type ModelEvent =
  | { kind: 'charge', at: number, cost: number }
  | { kind: 'give-back', at: number, units: number, chargedAt: number }
  | { kind: 'extra', at: number, units: number }

const DAY = 86_400_000

function params (route: ChaosRoute, at: number, limit: number): BlockParams {
  const base: BlockParams = route.delayMs === undefined ? { limit, windowMs: route.windowMs, burst: limit } : { limit, windowMs: route.windowMs, burst: limit, delayMs: route.delayMs, hold: true }
  return route.period === 'day' ? { ...base, start: Math.floor(at / DAY) * DAY } : base
}

/** A charge the model would refuse, made anyway (sliding-log has no overdraft step: its entries are added). */
function forced (route: ChaosRoute, state: unknown, p: BlockParams, cost: number, at: number): unknown {
  if (route.algorithm === 'sliding-log') return [...(state as number[] | undefined ?? []), ...new Array<number>(cost).fill(at)].sort((a, b) => a - b)
  return memoryAlgorithms[route.algorithm as AlgorithmName].charge?.(state, p, cost, at)?.state ?? state
}

/** Whether `cost` would be admitted at `at` after `events` (sorted by time), with `limit` in force. */
export function modelAdmits (route: ChaosRoute, events: readonly ModelEvent[], at: number, cost: number, limit = route.limit): boolean {
  if (route.algorithm === 'concurrency') throw new Error('concurrency is checked by intervals')
  const algorithm = memoryAlgorithms[route.algorithm]
  let state: unknown
  for (const event of events) {
    const p = params(route, event.at, limit)
    if (event.kind === 'charge') {
      const step = algorithm.step(state, p, event.cost, event.at)
      // An admission the model would refuse is charged anyway: what Redis holds is what it admitted.
      if (step.decision.allowed) state = step.state ?? state
      else state = forced(route, state, p, event.cost, event.at)
    } else if (event.kind === 'give-back') {
      const changed = algorithm.refund?.(state, p, event.units, event.at, event.chargedAt)
      if (changed !== undefined) state = changed.state
    } else {
      const changed = algorithm.charge?.(state, p, event.units, event.at)
      if (changed !== undefined) state = changed.state
    }
  }
  return algorithm.step(state, params(route, at, limit), cost, at).decision.allowed
}
