import type { DecisionSource, Outcome } from '../diagnostics.js'
import type { PictureRow, RouteCounts } from '../types/index.js'

/*
 * What one instance counts for its published picture (publisher.ts): per
 * route and binding policy, the decisions of the current interval, and per
 * route the callers refused most (a Space-Saving summary). Counting is a few
 * increments in memory on a decision's report, never a store call; the
 * publisher takes the interval's counts once per interval.
 */

/** A caller in a route's summary: its weight (decayed count) and the most it may be overestimated by. */
export interface CallerCount {
  /** The identity part of the caller's key (a canonical IP or hashes: never a raw user id or API key). */
  identity: string
  count: number
  error: number
}

/**
 * Space-Saving (Metwally, Agrawal, El Abbadi 2005) over at most `capacity`
 * callers: a caller not held replaces the one with the smallest count and
 * inherits it as its error, so each count overestimates by at most its
 * error, and any caller with more than total/capacity refusals is held.
 * Memory: `capacity` entries. `decay` halves every count once per interval,
 * so the summary follows who is refused now.
 */
export class TopCallers {
  readonly #capacity: number
  readonly #counts = new Map<string, CallerCount>()

  constructor (capacity: number) {
    this.#capacity = capacity
  }

  add (identity: string): void {
    const held = this.#counts.get(identity)
    if (held !== undefined) {
      held.count++
      return
    }
    if (this.#counts.size < this.#capacity) {
      this.#counts.set(identity, { identity, count: 1, error: 0 })
      return
    }
    let smallest: CallerCount | undefined
    for (const entry of this.#counts.values()) if (smallest === undefined || entry.count < smallest.count) smallest = entry
    if (smallest === undefined) return
    this.#counts.delete(smallest.identity)
    this.#counts.set(identity, { identity, count: smallest.count + 1, error: smallest.count })
  }

  /** The callers held, most refused first. */
  list (): CallerCount[] {
    return [...this.#counts.values()].sort((a, b) => b.count - a.count).map((entry) => ({ ...entry }))
  }

  /** Halves every count (and error); drops callers whose count falls below one half. */
  decay (): void {
    for (const [identity, entry] of this.#counts) {
      entry.count /= 2
      entry.error /= 2
      if (entry.count < 0.5) this.#counts.delete(identity)
    }
  }

  get size (): number {
    return this.#counts.size
  }
}

function emptyCounts (route: string, policy: string): RouteCounts {
  return { route, policy, admitted: 0, refused: 0, degraded: 0, delayed: 0, waited: 0, denyCache: 0, banned: 0, skipped: 0 }
}

/** Routes an instance counts at most: a bound on memory for apps with many routes (the rest fold into one row). */
const MAX_ROWS = 2000
const OTHER = '(other routes)'

export class PictureCounters {
  readonly #capacity: number
  readonly #length: number
  /** By route, then by policy: two lookups and no string built per decision. */
  #rows = new Map<string, Map<string, RouteCounts>>()
  #size = 0
  readonly #series = new Map<string, PictureRow>()
  readonly #top = new Map<string, TopCallers>()

  /** `capacity`: callers held per route (TopCallers); `length`: intervals each series keeps. */
  constructor (capacity: number, length: number) {
    this.#capacity = capacity
    this.#length = length
  }

  #row (route: string, policy: string): RouteCounts {
    let byPolicy = this.#rows.get(route)
    let row = byPolicy?.get(policy)
    if (row === undefined) {
      if (this.#size >= MAX_ROWS && route !== OTHER) return this.#row(OTHER, OTHER)
      if (byPolicy === undefined) this.#rows.set(route, byPolicy = new Map())
      row = emptyCounts(route, policy)
      byPolicy.set(policy, row)
      this.#size++
    }
    return row
  }

  /** One decision, as the decision channel reports it; `caller`: the refused caller's identity, when it has one. */
  count (route: string, policy: string, outcome: Outcome, source: DecisionSource, waited: boolean, caller: string | undefined): void {
    const row = this.#row(route, policy)
    if (waited) row.waited++
    switch (outcome) {
      case 'allowed':
      case 'shadow-limited':
        row.admitted++
        return
      case 'delayed':
        row.admitted++
        row.delayed++
        return
      case 'limited':
      case 'penalized':
        row.refused++
        if (source === 'deny-cache') row.denyCache++
        if (caller !== undefined && this.#capacity > 0) this.#callers(route).add(caller)
        return
      case 'degraded':
        row.degraded++
        return
      case 'banned':
        row.banned++
        return
      case 'skipped':
        row.skipped++
    }
  }

  #callers (route: string): TopCallers {
    let top = this.#top.get(route)
    if (top === undefined) {
      top = new TopCallers(this.#capacity)
      this.#top.set(route, top)
    }
    return top
  }

  /**
   * The interval's counts with each row's series (a fresh interval starts; a
   * row quiet for a whole series is dropped), and every route's callers,
   * decayed after they are read.
   */
  take (): { rows: PictureRow[], callers: Array<{ route: string, callers: CallerCount[] }> } {
    const current = new Map<string, RouteCounts>()
    for (const byPolicy of this.#rows.values()) for (const counts of byPolicy.values()) current.set(counts.route + '\n' + counts.policy, counts)
    this.#rows = new Map()
    this.#size = 0
    for (const [id, counts] of current) {
      if (!this.#series.has(id)) this.#series.set(id, { ...counts, series: { admitted: [], refused: [], degraded: [] } })
    }
    const rows: PictureRow[] = []
    for (const [id, row] of this.#series) {
      const counts = current.get(id) ?? emptyCounts(row.route, row.policy)
      const { series } = row
      for (const name of ['admitted', 'refused', 'degraded'] as const) {
        series[name].push(counts[name])
        if (series[name].length > this.#length) series[name].shift()
      }
      if (current.get(id) === undefined && [...series.admitted, ...series.refused, ...series.degraded].every((n) => n === 0)) {
        this.#series.delete(id)
        continue
      }
      rows.push({ ...counts, series: { admitted: [...series.admitted], refused: [...series.refused], degraded: [...series.degraded] } })
    }
    const callers: Array<{ route: string, callers: CallerCount[] }> = []
    for (const [route, top] of this.#top) {
      callers.push({ route, callers: top.list() })
      top.decay()
      if (top.size === 0) this.#top.delete(route)
    }
    return { rows, callers }
  }
}
