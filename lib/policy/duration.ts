import { parse } from '@lukeed/ms'
import { MAX_WINDOW_MS, MIN_WINDOW_MS } from '../store/algorithms.js'

/** Longer strings are refused before parsing: no duration needs them, and the parser's regex backtracks on long digit runs. */
const MAX_DURATION_LENGTH = 64
const EXAMPLES = "'500ms', '1s', '1m', '15 minutes', '1 hour', '1d'"

/**
 * Parses a window: milliseconds as a number, or a duration string read by
 * `@lukeed/ms`, as `@fastify/rate-limit` reads `timeWindow`: `'500ms'`,
 * `'1s'`, `'15m'`, `'1 minute'`, `'15 minutes'`, `'1.5h'`, `'1 day'` (case
 * does not matter; a bare number string is milliseconds). The result must
 * still be a whole number of milliseconds from MIN_WINDOW_MS to MAX_WINDOW_MS.
 * Returns an error message instead of throwing so the caller can name the
 * route and field in its coded error; a message about a string quotes it.
 */
export function parseWindow (value: unknown): number | string {
  if (typeof value === 'number') return checkRange(value, `${value}`)
  if (typeof value !== 'string') {
    return `must be milliseconds or a duration string like ${EXAMPLES} (got ${value === null ? 'null' : typeof value})`
  }
  const quoted = JSON.stringify(value)
  const text = value.trim()
  const ms = text.length > 0 && text.length <= MAX_DURATION_LENGTH ? parse(text) : undefined
  // @lukeed/ms gives undefined for what it cannot read, and for a zero amount ('0s').
  if (ms === undefined || Number.isNaN(ms)) {
    return `must be milliseconds or a duration string like ${EXAMPLES} (got ${quoted})`
  }
  return checkRange(ms, `${quoted} = ${ms}`)
}

function checkRange (ms: number, shown: string): number | string {
  if (!Number.isInteger(ms)) return `must be a whole number of milliseconds (got ${shown})`
  if (ms < MIN_WINDOW_MS || ms > MAX_WINDOW_MS) return `must be between ${MIN_WINDOW_MS} ms and 1 day (got ${shown} ms)`
  return ms
}
