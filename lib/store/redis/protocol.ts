/*
 * The mode argument the Lua scripts take after `now`, by name. The values are
 * part of the script interface that old and new instances share during a
 * rolling deploy: never change them, only add.
 *
 *   one algorithm's script:  charge '' · peek '1' · refund '2' (then elapsed ms)
 *   the multi-limit script:  charge '' · peek '1' · refund 'r<elapsed ms>'
 */
export const SCRIPT_MODE = {
  charge: '',
  peek: '1',
  refund: '2'
} as const

/** The multi script's refund mode: `r` and the milliseconds since the units were spent. */
export function multiRefundMode (elapsed: string): string {
  return 'r' + elapsed
}
