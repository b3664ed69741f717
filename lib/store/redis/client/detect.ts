import { commandClassOf, ioredisPort, type IoClusterLike, type IoRedisLike } from './ioredis.js'
import { nodeRedisPort, type NodeRedisClientLike, type NodeRedisClusterLike, type NodeRedisSentinelLike } from './node-redis.js'
import type { ClientKind, ClientPort } from './port.js'

/*
 * Which adapter a client needs, by duck typing plus the client's own
 * constructor (never `instanceof` on a copy of a client package: the
 * application's copy is the one that counts, and it may be absent here).
 */

type Probe = Record<string, unknown> & { constructor?: { name?: string } }

/** ioredis 5/6 or iovalkey: a `status` string, `sendCommand` and `call`; a Cluster also has `isCluster` and `nodes`. */
function isIoredis (c: Probe): boolean {
  if (typeof c.status !== 'string' || typeof c.sendCommand !== 'function' || typeof c.call !== 'function') return false
  return c.isCluster === true ? typeof c.nodes === 'function' : typeof c.duplicate === 'function'
}

/**
 * node-redis v5/v6: boolean `isOpen`, `sendCommand`, no `status`. A Cluster
 * first (v5 has no cluster `isReady`), then a Sentinel, then a client (a pool
 * or a legacy-mode wrapper matches none).
 */
function nodeRedisKind (c: Probe): ClientKind | undefined {
  if (typeof c.isOpen !== 'boolean' || typeof c.sendCommand !== 'function' || 'status' in c) return undefined
  if (Array.isArray(c.masters) && typeof c.nodeClient === 'function') return 'node-redis-cluster'
  if (typeof c.getMasterNode === 'function' && typeof c.acquire === 'function' && typeof c.isReady === 'boolean') return 'node-redis-sentinel'
  if (typeof c.isReady === 'boolean' && typeof c.duplicate === 'function') return 'node-redis'
  return undefined
}

/** The port of a supported client; undefined for anything else (see describeClient). */
export function clientPort (client: unknown): ClientPort | undefined {
  if (typeof client !== 'object' || client === null) return undefined
  const c = client as Probe
  if (isIoredis(c)) {
    const io = c as unknown as IoRedisLike | IoClusterLike
    const Command = commandClassOf(io)
    return Command === undefined ? undefined : ioredisPort(io, Command)
  }
  const kind = nodeRedisKind(c)
  return kind === undefined ? undefined : nodeRedisPort(kind, c as unknown as NodeRedisClientLike | NodeRedisClusterLike | NodeRedisSentinelLike)
}

/** What was passed, for the error that refuses it: `null`, `a string`, `an object (Foo)`. */
export function describeClient (value: unknown): string {
  if (value === null) return 'null'
  if (typeof value !== 'object') return `a ${typeof value}`
  const name = (value as Probe).constructor?.name
  return typeof name === 'string' && name !== '' && name !== 'Object' ? `an object of class ${name}` : 'a plain object'
}
