import { commandClassOf, ioredisPort, type IoClusterLike, type IoRedisLike } from './ioredis.js'
import type { ClientPort } from './port.js'

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

/** The port of a supported client; undefined for anything else (see describeClient). */
export function clientPort (client: unknown): ClientPort | undefined {
  if (typeof client !== 'object' || client === null) return undefined
  const c = client as Probe
  if (isIoredis(c)) {
    const io = c as unknown as IoRedisLike | IoClusterLike
    const Command = commandClassOf(io)
    return Command === undefined ? undefined : ioredisPort(io, Command)
  }
  return undefined
}

/** What was passed, for the error that refuses it: `null`, `a string`, `an object (Foo)`. */
export function describeClient (value: unknown): string {
  if (value === null) return 'null'
  if (typeof value !== 'object') return `a ${typeof value}`
  const name = (value as Probe).constructor?.name
  return typeof name === 'string' && name !== '' && name !== 'Object' ? `an object of class ${name}` : 'a plain object'
}
