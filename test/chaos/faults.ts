/**
 * Each fault of a schedule, done to the real fleet: signals, CLIENT PAUSE,
 * restarts, keys planted by "another tool", slot migrations, and commands to
 * an instance (stall its event loop, skew its host clock, make its metrics
 * exporter throw, set and clear bans and overrides). Every fault returns when
 * it is over, with the wall-clock interval it covered.
 */
import type { Fault } from './schedule.js'
import type { Fleet } from './fleet.js'

export interface FaultRecord {
  fault: Fault
  start: number
  end: number
  /** Bans and overrides: the id, and the wall time the set (and the clear) completed. */
  id?: string
  setAt?: number
  clearedAt?: number
  /** What did not go as planned (a fault that could not be applied). */
  note?: string
  /** deploy: when app.close() returned (start is when it was called; end when the new process serves). */
  closedAt?: number
  /** node-hang: the limiter's keys on each node as the hang began (which master holds which stream). */
  keys?: Array<{ node: number, key: string }>
}

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/** Rate-limit state keys on every node (fleet-record hashes excluded: another tool's key lands on state). */
async function stateKeys (fleet: Fleet): Promise<Array<{ node: number, key: string }>> {
  const out: Array<{ node: number, key: string }> = []
  for (let node = 0; node < fleet.servers.length; node++) {
    const keys = await fleet.admin(node).keys(`${fleet.prefix}:*`)
    for (const key of keys) if (key !== `${fleet.prefix}:bans` && key !== `${fleet.prefix}:overrides`) out.push({ node, key })
  }
  return out
}

async function plantWrongType (fleet: Fleet, ms: number): Promise<string> {
  const keys = await stateKeys(fleet)
  await Promise.all(keys.map(async ({ node, key }) => {
    await fleet.admin(node).multi().del(key).rpush(key, 'planted by another tool').pexpire(key, ms).exec()
  }))
  return `${keys.length} keys replaced by lists for ${ms} ms`
}

async function migrate (fleet: Fleet): Promise<string> {
  const cluster = fleet.cluster
  if (cluster === undefined) return 'no cluster'
  const keys = await stateKeys(fleet)
  if (keys.length === 0) return 'no key to move'
  const { key } = keys[Math.floor(keys.length / 2)] as { key: string }
  const slot = await fleet.admin(0).cluster('KEYSLOT', key) as number
  const from = await cluster.ownerOf(slot)
  const to = cluster.nodes.find((node) => node.id !== from.id)!
  const { keys: moved } = await cluster.migrateSlot(slot, to, { afterMigrate: async () => { await sleep(150) } })
  return `slot ${slot} (${moved} keys) moved from ${from.port} to ${to.port}`
}

/** Bans and overrides are fleet-wide: asked of `inst`, or of the next instance when it cannot answer (down, or closing in a deploy). */
async function anyInstance (fleet: Fleet, inst: number, message: Record<string, unknown>): Promise<{ ok: boolean, result: unknown, at: number }> {
  let reply = await fleet.command(inst, message)
  for (let i = 1; !reply.ok && i < fleet.instances.length; i++) reply = await fleet.command((inst + i) % fleet.instances.length, message)
  return reply
}

export async function applyFault (fleet: Fleet, fault: Fault, until: (offset: number) => Promise<void>): Promise<FaultRecord> {
  const start = Date.now()
  const done = (extra: Partial<FaultRecord> = {}): FaultRecord => ({ fault, start, end: Date.now(), ...extra })
  switch (fault.kind) {
    case 'node-hang': {
      const keys = await stateKeys(fleet)
      const server = fleet.servers[fault.node % fleet.servers.length]!
      server.pause()
      await sleep(fault.ms)
      server.resume()
      return { ...done(), start, keys }
    }
    case 'redis-stop': {
      const server = fleet.servers[fault.node % fleet.servers.length]!
      server.pause()
      await sleep(fault.ms)
      server.resume()
      return done()
    }
    case 'client-pause':
      await fleet.admin(fault.node).call('CLIENT', 'PAUSE', String(fault.ms), 'ALL')
      await sleep(fault.ms)
      return done()
    case 'redis-restart': {
      const server = fleet.servers[0]!
      await server.stop()
      await server.start()
      return done()
    }
    case 'wrong-type': {
      const note = await plantWrongType(fleet, fault.ms)
      await sleep(fault.ms)
      return done({ note })
    }
    case 'migrate':
      return done({ note: await migrate(fleet) })
    case 'deploy': {
      const closed = await fleet.deploy(fault.inst)
      if (closed === undefined) return done({ note: 'instance down: not deployed' })
      return { fault, start: closed.closeAt, closedAt: closed.closedAt, end: Date.now() }
    }
    case 'instance-kill':
      fleet.kill(fault.inst)
      await fleet.start(fault.inst)
      return done()
    case 'stall': {
      const reply = await fleet.command(fault.inst, { cmd: 'stall', ms: fault.ms })
      return { fault, start: reply.at - fault.ms, end: reply.at, note: reply.ok ? undefined : String(reply.result) }
    }
    case 'skew': {
      const reply = await fleet.command(fault.inst, { cmd: 'skew', hours: fault.hours })
      return { fault, start: reply.at, end: reply.at, note: reply.ok ? undefined : String(reply.result) }
    }
    case 'metrics-throw': {
      await fleet.command(fault.inst, { cmd: 'metrics', throwing: true })
      await sleep(fault.ms)
      await fleet.command(fault.inst, { cmd: 'metrics', throwing: false })
      return done()
    }
    case 'ban':
    case 'override': {
      const set = await anyInstance(fleet, fault.inst, { cmd: fault.kind, user: fault.user })
      if (!set.ok) return done({ note: String(set.result) })
      const record: FaultRecord = { fault, start, end: set.at, id: String(set.result), setAt: set.at }
      const liftAt = fault.kind === 'ban' ? fault.liftAt : fault.clearAt
      if (liftAt !== undefined) {
        await until(liftAt)
        const clear = await anyInstance(fleet, fault.inst, { cmd: fault.kind === 'ban' ? 'unban' : 'clear', id: record.id })
        record.clearedAt = clear.at
        record.end = clear.at
        if (!clear.ok) record.note = String(clear.result)
      }
      return record
    }
  }
}
