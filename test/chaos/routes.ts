/**
 * The routes every chaos instance serves, and what the checker's model needs
 * to know about each block. One list, read by the instance (instance.ts) and
 * by the checker (checker.ts), so the model can never drift from the app.
 */
import type { AlgorithmName } from '../../lib/index.js'

export type ModelAlgorithm = AlgorithmName | 'concurrency'

export interface ChaosRoute {
  /** Short id used in schedules and reports. */
  id: string
  url: string
  /** A host constraint: two routes share method and URL under different hosts. */
  host?: string
  algorithm: ModelAlgorithm
  limit: number
  windowMs: number
  /** `period: 'day'` (UTC): a fixed-window count reset at each UTC midnight. */
  period?: 'day'
  onRedisError: 'open' | 'closed'
  /** cost from `x-cost`, settle from `x-use` (the reservation, then the actual units). */
  settle?: boolean
  /** refundOn: a 500 (the handler threw) gives the units back. */
  refundOn?: boolean
  /** gcra with `delay` (ms): admitted at a reserved turn up to this far ahead, held until it. */
  delayMs?: number
  /** concurrency with `wait` (ms): a request with no free slot waits up to this long in the fleet's queue. */
  waitMs?: number
  /** The highest `x-cost` the generator sends. */
  maxCost: number
  /** A POST with a JSON body, decided at `preHandler` (after the body is read; Node destroys a consumed request stream). */
  body?: true
}

export const ROUTES: readonly ChaosRoute[] = [
  { id: 'fw', url: '/fw', algorithm: 'fixed-window', limit: 6, windowMs: 1000, onRedisError: 'closed', settle: true, maxCost: 3 },
  { id: 'sw', url: '/sw', algorithm: 'sliding-window', limit: 5, windowMs: 2000, onRedisError: 'open', maxCost: 1 },
  { id: 'slog', url: '/slog', algorithm: 'sliding-log', limit: 3, windowMs: 1000, onRedisError: 'closed', maxCost: 1 },
  { id: 'tb', url: '/tb', algorithm: 'token-bucket', limit: 6, windowMs: 3_600_000, onRedisError: 'open', settle: true, maxCost: 6 },
  { id: 'gd', url: '/gd', algorithm: 'gcra', limit: 4, windowMs: 1000, delayMs: 800, onRedisError: 'closed', maxCost: 1 },
  { id: 'gcra', url: '/gcra', algorithm: 'gcra', limit: 4, windowMs: 1000, onRedisError: 'open', refundOn: true, maxCost: 1 },
  { id: 'day', url: '/day', algorithm: 'fixed-window', period: 'day', limit: 12, windowMs: 86_400_000, onRedisError: 'closed', maxCost: 1 },
  { id: 'conc', url: '/conc', algorithm: 'concurrency', limit: 1, windowMs: 60_000, onRedisError: 'open', maxCost: 1, body: true },
  { id: 'ta', url: '/tenant', host: 'a.chaos', algorithm: 'fixed-window', limit: 20, windowMs: 1000, onRedisError: 'open', maxCost: 1 },
  { id: 'tb2', url: '/tenant', host: 'b.chaos', algorithm: 'fixed-window', limit: 3, windowMs: 1000, onRedisError: 'closed', maxCost: 1 },
  { id: 'cw', url: '/cw', algorithm: 'concurrency', limit: 1, windowMs: 60_000, waitMs: 1000, onRedisError: 'closed', maxCost: 1 },
  // A burst past maxDelayed in one turn (schedules with a small maxDelayed only): fills the bound.
  { id: 'gb', url: '/gb', algorithm: 'gcra', limit: 2, windowMs: 1000, delayMs: 800, onRedisError: 'open', maxCost: 1 }
]

/** The routes random traffic and the tail probes draw from: those before `cw`, so older seeds keep their requests (cw and gb get bursts drawn last). */
export const DRAWN_ROUTES: readonly ChaosRoute[] = ROUTES.filter((route) => route.id !== 'cw' && route.id !== 'gb')

export const routeById = new Map(ROUTES.map((route) => [route.id, route]))

/** The route an override raises for one caller, and the limit it sets. */
export const OVERRIDE = { route: 'sw', target: 'GET /sw', limit: 40 } as const

/** The plugin's defaults the checker relies on (docs/options.md): none is set by the instances. */
export const DEFAULTS = { timeoutMs: 50, cooldownMs: 250, leaseMs: 60_000, pollMs: 1000 } as const
