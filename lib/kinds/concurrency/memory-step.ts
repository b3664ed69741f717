import type { BlockParams, MemoryStep, RawDecision } from '../../store/algorithms.js'
import { SLOT_RETRY_MS } from './lease.js'

/*
 * Concurrency slots in one process, step for step as scripts/concurrency.lua:
 * the state maps each slot id to its lease's expiry (the sorted set's member
 * and score). `params.limit` is the number of slots, `params.windowMs` the lease.
 */

export type SlotState = ReadonlyMap<string, number>

/** The expiry after which no slot of the state matters (the Lua key's TTL: its longest lease). */
function lastExpiry (state: SlotState): number {
  let last = 0
  for (const expiry of state.values()) if (expiry > last) last = expiry
  return last
}

function liveCount (state: SlotState | undefined, now: number): number {
  let live = 0
  for (const expiry of state?.values() ?? []) if (expiry > now) live++
  return live
}

/** Take (when admitted): expired slots dropped, this one added. The dry pass and the take in one step, as the memory store runs it. */
export function slotStep (state: SlotState | undefined, params: BlockParams, slot: string, now: number): MemoryStep<SlotState> {
  const live = liveCount(state, now)
  const held = (state?.get(slot) ?? 0) > now
  let decision: RawDecision
  if (held) decision = { allowed: true, remaining: params.limit - live, resetMs: 0, retryAfterMs: 0, nextMs: 0 }
  else if (live < params.limit) decision = { allowed: true, remaining: params.limit - live - 1, resetMs: 0, retryAfterMs: 0, nextMs: 0 }
  else return { decision: { allowed: false, remaining: 0, resetMs: 0, retryAfterMs: SLOT_RETRY_MS, nextMs: 0 }, state: undefined, ttlMs: 0 }
  const next = new Map<string, number>()
  for (const [id, expiry] of state ?? []) if (expiry > now) next.set(id, expiry)
  next.set(slot, now + params.windowMs)
  return { decision, state: next, ttlMs: lastExpiry(next) - now }
}

/** Release: the state without this slot (undefined: drop the key); `removed` when it was a live one. */
export function slotRelease (state: SlotState | undefined, slot: string, now: number): { state: SlotState | undefined, removed: boolean } {
  const expiry = state?.get(slot)
  if (state === undefined || expiry === undefined) return { state, removed: false }
  const next = new Map(state)
  next.delete(slot)
  return { state: next.size === 0 ? undefined : next, removed: expiry > now }
}

/** Renew: a live slot's lease starts again from now; an expired or released one is not brought back. */
export function slotRenew (state: SlotState | undefined, params: BlockParams, slot: string, now: number): { state: SlotState, ttlMs: number } | undefined {
  if (state === undefined || (state.get(slot) ?? 0) <= now) return undefined
  const next = new Map(state)
  next.set(slot, now + params.windowMs)
  return { state: next, ttlMs: lastExpiry(next) - now }
}

/** A block's slot queue in one process (concurrency.lua's key..'q' and key..'l'): slot id → its waiter lease's expiry, in arrival order. */
export type SlotQueue = Map<string, number>

/** Waiters whose lease lapsed leave the queue (concurrency.lua dropLapsed). */
function dropLapsed (queue: SlotQueue, now: number): void {
  for (const [id, expiry] of queue) if (expiry <= now) queue.delete(id)
}

/** A block with `wait`: the slots held plus the waiters ahead against the limit (concurrency.lua dryQueued); a place in the queue answers `queued`. */
export function queuedSlotStep (state: SlotState | undefined, queue: SlotQueue | undefined, params: BlockParams, slot: string, now: number): MemoryStep<SlotState> {
  const step = slotStep(state, params, slot, now)
  if ((state?.get(slot) ?? 0) > now) return step
  if (queue !== undefined) dropLapsed(queue, now)
  const ids = queue === undefined ? [] : [...queue.keys()]
  const found = ids.indexOf(slot)
  const ahead = found === -1 ? ids.length : found
  if (liveCount(state, now) + ahead < params.limit) return step
  const decision: RawDecision = { allowed: false, remaining: 0, resetMs: 0, retryAfterMs: SLOT_RETRY_MS, nextMs: 0 }
  if (params.hold !== false) Object.assign(decision, { remaining: ahead, queued: ahead })
  return { decision, state: undefined, ttlMs: 0 }
}

/** Joins the queue, or keeps its place, with a lease from now (concurrency.lua join). */
export function joinQueue (queue: SlotQueue, slot: string, leaseMs: number, now: number): void {
  queue.set(slot, now + leaseMs)
}

/** Leaves the queue; whether waiters remain with a slot free for them (then the store announces the key: concurrency.lua leave). */
export function leaveQueue (queue: SlotQueue | undefined, state: SlotState | undefined, params: BlockParams, slot: string, now: number): boolean {
  if (queue === undefined) return false
  queue.delete(slot)
  return queue.size > 0 && liveCount(state, now) < params.limit
}
