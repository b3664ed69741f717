import { parse } from '@lukeed/ms'
import { DAY_MS, MAX_DURATION_LENGTH, MAX_DURATION_MS, MIN_WINDOW_MS } from '../limits.js'

const EXAMPLES = "'500ms', '1s', '1m', '15 minutes', '1 hour', '1d'"
/** `@lukeed/ms` reads '1M' as one minute and has no month: refused with a pointer to `period`. */
const CAPITAL_M = /^[-+]?[\d.]*\s*M$/
const MONTH_WORD = /^[-+]?[\d.]*\s*(?:mos?|months?)$/i

/**
 * Parses a duration: milliseconds as a number, or a duration string read by
 * `@lukeed/ms`, as `@fastify/rate-limit` reads `timeWindow`: `'500ms'`,
 * `'1s'`, `'15m'`, `'1 minute'`, `'15 minutes'`, `'1.5h'`, `'1 day'`, `'1w'`,
 * `'1y'` (case does not matter, except `M`; a bare number string is
 * milliseconds). The result must be a whole number of milliseconds from
 * MIN_WINDOW_MS to `maxMs` (one day unless the caller says: a block's
 * `window` goes to MAX_WINDOW_MS, penalties and the breaker's cooldown stay
 * within a day). Returns an error message instead of throwing so the caller
 * can name the route and field in its coded error; a message about a string
 * quotes it.
 */
export function parseWindow (value: unknown, maxMs = MAX_DURATION_MS): number | string {
  if (typeof value === 'number') return checkRange(value, `${value}`, maxMs)
  if (typeof value !== 'string') {
    return `must be milliseconds or a duration string like ${EXAMPLES} (got ${value === null ? 'null' : typeof value})`
  }
  const quoted = JSON.stringify(value)
  const text = value.trim()
  if (CAPITAL_M.test(text) || MONTH_WORD.test(text)) {
    return `has no month unit (got ${quoted}; '1M' would read as one minute): use period: 'month' for a calendar month, or '30d'`
  }
  const ms = text.length > 0 && text.length <= MAX_DURATION_LENGTH ? parse(text) : undefined
  // @lukeed/ms gives undefined for what it cannot read, and for a zero amount ('0s').
  if (ms === undefined || Number.isNaN(ms)) {
    return `must be milliseconds or a duration string like ${EXAMPLES} (got ${quoted})`
  }
  return checkRange(ms, `${quoted} = ${ms}`, maxMs)
}

/** `1 day`, `366 days`, or ms when not whole days. */
function shownMax (ms: number): string {
  if (ms % DAY_MS !== 0) return `${ms} ms`
  return ms === DAY_MS ? '1 day' : `${ms / DAY_MS} days`
}

function checkRange (ms: number, shown: string, maxMs: number): number | string {
  if (!Number.isInteger(ms)) return `must be a whole number of milliseconds (got ${shown})`
  if (ms < MIN_WINDOW_MS || ms > maxMs) return `must be between ${MIN_WINDOW_MS} ms and ${shownMax(maxMs)} (got ${shown} ms)`
  return ms
}
