/*
 * Fastify announces a route to `onRoute` hooks only if they exist when the
 * route is declared. A route declared before this plugin loaded (for example
 * after `app.register(rateLimit)` without `await`) would run unlimited, so at
 * ready we compare Fastify's own route table with the routes we saw.
 */

export interface RouteEntry {
  method: string
  url: string
}

const TREE_LINE = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?) \(([A-Z, ]+)\)(?: \{.*\})?$/

/** Reads `printRoutes({ commonPrefix: false })`: one entry per method and route. */
export function parseRouteTree (printed: string): RouteEntry[] {
  const entries: RouteEntry[] = []
  const pathAtDepth: string[] = []
  for (const line of printed.split('\n')) {
    const match = TREE_LINE.exec(line)
    if (match === null) continue
    const depth = (match[1] as string).length / 4
    const url = (depth === 0 ? '' : pathAtDepth[depth - 1] ?? '') + (match[2] as string)
    pathAtDepth[depth] = url
    pathAtDepth.length = depth + 1
    for (const method of (match[3] as string).split(', ')) entries.push({ method, url })
  }
  return entries
}

/** Routes Fastify has that the plugin never saw, or a count when the tree cannot be matched. */
export function unseenRoutes (printed: string, seen: RouteEntry[]): string[] {
  const table = parseRouteTree(printed)
  if (table.length <= seen.length) return []
  const seenKeys = new Map<string, number>()
  for (const entry of seen) {
    const key = `${entry.method} ${entry.url}`
    seenKeys.set(key, (seenKeys.get(key) ?? 0) + 1)
  }
  const unseen: string[] = []
  for (const entry of table) {
    const key = `${entry.method} ${entry.url}`
    const count = seenKeys.get(key) ?? 0
    if (count > 0) seenKeys.set(key, count - 1)
    else if (entry.method !== 'HEAD') unseen.push(key)
  }
  if (unseen.length === 0) unseen.push(`${table.length - seen.length} route(s)`)
  return unseen
}
