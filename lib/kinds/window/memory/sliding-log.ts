import type { MemoryAlgorithm } from '../../../store/algorithms.js'
import { decision } from './math.js'
import { item } from '../../../util/item.js'

/** sliding-log state: one timestamp per admitted unit, sorted ascending. Lua: a sorted set. */
export type SlidingLogState = readonly number[]

/** Index of the first element > x in a sorted array. */
function upperBound (a: readonly number[], x: number): number {
  let lo = 0
  let hi = a.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (item(a, mid) <= x) lo = mid + 1
    else hi = mid
  }
  return lo
}

export const slidingLog: MemoryAlgorithm<SlidingLogState> = {
  step (state, { limit, windowMs: w }, cost, now) {
    now = Math.floor(now)
    const all = state ?? []
    const cut = upperBound(all, now - w)
    const log = cut === 0 ? all : all.slice(cut)
    const count = log.length
    if (cost <= limit && count + cost <= limit) {
      const at = upperBound(log, now)
      const next = log.slice(0, at)
      for (let i = 0; i < cost; i++) next.push(now)
      for (let i = at; i < count; i++) next.push(item(log, i))
      // same formula as Lua (PEXPIRE W); equal to newest + W - now unless the clock went backwards
      return { decision: decision(true, limit - count - cost, w, 0, count > 0 ? item(log, 0) + w - now : w), state: next, ttlMs: Math.max(w, item(next, next.length - 1) + w - now) }
    }
    const available = Math.max(0, limit - count)
    const pruned = cut === 0 ? undefined : log
    const ttlMs = count === 0 ? 0 : item(log, count - 1) + w - now
    if (count === 0) {
      return { decision: decision(false, available, 0, w, 0), state: pruned, ttlMs }
    }
    let retry = w
    if (cost <= limit) {
      const k = count + cost - limit
      retry = item(log, k - 1) + w - now
    }
    // one more unit frees when the k-th oldest expires, k = count + available + 1 - limit (1 unless the limit was lowered)
    const nextMs = item(log, count + available - limit) + w - now
    return { decision: decision(false, available, item(log, count - 1) + w - now, retry, nextMs), state: pruned, ttlMs }
  }
}
