import { constraintText, routeLabel } from '../keys/constraints.js'

/*
 * Fastify announces a route to `onRoute` hooks only if they exist when the
 * route is declared. A route declared before this plugin loaded (for example
 * after `app.register(rateLimit)` without `await`) would run unlimited, so at
 * ready we compare Fastify's own route table with the routes we saw.
 *
 * Only the routes of the plugin's own encapsulation context count (its
 * context and every context below it): sibling and parent contexts are not
 * its business. Fastify's route table is one for the whole app, so each
 * registration marks its context with a no-op `onTimeout` hook of a unique
 * name; Fastify copies a context's hooks into every route of it (also routes
 * declared before the hook was added) and into child contexts created later.
 * Child contexts that already exist when the plugin loads get the marker
 * pushed into their hook lists (markContexts). printRoutes shows each route's
 * onTimeout hooks by name, so the table can be filtered to the marked routes.
 *
 * Routes that share method and URL differ by their constraints: printRoutes
 * prints each under one tree node (the second on a continuation line) with its
 * constraints as JSON (a RegExp as its string), which both sides compare in
 * one normal form.
 */

export interface RouteEntry {
  method: string
  url: string
  /** The constraints as printRoutes shows them, in constraintText's normal form ('' for none). */
  constraints: string
  /** printRoutes' `onTimeout` meta (hook names, JSON), when it was asked for. */
  onTimeout?: string
}

/** printRoutes' constraints JSON (find-my-way's pretty-print: RegExp as a string) in one normal form; the raw text if it does not parse. */
function printedForm (json: string): string {
  try {
    return constraintText(JSON.parse(json))
  } catch {
    return json
  }
}

/** A route as onRoute announces it, in the form parseRouteTree reads it back. */
export function seenRoute (method: string, url: string, constraints: unknown): RouteEntry {
  if (constraintText(constraints) === '') return { method, url, constraints: '' }
  const json = JSON.stringify(constraints, (_key, value: unknown) => value instanceof RegExp ? value.toString() : value)
  return { method, url, constraints: printedForm(json) }
}

let registrations = 0

/** A no-op onTimeout hook named `rrlScope_<n>`, unique per registration: the context marker. */
export function scopeMarker (): () => Promise<void> {
  const marker = async function (): Promise<void> {}
  return Object.defineProperty(marker, 'name', { value: `rrlScope_${++registrations}` })
}

function ownSymbol (object: object, description: string): symbol | undefined {
  for (let at: object | null = object; at !== null; at = Object.getPrototypeOf(at) as object | null) {
    const found = Object.getOwnPropertySymbols(at).find((symbol) => symbol.description === description)
    if (found !== undefined) return found
  }
  return undefined
}

/**
 * Pushes the marker into the onTimeout hooks of every child context `instance`
 * already has (and theirs): they copied their hooks before the plugin loaded.
 */
export function markContexts (instance: object, marker: () => Promise<void>): void {
  const childrenKey = ownSymbol(instance, 'fastify.children')
  const hooksKey = ownSymbol(instance, 'fastify.hooks')
  if (childrenKey === undefined || hooksKey === undefined) return
  const visit = (context: object): void => {
    for (const child of (context as Record<symbol, object[] | undefined>)[childrenKey] ?? []) {
      const hooks = (child as Record<symbol, { onTimeout?: unknown[] } | undefined>)[hooksKey]
      if (Array.isArray(hooks?.onTimeout) && !hooks.onTimeout.includes(marker)) hooks.onTimeout.push(marker)
      visit(child)
    }
  }
  visit(instance)
}

const TREE_LINE = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?) \(([A-Z, ]+)\)(?: (\{.*\}))?$/
/** Another route of the node above (same URL, other constraints): indented one level, without a branch. */
const SAME_NODE_LINE = /^(?:│ {3}| {4})+(?![│├└ ])(.*?) \(([A-Z, ]+)\)(?: (\{.*\}))?$/
const TIMEOUT_META = /^[│ ]*• \(onTimeout\) (.*)$/

/** Reads `printRoutes({ commonPrefix: false })`: one entry per method and route. */
export function parseRouteTree (printed: string): RouteEntry[] {
  const entries: RouteEntry[] = []
  const pathAtDepth: string[] = []
  let lineStart = 0
  let nodeUrl = ''
  const push = (methods: string, constraints: string | undefined): void => {
    lineStart = entries.length
    for (const method of methods.split(', ')) entries.push({ method, url: nodeUrl, constraints: constraints === undefined ? '' : printedForm(constraints) })
  }
  for (const line of printed.split('\n')) {
    const meta = TIMEOUT_META.exec(line)
    if (meta !== null) {
      for (let i = lineStart; i < entries.length; i++) (entries[i] as RouteEntry).onTimeout = meta[1] as string
      continue
    }
    const match = TREE_LINE.exec(line)
    if (match === null) {
      const same = SAME_NODE_LINE.exec(line)
      if (same !== null) push(same[2] as string, same[3])
      continue
    }
    const depth = (match[1] as string).length / 4
    nodeUrl = (depth === 0 ? '' : pathAtDepth[depth - 1] ?? '') + (match[2] as string)
    pathAtDepth[depth] = nodeUrl
    pathAtDepth.length = depth + 1
    push(match[3] as string, match[4])
  }
  return entries
}

/**
 * Routes Fastify has that the plugin never saw, or a count when the tree cannot
 * be matched. With `marker` (a scopeMarker's name), `printed` must come from
 * `printRoutes({ commonPrefix: false, includeMeta: ['onTimeout'] })` and only
 * routes of the marked contexts count.
 */
export function unseenRoutes (printed: string, seen: RouteEntry[], marker?: string): string[] {
  const all = parseRouteTree(printed)
  const table = marker === undefined ? all : all.filter((entry) => entry.onTimeout?.includes(JSON.stringify(`${marker}()`)) === true)
  if (table.length <= seen.length) return []
  const seenKeys = new Map<string, number>()
  for (const entry of seen) {
    const key = routeLabel(entry.method, entry.url, entry.constraints)
    seenKeys.set(key, (seenKeys.get(key) ?? 0) + 1)
  }
  const unseen: string[] = []
  for (const entry of table) {
    const key = routeLabel(entry.method, entry.url, entry.constraints)
    const count = seenKeys.get(key) ?? 0
    if (count > 0) seenKeys.set(key, count - 1)
    else if (entry.method !== 'HEAD') unseen.push(key)
  }
  if (unseen.length === 0) unseen.push(`${table.length - seen.length} route(s)`)
  return unseen
}
