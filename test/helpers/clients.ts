/** Every client the plugin supports, as the docs configure them; the ioredis-only helpers are re-exported from ioredis-clients.ts. */
import { Cluster, Redis } from 'ioredis'
import { Cluster as Cluster5, Redis as Redis5 } from 'ioredis5'
import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey'
import { createClient as createClient6, createCluster as createCluster6 } from 'redis'
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5'
import { HOST, RECOMMENDED_OPTIONS } from './ioredis-clients.js'

export { adminClient, HOST, pluginClient, RECOMMENDED_OPTIONS, type ClientKind } from './ioredis-clients.js'

/* ------------------------------------------------ every supported client */

/** A plugin client of one flavour, connected (or connecting) with its recommended options. */
export interface FlavourClient {
  client: object
  /** Whether the client is ready now (for waits in fault tests). */
  ready: () => boolean
  close: () => Promise<void>
}

export interface ClientFlavour {
  name: string
  standalone: (port: number) => Promise<FlavourClient>
  cluster: (nodes: ReadonlyArray<{ host: string, port: number }>) => Promise<FlavourClient>
}

const reconnect = (times: number): number => Math.min(times * 50, 200)

interface IoLike { status: string, on: (event: 'error', listener: () => void) => unknown, disconnect: () => void }
type IoRedisClass = new (options: Record<string, unknown>) => IoLike
type IoClusterClass = new (nodes: ReadonlyArray<{ host: string, port: number }>, options: Record<string, unknown>) => IoLike

function ioredisFlavour (name: string, Redis: IoRedisClass, Cluster: IoClusterClass): ClientFlavour {
  const wrap = (client: IoLike): FlavourClient => {
    client.on('error', () => {})
    return { client, ready: () => client.status === 'ready', close: async () => { client.disconnect() } }
  }
  return {
    name,
    // The README's commandTimeout (1000): the faults' 100 ms would fail answered commands during a flood.
    standalone: async (port) => wrap(new Redis({ host: HOST, port, ...RECOMMENDED_OPTIONS, commandTimeout: 1000 })),
    cluster: async (nodes) => wrap(new Cluster(nodes, {
      enableOfflineQueue: false,
      retryDelayOnTryAgain: 10,
      redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 }
    }))
  }
}

interface NodeLike {
  readonly isOpen: boolean
  readonly isReady?: boolean
  on: (event: 'error', listener: () => void) => unknown
  connect: () => Promise<unknown>
  destroy: () => void
}
type NodeCreateClient = (options: Record<string, unknown>) => unknown
type NodeCreateCluster = (options: Record<string, unknown>) => unknown

function nodeRedisFlavour (name: string, createClient: NodeCreateClient, createCluster: NodeCreateCluster): ClientFlavour {
  // The application's own 'error' listener: without one, node-redis crashes the process on a socket error.
  const wrap = async (client: NodeLike): Promise<FlavourClient> => {
    client.on('error', () => {})
    await client.connect()
    return { client, ready: () => client.isReady ?? client.isOpen, close: async () => { if (client.isOpen) client.destroy() } }
  }
  return {
    name,
    standalone: async (port) => await wrap(createClient({ socket: { host: HOST, port, reconnectStrategy: reconnect }, disableOfflineQueue: true }) as NodeLike),
    cluster: async (nodes) => await wrap(createCluster({
      rootNodes: nodes.map((node) => ({ socket: node })),
      defaults: { disableOfflineQueue: true, socket: { reconnectStrategy: reconnect } }
    }) as NodeLike)
  }
}

/** Every client the plugin supports, as a test parametrised over clients runs them. */
export const FLAVOURS: readonly ClientFlavour[] = [
  ioredisFlavour('ioredis 6', Redis as unknown as IoRedisClass, Cluster as unknown as IoClusterClass),
  ioredisFlavour('ioredis 5', Redis5 as unknown as IoRedisClass, Cluster5 as unknown as IoClusterClass),
  ioredisFlavour('iovalkey', Valkey as unknown as IoRedisClass, ValkeyCluster as unknown as IoClusterClass),
  nodeRedisFlavour('node-redis 6', createClient6 as unknown as NodeCreateClient, createCluster6 as unknown as NodeCreateCluster),
  nodeRedisFlavour('node-redis 5', createClient5 as unknown as NodeCreateClient, createCluster5 as unknown as NodeCreateCluster)
]
