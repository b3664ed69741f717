import { isCount } from '../util/validate.js'

/*
 * The limits and names a policy may hold, shared by the option validator
 * (options/), the block compiler (block.ts) and the programmatic API (api/):
 * each is written once here.
 */

/** Most units one request may spend: keeps every script value an exact integer. */
export const MAX_COST = 100_000_000

/** Policy names: shown in headers and problem bodies as they are. */
const POLICY_NAME = /^[\x20-\x7e]{1,64}$/

export function isPolicyName (value: unknown): value is string {
  return typeof value === 'string' && POLICY_NAME.test(value)
}

export const POLICY_NAME_RULE = '1 to 64 printable ASCII characters'

export function isCost (value: unknown): value is number {
  return isCount(value, MAX_COST)
}

export const FAILURE_POLICIES = ['open', 'closed', 'local'] as const
export const MODES = ['enforce', 'shadow'] as const
/** Request lifecycle stages the decision may run at, earliest first (plugin option and block field `hook`). */
export const HOOKS = ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const

/** Longest an async `by` / `user` / `apiKey` / `tier` / `requestLimit` function may take (option identityTimeout). */
export const MAX_IDENTITY_TIMEOUT_MS = 60_000
