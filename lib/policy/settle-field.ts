import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Fail } from './block-fields.js'
import { burstOf, limitOf, type Shape } from './shape.js'
import { shown } from '../util/validate.js'

/*
 * The block field `settle`: the units a request actually used, known when it
 * ends (request/end-of-request.ts charges or gives back the difference from
 * the reservation, `cost`). An overdraft keeps usage up to one capacity over
 * the limit (scripts/*.lua mode 3), so sliding-window, token-bucket and gcra
 * hold twice their scaled capacity: 2 × max(limit, burst) × windowMs must stay
 * an exact integer (below 2^53).
 */

/** `settle(request, reply)`: an integer from 0 to the block's capacity, sync or async. */
export type SettleFunction = (request: FastifyRequest, reply: FastifyReply) => unknown

/** Algorithms whose state is scaled by the window (or multiplied by it): an overdraft doubles what must stay exact. */
const SCALED = new Set(['sliding-window', 'token-bucket', 'gcra'])

/** The largest limit or burst a settled block of this window takes: 2 × capacity × windowMs <= 2^53 - 1. */
export function settleMaxLimit (windowMs: number): number {
  return Math.floor(Number.MAX_SAFE_INTEGER / (2 * windowMs))
}

/**
 * The field, validated, and the block's largest limit with it (requestLimit
 * and overrides stay below it). `named`: a block of the `policies` option,
 * which no request reaches (its usage changes through `adjust`).
 */
export function readSettle (input: Record<string, unknown>, shape: Shape, named: boolean, fail: Fail): { settle: SettleFunction | undefined, maxLimit: number } {
  const { settle } = input
  if (settle === undefined) return { settle: undefined, maxLimit: shape.maxLimit }
  if (typeof settle !== 'function') fail('settle', `must be a function (request, reply) => number | Promise<number> (got ${shown(settle)})`)
  if (named) fail('settle', 'needs a request: a named policy is charged by consume(); report usage later with fastify.rateLimit.adjust()')
  if (shape.algorithm === 'sliding-log') fail('settle', 'is not supported by sliding-log (it stores one entry per request; use fixed-window, sliding-window, token-bucket or gcra)')
  if (input.refundOn !== undefined) fail('settle', 'cannot be combined with refundOn on one block (a settle that returns 0 gives the whole reservation back)')
  if (!SCALED.has(shape.algorithm)) return { settle: settle as SettleFunction, maxLimit: shape.maxLimit }
  const bound = settleMaxLimit(shape.windowMs)
  for (const tier of shape.tierNames) {
    const limit = limitOf(shape, tier)
    const capacity = Math.max(limit, burstOf(shape, tier, limit))
    if (capacity > bound) {
      fail('settle', `needs 2 × max(limit, burst) × windowMs below 2^53 (an overdraft may double the usage): at most ${bound} for a ${shape.windowMs} ms window (got ${capacity})`)
    }
  }
  return { settle: settle as SettleFunction, maxLimit: Math.min(shape.maxLimit, bound) }
}
