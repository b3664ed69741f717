import type { PictureBoard } from '../store/port.js'
import type { FleetRoute, FleetView, InstancePicture, PictureCaller, PolicyDisagreement, PolicySummary } from '../types/index.js'
import { parsePicture } from './record.js'

/*
 * The fleet as the CLI and the console page show it: every live instance's
 * picture read in one call (port.ts PictureBoard.read) and merged here. Rows
 * add up by route and policy; series add up by position from the newest
 * (instances' intervals are not aligned, so a point is "the n-th latest
 * interval" of each); top callers add up by key hash, and so do their error
 * bounds (the sum of the Space-Saving errors bounds the merged overcount).
 */

/** The window `status` gives decisions per second over. */
export const RATE_WINDOW_MS = 60_000

const COUNTS = ['admitted', 'refused', 'degraded', 'delayed', 'waited', 'denyCache', 'banned', 'skipped'] as const
const SERIES = ['admitted', 'refused', 'degraded'] as const

/** Adds `from` into `into` by position from the newest. */
function addSeries (into: number[], from: readonly number[]): number[] {
  const length = Math.max(into.length, from.length)
  const out = new Array<number>(length).fill(0)
  for (let i = 1; i <= length; i++) out[length - i] = (into[into.length - i] ?? 0) + (from[from.length - i] ?? 0)
  return out
}

function mergeRoutes (instances: readonly InstancePicture[]): FleetRoute[] {
  const byId = new Map<string, FleetRoute>()
  for (const picture of instances) {
    const points = Math.max(1, Math.round(RATE_WINDOW_MS / picture.intervalMs))
    const seconds = points * picture.intervalMs / 1000
    for (const row of picture.routes) {
      const id = row.route + '\n' + row.policy
      let merged = byId.get(id)
      if (merged === undefined) {
        merged = { route: row.route, policy: row.policy, admitted: 0, refused: 0, degraded: 0, delayed: 0, waited: 0, denyCache: 0, banned: 0, skipped: 0, instances: 0, perSecond: { admitted: 0, refused: 0, degraded: 0 }, series: { admitted: [], refused: [], degraded: [] } }
        byId.set(id, merged)
      }
      merged.instances++
      for (const name of COUNTS) merged[name] += Number(row[name]) || 0
      for (const name of SERIES) {
        const series = Array.isArray(row.series?.[name]) ? row.series[name] : []
        merged.series[name] = addSeries(merged.series[name], series)
        merged.perSecond[name] += series.slice(-points).reduce((sum, n) => sum + (Number(n) || 0), 0) / seconds
      }
    }
  }
  return [...byId.values()].sort((a, b) => a.route.localeCompare(b.route) || a.policy.localeCompare(b.policy))
}

function mergeTop (instances: readonly InstancePicture[]): Array<{ route: string, callers: PictureCaller[] }> {
  const byRoute = new Map<string, Map<string, PictureCaller>>()
  for (const picture of instances) {
    for (const { route, callers } of picture.top) {
      let merged = byRoute.get(route)
      if (merged === undefined) byRoute.set(route, merged = new Map())
      for (const caller of callers) {
        const known = merged.get(caller.hash)
        if (known === undefined) merged.set(caller.hash, { ...caller })
        else {
          known.count += caller.count
          known.error += caller.error
        }
      }
    }
  }
  return [...byRoute].map(([route, callers]) => ({ route, callers: [...callers.values()].sort((a, b) => b.count - a.count) }))
    .sort((a, b) => a.route.localeCompare(b.route))
}

/** What a declaration is compared by: its blocks without what changes at run time (overrides, ban counts). */
function declaration (summary: PolicySummary): string {
  // A calendar period's windowMs is the current period's length (months differ): the period names it.
  return JSON.stringify(summary.limits.map(({ override, identityOverrides, windowMs, ...block }) => ({ ...block, window: block.period ?? windowMs })))
}

/**
 * One app's declarations: an app that registers the plugin in two contexts
 * publishes a picture per registration, each with its own routes; together
 * they are what the app declares.
 */
export function appPolicies (instances: readonly InstancePicture[]): Array<{ ids: string[], policies: PolicySummary[] }> {
  const byProcess = new Map<string, { ids: string[], policies: PolicySummary[] }>()
  for (const picture of instances) {
    const key = typeof picture.app === 'string' ? picture.app : picture.id
    let entry = byProcess.get(key)
    if (entry === undefined) byProcess.set(key, entry = { ids: [], policies: [] })
    entry.ids.push(picture.id)
    // A route two registrations both declare (the same prefix in two contexts) is one route.
    for (const summary of picture.policies) {
      if (!entry.policies.some((known) => known.method === summary.method && known.url === summary.url && JSON.stringify(known.constraints) === JSON.stringify(summary.constraints))) entry.policies.push(summary)
    }
  }
  return [...byProcess.values()]
}

function disagreements (instances: readonly InstancePicture[]): PolicyDisagreement[] {
  const apps = appPolicies(instances)
  const byRoute = new Map<string, Map<string, { instances: string[], limits: PolicySummary['limits'] }>>()
  for (const { ids, policies } of apps) {
    for (const summary of policies) {
      // Fastify's HEAD twin of a GET declares what the GET does: its row would repeat the GET's.
      if (summary.method === 'HEAD' && policies.some((other) => other.method === 'GET' && other.url === summary.url && JSON.stringify(other.constraints) === JSON.stringify(summary.constraints))) continue
      const route = `${summary.method} ${summary.url}` + (summary.constraints === undefined ? '' : ' ' + JSON.stringify(summary.constraints))
      let variants = byRoute.get(route)
      if (variants === undefined) byRoute.set(route, variants = new Map())
      const text = declaration(summary)
      const variant = variants.get(text)
      if (variant === undefined) variants.set(text, { instances: [...ids], limits: summary.limits })
      else variant.instances.push(...ids)
    }
  }
  const out: PolicyDisagreement[] = []
  for (const [route, variants] of byRoute) {
    const declaredBy = [...variants.values()].reduce((sum, variant) => sum + variant.instances.length, 0)
    // A route some apps do not declare at all differs too.
    if (variants.size > 1 || declaredBy < instances.length) out.push({ route, variants: [...variants.values()] })
  }
  return out
}

/** Merges pictures read at store time `at`. */
export function fleetView (pictures: ReadonlyMap<string, string>, at: number): FleetView {
  const instances: InstancePicture[] = []
  let unreadable = 0
  for (const json of pictures.values()) {
    const picture = parsePicture(json)
    if (picture === undefined) unreadable++
    else instances.push(picture)
  }
  instances.sort((a, b) => a.startedAt - b.startedAt || a.id.localeCompare(b.id))
  return {
    at,
    instances,
    unreadable,
    routes: mergeRoutes(instances),
    top: mergeTop(instances),
    nodes: instances.flatMap((picture) => picture.store.nodes.map((node) => ({ instance: picture.id, ...node }))),
    disagreements: disagreements(instances)
  }
}

/** Reads and merges the fleet's pictures: one store call. */
export async function readFleet (board: PictureBoard): Promise<FleetView> {
  const { pictures, at } = await board.read()
  return fleetView(pictures, at)
}
