import { item } from './item.js'
/*
 * General checks and message parts every validating tier shares (options,
 * policy, request inputs, the programmatic API); each caller throws its own
 * coded error with the message built here.
 */

/** An integer (Number.isInteger, as a type guard). */
export function isInteger (value: unknown): value is number {
  return Number.isInteger(value)
}

/** An integer from 1 to `max`. */
export function isCount (value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max
}

/** Whether `value` is one of `choices` (a type guard, as `includes` is not). */
export function isOneOf<T> (value: unknown, choices: readonly T[]): value is T {
  return choices.some((choice) => choice === value)
}

/** The message for a value that is none of `choices`: `must be 'a', 'b' or false (got "x")`. */
export function choiceMessage<T extends string | false> (value: unknown, choices: readonly T[]): string {
  const shown = choices.map((choice) => choice === false ? 'false' : `'${choice}'`)
  const list = shown.length === 1 ? item(shown, 0) : `${shown.slice(0, -1).join(', ')} or ${item(shown, shown.length - 1)}`
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
