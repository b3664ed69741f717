/**
 * Runs one schedule on a fresh fleet: every request and fault at its offset
 * from a start aligned to 2 s of wall time, real HTTP over loopback (undici),
 * then waits for every request (each bounded by CLIENT_TIMEOUT_MS) and every
 * fault, and stops the fleet, also on failure.
 */
import { Agent, request as send } from 'undici'
import { applyFault, type FaultRecord } from './faults.js'
import { startFleet, type Fleet, type ServerRecord } from './fleet.js'
import { routeById } from './routes.js'
import type { ChaosRequest, Schedule } from './schedule.js'

/** A request the client still waits for after this is reported unanswered. */
export const CLIENT_TIMEOUT_MS = 4000

export interface ClientRecord {
  id: number
  sent: number
  answered: number | undefined
  status: number | undefined
  /** `aborted` (the schedule's client gave up), `timeout` (unanswered), or the socket error's code. */
  error: string | undefined
}

export interface Run {
  schedule: Schedule
  start: number
  clients: ClientRecord[]
  servers: ServerRecord[]
  faults: FaultRecord[]
  unhandled: string[]
  /** The first store errors of each cause, per instance process. */
  storeErrors: string[]
  /** Per instance, the wall-clock intervals it was down (killed until ready again). */
  down: Array<Array<[number, number]>>
  /** Fleet-level problems: a fault that threw, a process left behind. */
  errors: string[]
  /** Entries left in the fleet's slot queues once the traffic is over. */
  queueEntries: number
}

const sleepUntil = async (at: number): Promise<void> => {
  const wait = at - Date.now()
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
}

async function fire (fleet: Fleet, agent: Agent, r: ChaosRequest): Promise<ClientRecord> {
  const route = routeById.get(r.route)!
  const port = fleet.instances[r.inst]!.port
  const controller = new AbortController()
  const record: ClientRecord = { id: r.id, sent: Date.now(), answered: undefined, status: undefined, error: undefined }
  const timers = [setTimeout(() => { record.error = 'timeout'; controller.abort() }, CLIENT_TIMEOUT_MS)]
  if (r.abortMs !== undefined) timers.push(setTimeout(() => { record.error = 'aborted'; controller.abort() }, r.abortMs))
  try {
    const response = await send(`http://127.0.0.1:${port}${route.url}`, {
      dispatcher: agent,
      signal: controller.signal,
      ...(route.body === true ? { method: 'POST' as const, body: JSON.stringify({ req: r.id }) } : {}),
      headers: {
        ...(route.body === true ? { 'content-type': 'application/json' } : {}),
        host: route.host ?? 'chaos',
        'x-req': String(r.id),
        'x-user': r.user,
        'x-cost': String(r.cost),
        'x-use': String(r.use ?? 0),
        'x-sleep': String(r.sleepMs),
        'x-throw': r.throws ? '1' : '0'
      }
    })
    await response.body.dump()
    record.status = response.statusCode
    record.answered = Date.now()
    record.error = undefined
  } catch (error) {
    record.error ??= (error as { code?: string }).code ?? (error as Error).message
  } finally {
    for (const timer of timers) clearTimeout(timer)
  }
  return record
}

export async function runSchedule (schedule: Schedule): Promise<Run> {
  const fleet = await startFleet(schedule.topology, schedule.instances, { wiring: schedule.wiring, maxDelayed: schedule.maxDelayed })
  const agent = new Agent({ connections: 64, pipelining: 0 })
  const errors: string[] = []
  let start = 0
  try {
    // Offsets keep their phase inside the 1 s and 2 s windows on replay.
    start = Math.ceil((Date.now() + 500) / 2000) * 2000
    const until = async (offset: number): Promise<void> => { await sleepUntil(start + offset) }
    const faults = schedule.faults.map(async (fault) => {
      await until(fault.at)
      try {
        return await applyFault(fleet, fault, until)
      } catch (error) {
        errors.push(`fault ${fault.kind} at +${fault.at} failed: ${(error as Error).message}`)
        return { fault, start: Date.now(), end: Date.now(), note: 'failed' }
      }
    })
    const clients = schedule.requests.map(async (r) => {
      await until(r.at)
      return await fire(fleet, agent, r)
    })
    const [clientRecords, faultRecords] = await Promise.all([Promise.all(clients), Promise.all(faults)])
    // Records of responses that closed last.
    await new Promise((resolve) => setTimeout(resolve, 100))
    const down = fleet.instances.map((instance) => instance.kills.map((kill, i): [number, number] => [kill, instance.starts[i + 1] ?? Infinity]))
    const queueEntries = await fleet.queueEntries()
    return { schedule, start, clients: clientRecords, servers: [...fleet.records], faults: faultRecords, unhandled: [...fleet.unhandled], storeErrors: [...fleet.storeErrors], down, errors, queueEntries }
  } finally {
    await agent.close().catch(() => {})
    const pids = [...fleet.instances.map((i) => i.child?.pid), ...fleet.servers.map((s) => s.pid)].filter((pid): pid is number => pid !== undefined && pid > 0)
    await fleet.stop()
    const left = pids.filter(alive)
    if (left.length > 0) errors.push(`processes left behind after stop: ${left.join(', ')}`)
  }
}

function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
