/* On a Cluster every key of one script call must live in one slot, which a key's hash tag decides. */

/** The Cluster hash tag of a key (`{...}`), which decides its slot; the key itself when it has none. */
function hashTag (key: string): string {
  const open = key.indexOf('{')
  if (open !== -1) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) return key.slice(open + 1, close)
  }
  return key
}

/** The jobs grouped by hash tag: every key of one call must live in one slot. */
export function bySlot<T extends { keys: readonly string[] }> (jobs: readonly T[]): Iterable<T[]> {
  const groups = new Map<string, T[]>()
  for (const job of jobs) {
    const tag = hashTag(job.keys[0] as string)
    const group = groups.get(tag)
    if (group === undefined) groups.set(tag, [job])
    else group.push(job)
  }
  return groups.values()
}
