/** A value that is not undefined: what `item` may return (a list that may hold undefined is read with list[i]). */
type Present = NonNullable<unknown> | null

/**
 * `list[i]` where `i` is in range by construction: a loop bound or a
 * position in a pure algorithm (a binary search, a table row). A request's
 * blocks are records, walked with for...of, never read through this.
 * noUncheckedIndexedAccess types list[i] `T | undefined`; this
 * checks instead of asserting, so a broken invariant throws here rather than
 * passing undefined on.
 */
export function item<T extends Present> (list: readonly T[], i: number): T {
  const value = list[i]
  if (value === undefined) throw new RangeError(`index ${i} is outside a list of ${list.length}`)
  return value
}
