import { MAX_WINDOW_MS, MIN_WINDOW_MS } from './algorithm-types.js'

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }
const DURATION = /^(\d+)\s*(ms|s|m|h|d)$/

/**
 * Parses a window: milliseconds as a number, or `'500ms'`, `'1s'`, `'15m'`,
 * `'1h'`, `'1d'`. Returns an error message instead of throwing so the caller
 * can name the route and field in its coded error.
 */
export function parseWindow (value: unknown): number | string {
  let ms: number
  if (typeof value === 'number') {
    ms = value
  } else if (typeof value === 'string') {
    const match = DURATION.exec(value.trim())
    if (match === null) return `must be milliseconds or a duration like '500ms', '1s', '15m', '1h', '1d' (got ${JSON.stringify(value)})`
    ms = Number(match[1]) * (UNIT_MS[match[2] as string] as number)
  } else {
    return `must be milliseconds or a duration string (got ${typeof value})`
  }
  if (!Number.isInteger(ms)) return `must be a whole number of milliseconds (got ${ms})`
  if (ms < MIN_WINDOW_MS || ms > MAX_WINDOW_MS) return `must be between ${MIN_WINDOW_MS} ms and 1 day (got ${ms} ms)`
  return ms
}
