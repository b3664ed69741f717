import type { MemoryAlgorithm, SlidingLogState } from './algorithms.js'
import { decision } from './math.js'

/** Index of the first element > x in a sorted array. */
function upperBound (a: readonly number[], x: number): number {
  let lo = 0
  let hi = a.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if ((a[mid] as number) <= x) lo = mid + 1
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
      for (let i = at; i < count; i++) next.push(log[i] as number)
      // same formula as Lua (PEXPIRE W); equal to newest + W - now unless the clock went backwards
      return { decision: decision(true, limit - count - cost, w, 0, count > 0 ? (log[0] as number) + w - now : w), state: next, ttlMs: Math.max(w, (next[next.length - 1] as number) + w - now) }
    }
    const available = Math.max(0, limit - count)
    const pruned = cut === 0 ? undefined : log
    const ttlMs = count === 0 ? 0 : (log[count - 1] as number) + w - now
    if (count === 0) {
      return { decision: decision(false, available, 0, w, 0), state: pruned, ttlMs }
    }
    let retry = w
    if (cost <= limit) {
      const k = count + cost - limit
      retry = (log[k - 1] as number) + w - now
    }
    // one more unit frees when the k-th oldest expires, k = count + available + 1 - limit (1 unless the limit was lowered)
    const nextMs = (log[count + available - limit] as number) + w - now
    return { decision: decision(false, available, (log[count - 1] as number) + w - now, retry, nextMs), state: pruned, ttlMs }
  }
}
