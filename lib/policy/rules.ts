import { isCount } from '../util/validate.js'
import { MAX_COST, MAX_POLICY_NAME_LENGTH } from '../limits.js'

/*
 * The names and choices a policy may hold, and the checks of its numbers,
 * shared by the option validator (options/), the block compiler (block.ts)
 * and the programmatic API (api/): each is written once here. Their bounds
 * are in the limits table (lib/limits.ts).
 */

/** Policy names: shown in headers and problem bodies as they are. */
const POLICY_NAME = new RegExp(`^[\\x20-\\x7e]{1,${MAX_POLICY_NAME_LENGTH}}$`)

export function isPolicyName (value: unknown): value is string {
  return typeof value === 'string' && POLICY_NAME.test(value)
}

export const POLICY_NAME_RULE = `1 to ${MAX_POLICY_NAME_LENGTH} printable ASCII characters`

export function isCost (value: unknown): value is number {
  return isCount(value, MAX_COST)
}

export const FAILURE_POLICIES = ['open', 'closed', 'local'] as const
export const MODES = ['enforce', 'shadow'] as const
/** Request lifecycle stages the decision may run at, earliest first (plugin option and block field `hook`). */
export const HOOKS = ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const
