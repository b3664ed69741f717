import type { BlockKind } from '../contract.js'
import { slotStep, type SlotState } from './memory-step.js'

/*
 * Concurrency blocks: `concurrency: N` in-flight requests of one identity
 * across the fleet, a sorted set of leased slots (scripts/concurrency.lua).
 * The run's `cost` on the wire is the request's slot id, its `windowMs` the lease.
 * With `wait` (params.delayMs), a request without a slot may wait in the
 * key's queue, fleet-wide in arrival order (waiters.ts).
 */

export const concurrencyKind: BlockKind = {
  name: 'concurrency',
  // A sorted set of leased slots; the lease is not part of it, so a new lease keeps the slots in flight.
  keySuffix: () => 'cc',
  holdsSlot: true,
  straight: false,
  callArg: (_cost, slot) => slot ?? '',
  // A block with `wait`: 'w' may join the slot's queue, 'o' keeps its order without joining (scripts/batch.lua queueFn).
  specTail: ({ params }) => params.delayMs === undefined ? '' : params.hold === false ? 'o' : 'w',
  chargeMark: (_run, _decision, at) => at,
  paramsAt: (run) => run.params,
  // A slot may free at any moment: a refusal is never cached.
  denyHold: () => undefined,
  /**
   * `"name";q=N;qu="concurrent-requests"` (draft-10's registered quota unit),
   * no `w`: slots do not refill over time. The single-valued formats' reset
   * of a refusal is its Retry-After, 1 s.
   */
  headerTerms: (run) => ({ quota: run.params.limit, windowSeconds: 1, params: ';qu="concurrent-requests"', slots: true }),
  memoryStep: (state, run, arg, now) => slotStep(state as SlotState | undefined, run.params, String(arg), now),
  // Slots are released or renewed (memory-step.ts), never charged or given back as units.
  memoryUnits: () => undefined
}
