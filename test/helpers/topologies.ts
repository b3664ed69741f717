/**
 * Real Redis topologies for the fault, cluster and sentinel suites, on free
 * loopback ports, each server in its own temporary directory:
 *
 * - startServer(): one redis-server the test may stop, restart on the same
 *   port, hang (SIGSTOP) and resume (SIGCONT);
 * - startCluster(): three masters, `redis-cli --cluster create`, and a wait
 *   until every node says cluster_state:ok;
 * - startSentinel(): a master, a replica and one sentinel started from a
 *   writable config file with `redis-server FILE --sentinel`;
 * - startProxy() (proxy.ts): a loopback TCP proxy that forwards, drops
 *   server→client replies, pauses both directions, or cuts every connection.
 *
 * Every process is a child of the test process, started through processes.ts:
 * killed in stop(), and again (SIGKILL) when the test process ends for any
 * reason, so a failing or timed-out test never leaves a redis-server behind.
 */
import { execFile, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Redis } from 'ioredis'
import { adminClient, HOST } from './ioredis-clients.js'
import { freePort, ping, spawnOwned, tempDir } from './processes.js'

// One import for the topology suites: the clients and the proxy live beside this file.
export { adminClient, pluginClient, RECOMMENDED_OPTIONS, RECOVERY_BOUND_MS, type ClientKind } from './ioredis-clients.js'
export { startProxy, type Proxy, type ProxyMode } from './proxy.js'
export { tempDir }

const execFileAsync = promisify(execFile)

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/** Polls `check` every `everyMs` until it returns true; throws `what` after `withinMs`. */
export async function waitFor (what: string, check: () => Promise<boolean> | boolean, withinMs = 10_000, everyMs = 25): Promise<number> {
  const started = Date.now()
  for (;;) {
    try { if (await check()) return Date.now() - started } catch {}
    if (Date.now() - started > withinMs) throw new Error(`timed out after ${withinMs} ms waiting for ${what}`)
    await sleep(everyMs)
  }
}

export interface ManagedServer {
  host: string
  port: number
  url: string
  dir: string
  readonly pid: number
  /** Stops the process (SIGKILL: the port closes at once, nothing is saved). */
  stop: () => Promise<void>
  /** Starts it again on the same port and directory (an empty dataset: scripts are gone too). */
  start: () => Promise<void>
  /** SIGSTOP: the port stays open, nothing answers. */
  pause: () => void
  /** SIGCONT. */
  resume: () => void
  readonly running: boolean
  /** The server's log (last lines), for error messages. */
  log: () => string
}

/** One redis-server on a free loopback port, answering PING when this resolves. */
export async function startServer (args: string[] = [], options: { port?: number, label?: string, sentinel?: string } = {}): Promise<ManagedServer> {
  const port = options.port ?? await freePort()
  const dir = tempDir(options.label ?? `redis-${port}`)
  let child: ChildProcess | undefined
  const logFile = join(dir, 'redis.log')

  const launch = async (): Promise<void> => {
    const argv = options.sentinel !== undefined
      ? [options.sentinel, '--sentinel', '--logfile', logFile]
      : ['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', logFile, ...args]
    // Unref'd and owned: a forgotten server never keeps the test process alive, and dies with it.
    const proc = spawnOwned('redis-server', argv)
    const failed = new Promise<never>((_resolve, reject) => {
      proc.once('error', (err) => reject(new Error(`cannot run redis-server: ${err.message} (apt-get install redis-server)`)))
      proc.once('exit', (code, signal) => reject(new Error(`redis-server on ${port} exited (${code ?? signal}) at start`)))
    })
    failed.catch(() => {})
    child = proc
    const deadline = Date.now() + 5000
    while (!(await ping(port))) {
      if (Date.now() > deadline) {
        proc.kill('SIGKILL')
        throw new Error(`redis-server on ${port} did not answer within 5 s`)
      }
      await Promise.race([sleep(20), failed])
    }
  }

  const stop = async (): Promise<void> => {
    const proc = child
    child = undefined
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return
    const gone = new Promise((resolve) => proc.once('exit', resolve))
    proc.ref() // keep the test process alive until the exit is seen
    try { process.kill(proc.pid as number, 'SIGCONT') } catch {}
    proc.kill('SIGKILL')
    await gone
  }

  await launch()
  return {
    host: HOST,
    port,
    url: `redis://${HOST}:${port}`,
    dir,
    get pid () { return child?.pid ?? -1 },
    get running () { return child !== undefined && child.exitCode === null && child.signalCode === null },
    stop,
    start: async () => {
      if (child !== undefined) throw new Error('already running')
      await launch()
    },
    pause: () => { if (child?.pid !== undefined) process.kill(child.pid, 'SIGSTOP') },
    resume: () => { if (child?.pid !== undefined) process.kill(child.pid, 'SIGCONT') },
    log: () => {
      try {
        return readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n')
      } catch { return '' }
    }
  }
}

/**
 * Fail-fast admin clients, one per port and reused; `stop` disconnects them
 * and stops every server in `servers` (the caller keeps pushing to it).
 */
function adminPool (servers: ManagedServer[]): { admin: (port: number) => Redis, stop: () => Promise<void> } {
  const admins = new Map<number, Redis>()
  const admin = (port: number): Redis => {
    let client = admins.get(port)
    if (client === undefined) {
      client = adminClient(port)
      admins.set(port, client)
    }
    return client
  }
  const stop = async (): Promise<void> => {
    for (const client of admins.values()) client.disconnect()
    admins.clear()
    await Promise.all(servers.map(async (server) => { await server.stop() }))
  }
  return { admin, stop }
}

/* ---------------------------------------------------------------- cluster */

export interface ClusterNode { server: ManagedServer, id: string, port: number }

export interface ManagedCluster {
  nodes: ClusterNode[]
  /** Startup nodes for `new Cluster(...)`. */
  startupNodes: Array<{ host: string, port: number }>
  /** A fail-fast client to one node, for administration (reused, closed by stop()). */
  admin: (port: number) => Redis
  /** The node currently serving `slot`. */
  ownerOf: (slot: number) => Promise<ClusterNode>
  /** Moves one slot with its keys from its owner to `to` (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE everywhere). */
  migrateSlot: (slot: number, to: ClusterNode, pauses?: { beforeMigrate?: () => Promise<void>, afterMigrate?: () => Promise<void> }) => Promise<{ keys: number }>
  stop: () => Promise<void>
}

/**
 * Three masters on loopback, every slot assigned, cluster_state:ok on each node. About 2–3 s.
 * `nodeTimeoutMs` (2,000 by default) and `fullCoverage: false` keep the healthy masters
 * answering while one is stopped for longer (REDIS-NOTES: else CLUSTERDOWN everywhere after ~2 s).
 */
export async function startCluster (settings: { nodeTimeoutMs?: number, fullCoverage?: boolean } = {}): Promise<ManagedCluster> {
  const extra = ['--cluster-node-timeout', String(settings.nodeTimeoutMs ?? 2000), '--cluster-require-full-coverage', settings.fullCoverage === false ? 'no' : 'yes']
  const servers: ManagedServer[] = []
  const { admin, stop } = adminPool(servers)
  try {
    for (let i = 0; i < 3; i++) {
      servers.push(await startServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', ...extra], { label: 'cluster' }))
    }
    await execFileAsync('redis-cli', ['--cluster', 'create', ...servers.map((s) => `${HOST}:${s.port}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 20_000 })
    await waitFor('cluster_state:ok on every node', async () => {
      for (const server of servers) {
        const info = await admin(server.port).cluster('INFO') as string
        if (!info.includes('cluster_state:ok') || !info.includes('cluster_known_nodes:3') || !info.includes('cluster_slots_ok:16384')) return false
      }
      return true
    }, 20_000, 50)
    const nodes: ClusterNode[] = []
    for (const server of servers) nodes.push({ server, port: server.port, id: await admin(server.port).cluster('MYID') as string })

    const ownerOf = async (slot: number): Promise<ClusterNode> => {
      const slots = await admin(servers[0]!.port).cluster('SLOTS') as unknown as Array<[number, number, [string, number, string]]>
      for (const [from, to, [, port]] of slots) {
        if (slot >= from && slot <= to) return nodes.find((n) => n.port === Number(port)) as ClusterNode
      }
      throw new Error(`slot ${slot} has no owner`)
    }

    const migrateSlot = async (slot: number, to: ClusterNode, pauses: { beforeMigrate?: () => Promise<void>, afterMigrate?: () => Promise<void> } = {}): Promise<{ keys: number }> => {
      const from = await ownerOf(slot)
      if (from.id === to.id) throw new Error('slot already there')
      await admin(to.port).cluster('SETSLOT', slot, 'IMPORTING', from.id)
      await admin(from.port).cluster('SETSLOT', slot, 'MIGRATING', to.id)
      await pauses.beforeMigrate?.()
      let moved = 0
      for (;;) {
        const keys = await admin(from.port).cluster('GETKEYSINSLOT', slot, 100) as string[]
        if (keys.length === 0) break
        await admin(from.port).call('MIGRATE', HOST, String(to.port), '', '0', '5000', 'KEYS', ...keys)
        moved += keys.length
      }
      await pauses.afterMigrate?.()
      // Destination first, then source, then the rest, as the Redis manual says.
      await admin(to.port).cluster('SETSLOT', slot, 'NODE', to.id)
      await admin(from.port).cluster('SETSLOT', slot, 'NODE', to.id)
      for (const node of nodes) if (node !== to && node !== from) await admin(node.port).cluster('SETSLOT', slot, 'NODE', to.id)
      return { keys: moved }
    }

    return {
      nodes,
      startupNodes: nodes.map((n) => ({ host: HOST, port: n.port })),
      admin,
      ownerOf,
      migrateSlot,
      stop
    }
  } catch (error) {
    await stop()
    throw error
  }
}

/* --------------------------------------------------------------- sentinel */

export interface ManagedSentinel {
  master: ManagedServer
  replica: ManagedServer
  sentinel: ManagedServer
  name: string
  sentinels: Array<{ host: string, port: number }>
  admin: (port: number) => Redis
  /** The port Sentinel currently names as master. */
  masterPort: () => Promise<number>
  stop: () => Promise<void>
}

/** A master, one replica (link up) and one sentinel that knows both. */
export async function startSentinel (name = 'mymaster'): Promise<ManagedSentinel> {
  const started: ManagedServer[] = []
  const { admin, stop } = adminPool(started)
  try {
    const fast = ['--repl-diskless-sync-delay', '0']
    const master = await startServer(fast, { label: 'sentinel-master' })
    started.push(master)
    const replica = await startServer([...fast, '--replicaof', HOST, String(master.port)], { label: 'sentinel-replica' })
    started.push(replica)
    await waitFor('replica link up', async () => (await admin(replica.port).info('replication')).includes('master_link_status:up'))

    const port = await freePort()
    const dir = tempDir('sentinel')
    const file = join(dir, 'sentinel.conf')
    writeFileSync(file, [
      `port ${port}`,
      `bind ${HOST}`,
      `dir ${dir}`,
      `sentinel monitor ${name} ${HOST} ${master.port} 1`,
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 5000`,
      ''
    ].join('\n'))
    const sentinel = await startServer([], { port, label: 'sentinel', sentinel: file })
    started.push(sentinel)
    await waitFor('sentinel to see the replica', async () => {
      const replicas = await admin(port).call('SENTINEL', 'REPLICAS', name) as unknown[][]
      return replicas.some((fields) => {
        const flat = fields.map(String)
        return flat[flat.indexOf('flags') + 1] === 'slave' && flat[flat.indexOf('master-link-status') + 1] === 'ok'
      })
    }, 15_000, 50)
    return {
      master,
      replica,
      sentinel,
      name,
      sentinels: [{ host: HOST, port }],
      admin,
      masterPort: async () => {
        const [, masterPort] = await admin(port).call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name) as [string, string]
        return Number(masterPort)
      },
      stop
    }
  } catch (error) {
    await stop()
    throw error
  }
}
