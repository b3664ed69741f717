/** Whole seconds, rounded up: the headers' `w`, `t` and resets (never earlier than the milliseconds say). */
export function secondsCeil (ms: number): number {
  return Math.ceil(ms / 1000)
}
