import { commandClassOf, ioredisPort, type IoClusterLike, type IoRedisLike } from './ioredis.js'
import { nodeRedisPort, type NodeRedisClientLike, type NodeRedisClusterLike, type NodeRedisSentinelLike, type NodeRedisTarget } from './node-redis.js'
import type { ClientPort } from './port.js'

/*
 * Which adapter a client needs, by duck typing plus the client's own
 * constructor (never `instanceof` on a copy of a client package: the
 * application's copy is the one that counts, and it may be absent here).
 */

type Probe = Record<string, unknown> & { constructor?: { name?: string } }

/** ioredis 5/6 or iovalkey: a `status` string, `sendCommand` and `call`; a Cluster also has `isCluster` and `nodes`. */
function isIoredis (c: Probe): c is Probe & (IoRedisLike | IoClusterLike) {
  if (typeof c.status !== 'string' || typeof c.sendCommand !== 'function' || typeof c.call !== 'function') return false
  return c.isCluster === true ? typeof c.nodes === 'function' : typeof c.duplicate === 'function'
}

/** node-redis v5/v6: boolean `isOpen`, `sendCommand`, no `status`. */
function isNodeRedis (c: Probe): boolean {
  return typeof c.isOpen === 'boolean' && typeof c.sendCommand === 'function' && !('status' in c)
}

function isNodeRedisCluster (c: Probe): c is Probe & NodeRedisClusterLike {
  return Array.isArray(c.masters) && typeof c.nodeClient === 'function'
}

function isNodeRedisSentinel (c: Probe): c is Probe & NodeRedisSentinelLike {
  return typeof c.getMasterNode === 'function' && typeof c.acquire === 'function' && typeof c.isReady === 'boolean'
}

function isNodeRedisClient (c: Probe): c is Probe & NodeRedisClientLike {
  return typeof c.isReady === 'boolean' && typeof c.duplicate === 'function'
}

/**
 * A node-redis client and its kind: a Cluster first (v5 has no cluster
 * `isReady`), then a Sentinel, then a client (a pool or a legacy-mode
 * wrapper matches none).
 */
function nodeRedisTarget (c: Probe): NodeRedisTarget | undefined {
  if (!isNodeRedis(c)) return undefined
  if (isNodeRedisCluster(c)) return { kind: 'node-redis-cluster', client: c }
  if (isNodeRedisSentinel(c)) return { kind: 'node-redis-sentinel', client: c }
  if (isNodeRedisClient(c)) return { kind: 'node-redis', client: c }
  return undefined
}

/** The port of a supported client; undefined for anything else (see describeClient). */
export function clientPort (client: unknown): ClientPort | undefined {
  if (typeof client !== 'object' || client === null) return undefined
  const c = client as Probe
  if (isIoredis(c)) {
    const Command = commandClassOf(c)
    return Command === undefined ? undefined : ioredisPort(c, Command)
  }
  const target = nodeRedisTarget(c)
  return target === undefined ? undefined : nodeRedisPort(target)
}

/** What was passed, for the error that refuses it: `null`, `a string`, `an object (Foo)`. */
export function describeClient (value: unknown): string {
  if (value === null) return 'null'
  if (typeof value !== 'object') return `a ${typeof value}`
  const name = (value as Probe).constructor?.name
  return typeof name === 'string' && name !== '' && name !== 'Object' ? `an object of class ${name}` : 'a plain object'
}
