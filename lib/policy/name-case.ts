import { FST_RRL_POLICY_NAME_CASE } from '../errors.js'

/*
 * Structured Fields strings compare byte for byte, so `"Burst"` and `"burst"`
 * are two policies to a parser, but people, dashboards and case-folding
 * clients confuse them. Legal, so a startup warning (once per process), not
 * an error: existing configurations keep working.
 */

/** Warns when two of a route's blocks have names that differ only in case. */
export function warnCaseTwins (route: string, blocks: ReadonlyArray<{ name: string }>): void {
  const seen = new Map<string, string>()
  for (const { name } of blocks) {
    const folded = name.toLowerCase()
    const twin = seen.get(folded)
    if (twin !== undefined && twin !== name) {
      FST_RRL_POLICY_NAME_CASE(route, `${JSON.stringify(twin)} and ${JSON.stringify(name)}`)
      return
    }
    seen.set(folded, name)
  }
}
