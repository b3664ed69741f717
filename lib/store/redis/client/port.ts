import type { Subscription, Unsubscribe } from './subscriber.js'

/*
 * The client port: everything the Redis store, its dispatcher and its
 * records hashes (records.ts) need from a Redis client, with one adapter per
 * client family (ioredis.ts: ioredis and iovalkey; node-redis.ts: the `redis`
 * package). Nothing here imports a client package: a user installs only
 * their own client, and detect.ts picks the adapter by duck typing.
 */

/** One script call on the wire (or on its way to it). */
export interface ScriptCall {
  /** The raw reply, or the error (see ClientPort.isServerError). */
  readonly reply: Promise<unknown>
  /** The connection it went to: 'standalone', or the Cluster master's address. Keys the dispatcher's progress record. */
  readonly node: string
  /** performance.now() when the call was written; until then, when it was handed to the client. */
  readonly writtenAt: number
  /** false while the client still holds the call (node-redis waits for the socket to drain). */
  readonly written: boolean
  /*
   * A call abandoned at the timeout may still be sent again by the client:
   * ioredis resends unanswered commands after a reconnect (its default
   * autoResendUnfulfilledCommands) and a Cluster client retries after a
   * redirect. At the timeout the dispatcher defuses the call (below):
   * any copy written after that moment runs nothing (ioredis: its first
   * argument becomes an unknown function or SHA, which fails, or `return 0`,
   * which touches no key; node-redis: the unwritten command is aborted, and a
   * written one is never resent): a decision answered by onRedisError is
   * counted at most once, whatever the client's settings.
   */
  /** After this, no copy of the call the client writes from now on runs anything. Idempotent; never throws. */
  defuse: () => void
}

/** One master, for the warm-up: the script load and the eviction check. */
export interface MasterPort {
  /** host:port, for logs and the eviction warning. */
  readonly address: string
  scriptLoad: (source: string) => Promise<unknown>
  /** FUNCTION LOAD (no REPLACE: a library of the same name is the same version). */
  functionLoad: (source: string) => Promise<unknown>
  /** FCALL on this master: whether a library it could not load is there all the same (loaded by hand). */
  functionCall: (name: string, args: ReadonlyArray<string | number>) => Promise<unknown>
  /** CONFIG GET, normalised (a RESP2 flat list, a RESP3 object or a Map). */
  configGet: (names: readonly string[]) => Promise<Map<string, string>>
}

export type ClientKind = 'ioredis' | 'ioredis-cluster' | 'node-redis' | 'node-redis-cluster' | 'node-redis-sentinel'

/** FCALL (first = the function's name), EVALSHA (first = the SHA) or EVAL (first = the source). */
export type ScriptOp = 'fcall' | 'evalsha' | 'eval'

export interface ClientPort {
  readonly kind: ClientKind
  /** Every key of one call must share a slot. */
  readonly cluster: boolean
  /** Commands may be sent now; a client that is not ready is never asked. */
  isReady: () => boolean
  /** For error text: 'ready', 'reconnecting', 'closed', or an ioredis status. */
  state: () => string
  /** Resolves once ready, or after maxWaitMs. Connects an ioredis lazyConnect client; never connects a node-redis one. */
  whenReady: (maxWaitMs: number) => Promise<void>
  /**
   * One script call. `framed` is what follows the name, SHA or source on the
   * wire: the key count, the keys, then ARGV. Keys are prefixed as the
   * client's own keyPrefix says, and a Cluster routes by the first key.
   */
  script: (op: ScriptOp, first: string, framed: ReadonlyArray<string | number>) => ScriptCall
  /** The node a call whose first key is `key` goes to, named as ScriptCall.node names it: the unit a breaker guards. */
  nodeOf: (key: string) => string
  /** The error is a reply from Redis (Redis is alive), not a connection or client-side error. */
  isServerError: (error: unknown) => boolean
  /** Every master now (one for standalone and Sentinel). */
  masters: () => Promise<MasterPort[]>
  del: (keys: readonly string[]) => Promise<unknown>
  /**
   * A hash's fields and the `TIME` of the node that holds it, in one round
   * trip: a pipeline, not a script, so fleet-record polls never show in
   * script counts.
   */
  timedHash: (key: string) => Promise<TimedHash>
  hset: (key: string, field: string, value: string) => Promise<unknown>
  /** The number of fields removed. */
  hdel: (key: string, field: string) => Promise<number>
  /** The client's own key prefix ('' without one): what the scripts see before each key, so before a slot key in a wake-up. */
  readonly keyPrefix: string
  /** A subscriber connection of the plugin's own (subscriber.ts); undefined where the client cannot make one. */
  subscribe: (subscription: Subscription) => Unsubscribe | undefined
  /** A plain EVAL for small admin scripts (records.ts's compare-and-delete); never defused. */
  eval: (source: string, keys: readonly string[], args: readonly string[]) => Promise<unknown>
}

export interface TimedHash {
  /** The node's `TIME` in ms since the epoch. */
  timeMs: number
  fields: Map<string, string>
}

/** A `TIME` reply (seconds and microseconds, as strings or numbers) in ms. */
export function timeMs (reply: unknown): number {
  const [seconds, micros] = reply as [unknown, unknown]
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

export function isNoScript (error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT')
}

/** FCALL of a function this master does not hold (a restart without persistence, FUNCTION FLUSH, a new Cluster master): nothing ran. */
export function isFunctionMissing (error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('ERR Function not found')
}

/** FCALL refused as a command (an ACL without it, a proxy that does not know it): nothing ran. */
export function isFcallRefused (error: unknown): boolean {
  return error instanceof Error && /^(NOPERM .*'fcall'|ERR unknown command 'fcall')/i.test(error.message)
}

/** An error reply that says "not now" rather than "never" (loading, busy, out of memory or disk, a replica, a Cluster in flux). */
export function isTransientRefusal (error: unknown): boolean {
  return error instanceof Error && /^(LOADING|BUSY|OOM|MISCONF|READONLY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS)\b/.test(error.message)
}

/** FUNCTION LOAD of a library this master already holds: the same name is the same source. */
export function isLibraryLoaded (error: unknown): boolean {
  return error instanceof Error && /^ERR Library '[^']+' already exists/.test(error.message)
}

/** CONFIG GET / HGETALL replies in any shape a client returns (flat list, object, Map) as a Map of strings. */
export function toStringMap (reply: unknown): Map<string, string> {
  const out = new Map<string, string>()
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) out.set(String(reply[i]), String(reply[i + 1]))
  } else if (reply instanceof Map) {
    for (const [name, value] of reply) out.set(String(name), String(value))
  } else if (typeof reply === 'object' && reply !== null) {
    for (const [name, value] of Object.entries(reply)) out.set(name, String(value))
  }
  return out
}

/** A function name no library registers, the SHA nothing is loaded under, and a script that touches no key: what a defused call's first argument becomes. */
export const INERT = { fcall: 'frrl_inert', evalsha: '0'.repeat(40), eval: 'return 0' } as const
