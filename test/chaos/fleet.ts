/**
 * The fleet a schedule runs on: one real Redis (a standalone server or a
 * 3-master Cluster, started here) and 2-3 instance processes (instance.ts),
 * each on its own loopback port. Everything is started through
 * test/helpers/processes.ts, which kills it and removes its directories when
 * this process ends for any reason; stop() does it in order first.
 */
import type { ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { freePort, spawnOwned } from '../helpers/processes.js'
import { adminClient, startCluster, startServer, waitFor, type ManagedCluster, type ManagedServer } from '../helpers/topologies.js'
import { uniquePrefix } from '../helpers/redis.js'
import type { Redis } from 'ioredis'

const INSTANCE = fileURLToPath(new URL('./instance.ts', import.meta.url))

/** What an instance reports per request (instance.ts). */
export interface ServerRecord {
  id: number
  inst: number
  t0: number
  tDec: number | undefined
  tEnd: number
  status: number
  finished: boolean
  degraded: boolean
  retryAfterMs: number | undefined
  lagMs: number
  /** The most requests the instance held and kept waiting at once so far (its maxDelayed bound). */
  peakHeld: number
}

export interface Instance {
  inst: number
  port: number
  child: ChildProcess | undefined
  /** Wall-clock ms of every start (the first included) and kill. */
  starts: number[]
  kills: number[]
}

export interface Fleet {
  topology: 'standalone' | 'cluster'
  prefix: string
  instances: Instance[]
  /** The Redis servers: one, or the Cluster's three masters. */
  servers: ManagedServer[]
  cluster: ManagedCluster | undefined
  admin: (node: number) => Redis
  records: ServerRecord[]
  unhandled: string[]
  /** The first store errors of each cause, per instance process (for reports). */
  storeErrors: string[]
  command: (inst: number, message: Record<string, unknown>) => Promise<{ ok: boolean, result: unknown, at: number }>
  kill: (inst: number) => void
  start: (inst: number) => Promise<void>
  /** Closes an instance as a deploy does (app.close() while listening), then starts a new process; undefined when it was down. */
  deploy: (inst: number) => Promise<{ closeAt: number, closedAt: number } | undefined>
  /** Entries left in the fleet's slot queues (`…ccq` sorted sets) on every node. */
  queueEntries: () => Promise<number>
  stop: () => Promise<void>
}

export interface FleetOptions {
  wiring?: 'own' | 'fastify-redis'
  maxDelayed?: number | undefined
}

export async function startFleet (topology: 'standalone' | 'cluster', count: number, options: FleetOptions = {}): Promise<Fleet> {
  const cluster = topology === 'cluster' ? await startCluster() : undefined
  const servers = cluster !== undefined ? cluster.nodes.map((node) => node.server) : [await startServer([], { label: 'chaos' })]
  const admins = new Map<number, Redis>()
  const admin = (node: number): Redis => {
    const server = servers[node % servers.length] as ManagedServer
    let client = admins.get(server.port)
    if (client === undefined) {
      client = adminClient(server.port)
      admins.set(server.port, client)
    }
    return client
  }
  const prefix = uniquePrefix('chaos')
  const records: ServerRecord[] = []
  const unhandled: string[] = []
  const storeErrors: string[] = []
  const pending = new Map<number, (reply: { ok: boolean, result: unknown, at: number }) => void>()
  let seq = 0
  const instances: Instance[] = []
  for (let inst = 0; inst < count; inst++) instances.push({ inst, port: await freePort(), child: undefined, starts: [], kills: [] })

  const start = async (inst: number): Promise<void> => {
    const instance = instances[inst] as Instance
    const config = { inst, port: instance.port, prefix, cluster: cluster !== undefined, nodes: servers.map((s) => ({ host: s.host, port: s.port })), wiring: options.wiring, maxDelayed: options.maxDelayed }
    const child = spawnOwned(process.execPath, ['--import', 'tsx', INSTANCE, JSON.stringify(config)], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
    instance.child = child
    child.on('message', (message: { type: string, seq?: number, ok?: boolean, result?: unknown, at?: number, message?: string } & ServerRecord) => {
      if (message.type === 'record') records.push(message)
      else if (message.type === 'unhandled') unhandled.push(`instance ${inst}: ${message.message ?? ''}`)
      else if (message.type === 'store-error') storeErrors.push(message.message ?? '')
      else if (message.type === 'reply') pending.get(message.seq as number)?.({ ok: message.ok === true, result: message.result, at: message.at as number })
    })
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error(`chaos instance ${inst} not ready within 20 s`)) }, 20_000)
      child.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`chaos instance ${inst} exited at start (${code ?? signal})`)) })
      child.on('message', (message: { type: string }) => {
        if (message.type === 'ready') { clearTimeout(timer); resolve() }
      })
    })
    child.removeAllListeners('exit')
    instance.starts.push(Date.now())
  }

  const kill = (inst: number): void => {
    const instance = instances[inst] as Instance
    instance.child?.kill('SIGKILL')
    instance.child = undefined
    instance.kills.push(Date.now())
  }

  const command = async (inst: number, message: Record<string, unknown>): Promise<{ ok: boolean, result: unknown, at: number }> => {
    const child = instances[inst]?.child
    if (child === undefined || !child.connected) return { ok: false, result: 'instance down', at: Date.now() }
    const id = ++seq
    return await new Promise((resolve) => {
      const timer = setTimeout(() => { pending.delete(id); resolve({ ok: false, result: 'no reply within 10 s', at: Date.now() }) }, 10_000)
      pending.set(id, (reply) => { clearTimeout(timer); pending.delete(id); resolve(reply) })
      child.send({ ...message, seq: id })
    })
  }

  const deploy = async (inst: number): Promise<{ closeAt: number, closedAt: number } | undefined> => {
    const instance = instances[inst] as Instance
    const child = instance.child
    if (child === undefined) return undefined
    const gone = new Promise((resolve) => child.once('exit', resolve))
    const reply = await command(inst, { cmd: 'deploy' })
    if (!reply.ok) return undefined
    const closed = reply.result as { closeAt: number, closedAt: number }
    await Promise.race([gone, new Promise((resolve) => setTimeout(resolve, 3000))])
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    instance.child = undefined
    // Down from the close on (new connections get 503 or a refusal), until the new process serves.
    instance.kills.push(closed.closeAt)
    await start(inst)
    return closed
  }

  const queueEntries = async (): Promise<number> => {
    let total = 0
    for (let node = 0; node < servers.length; node++) {
      for (const key of await admin(node).keys(`${prefix}:*ccq`)) total += await admin(node).zcard(key)
    }
    return total
  }

  const stop = async (): Promise<void> => {
    await Promise.all(instances.map(async (instance) => {
      const child = instance.child
      if (child === undefined || child.exitCode !== null) return
      const gone = new Promise((resolve) => child.once('exit', resolve))
      child.ref()
      const closed = await Promise.race([command(instance.inst, { cmd: 'close' }), new Promise((resolve) => setTimeout(resolve, 3000))])
      if (closed === undefined) child.kill('SIGKILL')
      await Promise.race([gone, new Promise((resolve) => setTimeout(resolve, 3000))])
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      instance.child = undefined
    }))
    for (const client of admins.values()) client.disconnect()
    if (cluster !== undefined) await cluster.stop()
    else await Promise.all(servers.map(async (server) => { await server.stop() }))
  }

  try {
    await Promise.all(instances.map(async (instance) => { await start(instance.inst) }))
    await waitFor('every instance ready', () => instances.every((i) => i.child !== undefined), 1000)
  } catch (error) {
    await stop()
    throw error
  }
  return { topology, prefix, instances, servers, cluster, admin, records, unhandled, storeErrors, command, kill, start, deploy, queueEntries, stop }
}
