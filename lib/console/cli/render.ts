import { MAX_SHOWN_CHARS } from '../../limits.js'

/*
 * What the CLI prints for people: every value escaped (identities, ban and
 * override actors and reasons are attacker- or operator-controlled text), in
 * aligned tables. `--json` prints the API's objects as they are instead.
 */

/** C0 and C1 controls, DEL, and the bidi controls that reorder a terminal line (U+200E/F, U+202A–202E, U+2066–2069). */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

/** One value as a table shows it: unsafe characters as visible `\xNN` / `\uNNNN` escapes (a backslash doubled), cut at MAX_SHOWN_CHARS. */
export function escapeText (value: unknown, max = MAX_SHOWN_CHARS): string {
  const text = typeof value === 'string' ? value : value === undefined || value === null ? '' : String(value)
  const escaped = text.replace(/\\/g, '\\\\').replace(UNSAFE, (char) => {
    const code = char.charCodeAt(0)
    return code <= 0xff ? '\\x' + code.toString(16).padStart(2, '0') : '\\u' + code.toString(16).padStart(4, '0')
  })
  return escaped.length <= max ? escaped : escaped.slice(0, max - 1) + '…'
}

/** Rows under a header, each cell escaped, columns padded to align (the last one unpadded). */
export function table (header: readonly string[], rows: ReadonlyArray<readonly unknown[]>): string {
  const cells = [header.map((cell) => escapeText(cell)), ...rows.map((row) => row.map((cell) => escapeText(cell)))]
  const widths = header.map((_, column) => Math.max(...cells.map((row) => [...(row[column] ?? '')].length)))
  return cells.map((row) => row.map((cell, column) => column === row.length - 1 ? cell : cell + ' '.repeat((widths[column] ?? 0) - [...cell].length)).join('  ').trimEnd()).join('\n')
}

/** `1h 2m`, `3.4s`, `250ms`: a duration as people read it. */
export function duration (ms: number): string {
  if (!Number.isFinite(ms)) return String(ms)
  if (ms < 1000) return `${Math.round(ms)}ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(1).replace(/\.0$/, '')}s`
  const parts: string[] = []
  let rest = Math.floor(ms / 1000)
  for (const [unit, size] of [['d', 86_400], ['h', 3600], ['m', 60], ['s', 1]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`)
      rest %= size
    }
  }
  return parts.slice(0, 2).join(' ')
}

/** A rate with up to two decimals. */
export function rate (perSecond: number): string {
  return perSecond === 0 ? '0' : perSecond >= 100 ? perSecond.toFixed(0) : perSecond.toFixed(2).replace(/\.?0+$/, '')
}

/** When a record lapses, relative to `now`: `in 59m 58s`, or `permanent`. */
export function expiry (expiresAt: number | null, now: number): string {
  return expiresAt === null ? 'permanent' : `in ${duration(Math.max(0, expiresAt - now))}`
}

/** An identity record (`{ ip: '…' }`, `{ user: '…', tier: '…' }`) as `ip=…, tier=…`. */
export function identityText (identity: Record<string, string> | null | undefined): string {
  if (identity === null || identity === undefined) return '(every caller)'
  return Object.entries(identity).map(([field, value]) => `${field}=${value}`).join(', ')
}
