import { randomBytes } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { DecisionInput, Evaluation, Runtime } from '../../decide/contract.js'
import { slotReleases } from '../../store/port.js'
import type { HeldSlots } from './slot-keeper.js'

/*
 * A request's slots (concurrency blocks) on the decision's side: its slot id,
 * and after an admitted decision, holding the slots it took (slot-keeper.ts
 * renews and releases them). A slot id is unique per request fleet-wide: this
 * process's random tag and a counter, starting with a letter (the scripts
 * tell it from a cost by that).
 */

const PROCESS_TAG = randomBytes(6).toString('base64url')
let counter = 0

/** A new slot id: `s<process tag><counter>`, never a number. */
export function newSlotId (): string {
  counter++
  return `s${PROCESS_TAG}${counter.toString(36)}`
}

/**
 * After an admitted decision with slots: holds them where they were taken
 * (the store, or this instance's local limiter for onRedisError 'local').
 * Undefined when none was taken: refused, or the store failed and
 * onRedisError let the request through without one.
 */
export function holdSlots (runtime: Runtime, input: DecisionInput, evaluation: Evaluation, log: FastifyBaseLogger): HeldSlots | undefined {
  if (evaluation.rejected || input.slot === undefined || evaluation.decision.outcome === 'degraded') return undefined
  const entries = slotReleases(input)
  if (entries.length === 0) return undefined
  const store = evaluation.source === 'local' ? runtime.localStore() : runtime.store
  return runtime.slots.hold(store, entries, log)
}
