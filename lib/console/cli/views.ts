import { CLI_DEFAULTS, MAX_PICTURE_TOP, MIN_WATCH_INTERVAL_MS } from '../../limits.js'
import { tableCells } from '../../kinds/index.js'
import type { FleetView, PolicyBlockSummary } from '../../types/index.js'
import { durationOption, integer } from './args.js'
import { EXIT, usage, type ExitCode } from './exit.js'
import { duration, escapeText, rate, table } from './render.js'
import { planReplica } from './replica.js'
import { newest, type Session } from './session.js'

/* The read commands on the fleet's picture: status, watch, top, policies. */

/** Prints `value` as JSON (the API's objects as they are), or the table text. */
export function print (session: Session, value: unknown, human: () => string): void {
  session.io.out(session.values.json === true ? JSON.stringify(value, null, 2) : human())
}

/** A warning on stderr, one line, escaped. */
export function warn (session: Session, message: string): void {
  session.io.err('warning: ' + escapeText(message, 2000))
}

/** Whether the fleet is healthy: some instance lives, and no node's breaker is open or probing. */
export function health (view: FleetView): ExitCode {
  if (view.instances.length === 0) return EXIT.unhealthy
  return view.nodes.some((node) => node.breaker !== 'closed') ? EXIT.unhealthy : EXIT.ok
}

/** The warnings a view carries: pictures it cannot read, limits instances disagree on. */
function warnings (view: FleetView, prefix: string): string[] {
  const out: string[] = []
  if (view.instances.length === 0) out.push(`no live instance publishes its picture under the prefix ${JSON.stringify(prefix)} (is the plugin's picture option off, or the prefix another?)`)
  if (view.unreadable > 0) out.push(`${view.unreadable} picture(s) in a format this version cannot read (a deploy in progress?)`)
  for (const disagreement of view.disagreements) {
    out.push(`${disagreement.route}: the instances declare ${disagreement.variants.length === 1 ? 'it on some instances only' : `${disagreement.variants.length} different limits`} (a deploy in progress?): see policies`)
  }
  const open = view.nodes.filter((node) => node.breaker !== 'closed')
  for (const node of open) out.push(`${node.instance}: the breaker of ${node.node} is ${node.breaker} (${node.failures} failures in a row)`)
  return out
}

function statusText (view: FleetView, prefix: string): string {
  const lines: string[] = [`fleet under prefix ${escapeText(prefix)} at ${new Date(view.at).toISOString()}: ${view.instances.length} instance(s)${view.unreadable > 0 ? `, ${view.unreadable} unreadable` : ''}`, '']
  lines.push(table(['INSTANCE', 'VERSION', 'UPTIME', 'STORE', 'INTERVAL', 'BANS', 'OVERRIDES', 'PUBLISHED'], view.instances.map((picture) => [
    picture.id, picture.version, duration(picture.uptimeMs), picture.store.kind + (picture.store.cluster ? ' cluster' : ''), duration(picture.intervalMs), picture.bans, picture.overrides, `${duration(Math.max(0, view.at - picture.publishedAt))} ago`
  ])), '')
  lines.push('Nodes (each instance\'s breakers):')
  lines.push(table(['INSTANCE', 'NODE', 'BREAKER', 'FAILURES', 'RETRY IN'], view.nodes.map((node) => [node.instance, node.node, node.breaker, node.failures, node.breaker === 'open' ? duration(node.retryInMs) : ''])), '')
  lines.push('Routes (decisions per second over the last minute, the fleet\'s sum):')
  lines.push(table(['ROUTE', 'POLICY', 'ADMITTED/S', 'REFUSED/S', 'DEGRADED/S', 'BANNED', 'INSTANCES'], view.routes.map((row) => [
    row.route, row.policy, rate(row.perSecond.admitted), rate(row.perSecond.refused), rate(row.perSecond.degraded), row.banned, row.instances
  ])))
  return lines.join('\n')
}

/** `status`: the view, its warnings on stderr, and its health as the exit code. */
export async function status (session: Session): Promise<ExitCode> {
  const view = await session.fleet(true)
  print(session, view, () => statusText(view, session.prefix))
  for (const line of warnings(view, session.prefix)) warn(session, line)
  return health(view)
}

const sleep = async (ms: number, signal?: AbortSignal): Promise<void> => {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms)
    function done (): void {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** `watch`: status every interval, redrawn in place on a terminal; `--count` reads at most. */
export async function watch (session: Session): Promise<ExitCode> {
  const intervalMs = durationOption(session.values, 'interval', CLI_DEFAULTS.interval, MIN_WATCH_INTERVAL_MS, 3_600_000)
  const count = integer(session.values, 'count', undefined, 1, 1_000_000)
  const { io } = session
  let code: ExitCode = EXIT.ok
  const stopped = (): boolean => io.signal?.aborted === true
  const reads = count ?? Infinity
  for (let read = 1; read <= reads; read++) {
    const view = await session.fleet(true)
    code = health(view)
    if (session.values.json === true) io.out(JSON.stringify(view))
    else {
      const notes = warnings(view, session.prefix).map((line) => 'warning: ' + escapeText(line, 2000))
      const screen = [statusText(view, session.prefix), ...(notes.length > 0 ? ['', ...notes] : []), '', `every ${duration(intervalMs)}; Ctrl-C ends`].join('\n')
      io.out(io.tty ? '\x1b[2J\x1b[H' + screen : screen + '\n')
    }
    if (stopped() || read >= reads) break
    await sleep(intervalMs, io.signal)
    if (stopped()) break
  }
  return code
}

/** `top [ROUTE]`: the most refused callers per route, merged. */
export async function top (session: Session, operands: string[]): Promise<ExitCode> {
  const [route, extra] = operands
  if (extra !== undefined) throw usage('top takes at most one route')
  const limit = integer(session.values, 'limit', CLI_DEFAULTS.top, 1, MAX_PICTURE_TOP) as number
  const view = await session.fleet()
  if (route !== undefined && !view.top.some((entry) => entry.route === route) && !view.routes.some((row) => row.route === route) &&
    !view.instances.some((picture) => picture.policies.some((row) => `${row.method} ${row.url}` === route))) {
    throw usage(`unknown route ${JSON.stringify(route)}: no instance declares it (policies lists the routes)`)
  }
  const chosen = view.top.filter((entry) => route === undefined || entry.route === route).map((entry) => ({ route: entry.route, callers: entry.callers.slice(0, limit) }))
  print(session, chosen, () => {
    if (chosen.length === 0) return route === undefined ? 'no refused callers in the fleet\'s pictures' : `no refused callers on ${escapeText(route)}`
    return chosen.map((entry) => `${escapeText(entry.route)}:\n` + table(['RANK', 'KEY HASH', 'REFUSED', 'ERROR', 'IDENTITY'], entry.callers.map((caller, i) => [
      i + 1, caller.hash, Math.round(caller.count * 10) / 10, Math.round(caller.error * 10) / 10, caller.identity ?? ''
    ]))).join('\n\n')
  })
  if (view.instances.length === 0) warn(session, `no live instance publishes its picture under the prefix ${JSON.stringify(session.prefix)}`)
  return EXIT.ok
}

function limitCell (block: PolicyBlockSummary): string {
  return block.tiers === undefined ? String(block.limit) : Object.entries(block.tiers).map(([tier, counts]) => `${tier}=${counts.limit}`).join(' ')
}

/** `policies`: the newest instance's limits, each route marked custom where the CLI cannot rebuild it, and the disagreements. */
export async function policies (session: Session): Promise<ExitCode> {
  const view = await session.fleet()
  const picture = newest(view)
  const routes = picture === undefined ? [] : planReplica(picture.policies).routes
  const json = {
    instances: view.instances.map((instance) => ({ id: instance.id, version: instance.version, startedAt: instance.startedAt, policies: instance.policies })),
    custom: routes.filter((route) => route.custom !== undefined).map((route) => ({ route: route.label, reason: route.custom })),
    disagreements: view.disagreements
  }
  print(session, json, () => {
    if (picture === undefined) return 'no live instance: no declared limits to show'
    const rows = routes.flatMap((route) => route.row.limits.map((block) => [
      route.label, block.name + (block.global ? ' (global)' : ''), block.algorithm, limitCell(block), tableCells(block).window, tableCells(block).burst, block.by.join(', '), block.mode, route.custom === undefined ? '' : 'custom'
    ]))
    const lines = [`limits declared by ${escapeText(picture.id)} (the newest of ${view.instances.length} instance(s), version ${escapeText(picture.version)}):`, table(['ROUTE', 'POLICY', 'ALGORITHM', 'LIMIT', 'WINDOW', 'BURST', 'BY', 'MODE', ''], rows)]
    const custom = routes.filter((route) => route.custom !== undefined)
    if (custom.length > 0) lines.push('', 'custom (peek and reset refuse these routes):', ...custom.map((route) => `  ${escapeText(route.label)}: ${escapeText(route.custom)}`))
    for (const disagreement of view.disagreements) {
      lines.push('', `${escapeText(disagreement.route)} differs between instances (a deploy in progress?):`)
      for (const variant of disagreement.variants) {
        const blocks = variant.limits.map((block) => `${block.name} ${block.algorithm} ${limitCell(block)}/${tableCells(block).window}`).join('; ')
        lines.push(`  ${escapeText(blocks)}: ${variant.instances.map((id) => escapeText(id)).join(', ')}`)
      }
    }
    return lines.join('\n')
  })
  for (const disagreement of view.disagreements) warn(session, `${disagreement.route}: the instances declare different limits (a deploy in progress?)`)
  return picture === undefined ? EXIT.unhealthy : EXIT.ok
}
