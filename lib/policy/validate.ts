/*
 * Rules shared by the option validator (options.ts), the block compiler
 * (block.ts) and the programmatic API (api.ts): each is written once here, and
 * each caller throws its own coded error with the message built here.
 */

/** Most units one request may spend: keeps every script value an exact integer. */
export const MAX_COST = 100_000_000

/** Policy names: shown in headers and problem bodies as they are. */
const POLICY_NAME = /^[\x20-\x7e]{1,64}$/

export function isPolicyName (value: unknown): value is string {
  return typeof value === 'string' && POLICY_NAME.test(value)
}

export const POLICY_NAME_RULE = '1 to 64 printable ASCII characters'

/** An integer from 1 to `max`. */
export function isCount (value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max
}

export function isCost (value: unknown): value is number {
  return isCount(value, MAX_COST)
}

/**
 * Undefined when `value` is one of `choices`, else the message
 * `must be 'a', 'b' or false (got "x")`.
 */
export function choiceProblem<T extends string | false> (value: unknown, choices: readonly T[]): string | undefined {
  if ((choices as readonly unknown[]).includes(value)) return undefined
  const shown = choices.map((choice) => choice === false ? 'false' : `'${choice}'`)
  const list = shown.length === 1 ? shown[0] as string : `${shown.slice(0, -1).join(', ')} or ${shown[shown.length - 1] as string}`
  return `must be ${list} (got ${JSON.stringify(value)})`
}

/**
 * A configuration value as an error message shows it after "got": strings
 * quoted, so `limit: '10'` reads `(got "10")`, never like the valid number 10.
 */
export function shown (value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? 'an array' : 'an object'
  return String(value)
}

export const FAILURE_POLICIES = ['open', 'closed', 'local'] as const
export const MODES = ['enforce', 'shadow'] as const
/** Request lifecycle stages the decision may run at, earliest first (plugin option and block field `hook`). */
export const HOOKS = ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const

/** Longest an async `by` / `user` / `apiKey` / `tier` / `requestLimit` function may take (option identityTimeout). */
export const MAX_IDENTITY_TIMEOUT_MS = 60_000
