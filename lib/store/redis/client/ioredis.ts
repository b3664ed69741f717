import { performance } from 'node:perf_hooks'
import { awaitWithin } from '../../../util/await-within.js'
import { ioSubscribe } from './subscriber.js'
import { keySlot } from '../cluster-slots.js'
import { INERT, timeMs, toStringMap, type ClientPort, type MasterPort, type ScriptCall, type ScriptOp, type TimedHash } from './port.js'

/*
 * ioredis (5, 6) and iovalkey (its fork): `Redis` and `Cluster`. A script
 * call is the library's own `Command` (taken from the client, never
 * imported: an iovalkey client gets iovalkey's, whose key indexes come from
 * its own command table), written synchronously when the client is
 * ready. Defusing rewrites the command's first argument, so any copy the
 * client writes later (autoResendUnfulfilledCommands after a reconnect, a
 * Cluster redirect) runs nothing.
 */

interface IoCommand {
  args: unknown[]
  readonly promise: Promise<unknown>
  getSlot: () => number | null
}

type IoCommandClass = new (name: string, args: unknown[], options: { replyEncoding: 'utf8', keyPrefix?: string }) => IoCommand

/** What the adapter uses of an ioredis or iovalkey `Redis` (structural: no client package imported). */
export interface IoRedisLike {
  readonly status: string
  readonly options: { host?: string, port?: number, keyPrefix?: string }
  sendCommand: (command: IoCommand) => unknown
  connect: () => Promise<unknown>
  once: (event: 'ready', listener: () => void) => unknown
  off: (event: 'ready', listener: () => void) => unknown
  script: (subcommand: 'LOAD', source: string) => Promise<unknown>
  call: (command: string, ...args: string[]) => Promise<unknown>
  del: (...keys: string[]) => Promise<unknown>
  hset: (key: string, field: string, value: string) => Promise<unknown>
  hdel: (key: string, field: string) => Promise<number>
  eval: (source: string, numKeys: number, ...args: string[]) => Promise<unknown>
  pipeline: () => IoPipelineLike
}

/** A pipeline: one node (a Cluster sends keyless commands with the keyed ones), written at once. */
interface IoPipelineLike {
  time: () => IoPipelineLike
  hgetall: (key: string) => IoPipelineLike
  exec: () => Promise<Array<[Error | null, unknown]> | null>
}

/** The hash and its node's TIME in one pipeline. */
async function timedHash (client: IoRedisLike, key: string): Promise<TimedHash> {
  const replies = await client.pipeline().time().hgetall(key).exec()
  const failed = replies?.find(([error]) => error !== null)?.[0]
  if (replies === null || failed != null) throw failed ?? new Error('the pipeline was not run')
  return { timeMs: timeMs(replies[0]?.[1]), fields: toStringMap(replies[1]?.[1]) }
}

/** An ioredis or iovalkey `Cluster`: the same commands, plus its masters and slot table. */
export interface IoClusterLike extends IoRedisLike {
  readonly isCluster: true
  nodes: (role: 'master') => IoRedisLike[]
  readonly slots: ReadonlyArray<readonly string[] | undefined>
}

type Shadowed = Record<'sendCommand', (command: { constructor: unknown }) => Promise<unknown>>

/**
 * The client's own Command class: the one its `call` builds. (`Redis.Command`
 * is static, but the EventEmitter mixin replaces `constructor` on instances,
 * and a Cluster has none.) Found by shadowing `sendCommand` on the instance
 * for one synchronous `call`: nothing is sent.
 */
export function commandClassOf (client: IoRedisLike): IoCommandClass | undefined {
  const probe = client as unknown as Shadowed
  const own = Object.hasOwn(client, 'sendCommand') ? probe.sendCommand : undefined
  let found: unknown
  probe.sendCommand = (command) => { found = command.constructor; return Promise.resolve() }
  try {
    client.call('PING').catch(() => {})
  } catch {} finally {
    if (own === undefined) delete (probe as Partial<Shadowed>).sendCommand
    else probe.sendCommand = own
  }
  return typeof found === 'function' ? found as IoCommandClass : undefined
}

function masterPort (node: IoRedisLike): MasterPort {
  return {
    address: `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`,
    scriptLoad: async (source) => await node.script('LOAD', source),
    functionLoad: async (source) => await node.call('FUNCTION', 'LOAD', source),
    functionCall: async (name, args) => await node.call('FCALL', name, ...args.map(String)),
    configGet: async (names) => toStringMap(await node.call('CONFIG', 'GET', ...names))
  }
}

/** Waits at most `ms` for a connecting client's ready event, and leaves no listener behind. */
async function readyWithin (client: IoRedisLike, ms: number): Promise<void> {
  let onReady = (): void => {}
  await awaitWithin(new Promise<void>((resolve) => { onReady = resolve; client.once('ready', resolve) }), ms, 'client ready')
  client.off('ready', onReady)
}

/** An ioredis Cluster: it declares `isCluster: true` (a Redis has no such property). */
function isIoCluster (client: IoRedisLike | IoClusterLike): client is IoClusterLike {
  return 'isCluster' in client && client.isCluster === true
}

/** `Command`: the client's own (commandClassOf). */
export function ioredisPort (client: IoRedisLike | IoClusterLike, Command: IoCommandClass): ClientPort {
  const clusterClient = isIoCluster(client) ? client : undefined
  const cluster = clusterClient !== undefined
  return {
    kind: cluster ? 'ioredis-cluster' : 'ioredis',
    cluster,
    isReady: () => client.status === 'ready',
    state: () => client.status,
    whenReady: async (maxWaitMs) => {
      if (client.status === 'wait') client.connect().catch(() => {})
      if (client.status !== 'ready') await readyWithin(client, maxWaitMs)
    },
    script: (op: ScriptOp, first, framed): ScriptCall => {
      const command = new Command(op, [first, ...framed], { replyEncoding: 'utf8', keyPrefix: client.options.keyPrefix })
      client.sendCommand(command)
      const node = clusterClient === undefined ? 'standalone' : clusterClient.slots[command.getSlot() ?? -1]?.[0] ?? 'unknown'
      return {
        reply: command.promise,
        node,
        // Written synchronously: the store sends only to a ready client.
        writtenAt: performance.now(),
        written: true,
        defuse: () => { command.args[0] = INERT[op] }
      }
    },
    // The slot table is read per call: the client replaces it when the topology changes.
    nodeOf: (key) => clusterClient === undefined ? 'standalone' : clusterClient.slots[keySlot((client.options.keyPrefix ?? '') + key)]?.[0] ?? 'unknown',
    isServerError: (error) => (error as { name?: unknown } | null)?.name === 'ReplyError',
    masters: async () => (clusterClient === undefined ? [client] : clusterClient.nodes('master')).map(masterPort),
    del: async (keys) => await client.del(...keys),
    timedHash: async (key) => await timedHash(client, key),
    hset: async (key, field, value) => await client.hset(key, field, value),
    hdel: async (key, field) => await client.hdel(key, field),
    eval: async (source, keys, args) => await client.eval(source, keys.length, ...keys, ...args),
    keyPrefix: client.options.keyPrefix ?? '',
    subscribe: (subscription) => ioSubscribe(client as { duplicate?: () => unknown }, subscription)
  }
}
