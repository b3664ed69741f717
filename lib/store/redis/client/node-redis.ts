import { performance } from 'node:perf_hooks'
import { nodeSubscribe } from './subscriber.js'
import { keySlot } from '../cluster-slots.js'
import { INERT, timeMs, toStringMap, type ClientPort, type MasterPort, type ScriptCall, type ScriptOp } from './port.js'

/*
 * node-redis (the `redis` package, v5 and v6): createClient, createCluster,
 * createSentinel. Every command is a raw sendCommand, so replies keep one
 * shape whatever the client's typed-command defaults:
 * - arguments are strings (node-redis refuses numbers at write time);
 * - KEYS are prefixed here with the client's v6 `keyPrefix` (raw sendCommand
 *   ignores it), as ioredis would prefix them;
 * - `typeMapping: {}` per call, so a global Buffer mapping changes nothing;
 * - a command is written one turn after sendCommand, or later, once the
 *   socket drains, when a flood filled it: node-redis removes the command's
 *   abort listener as it encodes it into the socket, so that removal marks
 *   `writtenAt` (the timeout rule measures from the real write);
 * - defuse rewrites the unwritten command in place (an unknown function or
 *   SHA, or `return 0`): node-redis encodes the array it was given at write time, so
 *   a copy written later runs nothing. It aborts only on a v6 Cluster, whose
 *   raw sendCommand copies the arguments: v5's queue unlinks an aborted
 *   command with a remove() that corrupts the list when two queued commands
 *   are aborted in turn (every later command then waits forever; v6 fixed
 *   it). A written command is never resent by createClient or createCluster
 *   (createSentinel may resend one written before a master drop: see
 *   docs/clients.md).
 * The store never adds an 'error' listener (it would hide the application's
 * errors) and never calls connect() (the application's would then throw).
 */

type Reply = Promise<unknown>
interface CallOptions { abortSignal?: AbortSignal, typeMapping: Record<string, never> }

/** A node-redis client as this adapter uses it (structural: no client package imported). */
export interface NodeRedisClientLike {
  readonly isOpen: boolean
  readonly isReady: boolean
  readonly options?: { socket?: { host?: string, port?: number } }
  sendCommand: (args: string[], options?: CallOptions) => Reply
}

interface MasterNode { readonly address: string }

export interface NodeRedisClusterLike {
  readonly isOpen: boolean
  /** v6 only: topology discovery done. */
  readonly isReady?: boolean
  readonly masters: readonly MasterNode[]
  readonly slots: ReadonlyArray<{ master?: MasterNode } | undefined>
  nodeClient: (node: MasterNode) => Promise<NodeRedisClientLike>
  sendCommand: (firstKey: string | undefined, isReadonly: boolean, args: string[], options?: CallOptions) => Reply
}

export interface NodeRedisSentinelLike {
  readonly isOpen: boolean
  readonly isReady: boolean
  getMasterNode: () => { host: string, port: number } | undefined
  sendCommand: (isReadonly: boolean, args: string[], options?: CallOptions) => Reply
}

/** A node-redis client with the kind detect.ts found it to be: the kind tells which shape the client has. */
export type NodeRedisTarget =
  | { kind: 'node-redis', client: NodeRedisClientLike }
  | { kind: 'node-redis-cluster', client: NodeRedisClusterLike }
  | { kind: 'node-redis-sentinel', client: NodeRedisSentinelLike }

/** One raw command: routed by `firstKey` on a Cluster. */
type Send = (firstKey: string | undefined, args: string[], options: CallOptions) => Reply

/** The classes of an error reply from Redis (node-redis sets no `name`; its client-side errors are other classes). */
const SERVER_ERRORS = new Set(['ErrorReply', 'SimpleError', 'BlobError', 'MultiErrorReply'])
const PLAIN: CallOptions = { typeMapping: {} }
const SCRIPT_COMMANDS: Record<ScriptOp, string> = { fcall: 'FCALL', evalsha: 'EVALSHA', eval: 'EVAL' }
const POLL_MS = 10

function senderOf (target: NodeRedisTarget): Send {
  if (target.kind === 'node-redis-cluster') {
    const cluster = target.client
    return (firstKey, args, options) => cluster.sendCommand(firstKey, false, args, options)
  }
  if (target.kind === 'node-redis-sentinel') {
    const sentinel = target.client
    return (_firstKey, args, options) => sentinel.sendCommand(false, args, options)
  }
  const standalone = target.client
  return (_firstKey, args, options) => standalone.sendCommand(args, options)
}

function masterPort (address: string, send: (args: string[]) => Reply): MasterPort {
  return {
    address,
    scriptLoad: async (source) => await send(['SCRIPT', 'LOAD', source]),
    functionLoad: async (source) => await send(['FUNCTION', 'LOAD', source]),
    functionCall: async (name, args) => await send(['FCALL', name, ...args.map(String)]),
    configGet: async (names) => toStringMap(await send(['CONFIG', 'GET', ...names]))
  }
}

function addressOf (client: NodeRedisClientLike): string {
  const socket = client.options?.socket
  return `${socket?.host ?? 'localhost'}:${socket?.port ?? 6379}`
}

async function mastersOf (target: NodeRedisTarget, send: Send): Promise<MasterPort[]> {
  if (target.kind === 'node-redis-cluster') {
    const cluster = target.client
    return await Promise.all(cluster.masters.map(async (master) => {
      const node = await cluster.nodeClient(master)
      return masterPort(master.address, async (args) => await node.sendCommand(args, PLAIN))
    }))
  }
  const own = async (args: string[]): Reply => await send(undefined, args, PLAIN)
  if (target.kind === 'node-redis-sentinel') {
    const master = target.client.getMasterNode()
    return [masterPort(master === undefined ? 'unknown' : `${master.host}:${master.port}`, own)]
  }
  return [masterPort(addressOf(target.client), own)]
}

/** Resolves once the client is ready, or after `ms` (an unref'd poll: a Cluster or Sentinel has no ready event to wait for). */
async function pollReady (isReady: () => boolean, ms: number): Promise<void> {
  const deadline = performance.now() + ms
  while (!isReady() && performance.now() < deadline) {
    await new Promise((resolve) => { setTimeout(resolve, POLL_MS).unref() })
  }
}

/** The script call's wire arguments: strings only, KEYS prefixed. */
interface WriteMark { controller: AbortController, at: number, written: boolean }

/** A command's abort signal that records the write: node-redis drops its listener as it encodes the command. */
function writeMark (): WriteMark {
  const mark: WriteMark = { controller: new AbortController(), at: performance.now(), written: false }
  const { signal } = mark.controller
  const remove = signal.removeEventListener.bind(signal)
  signal.removeEventListener = (...args: Parameters<AbortSignal['removeEventListener']>) => {
    mark.at = performance.now()
    mark.written = true
    remove(...args)
  }
  return mark
}

function scriptArgs (op: ScriptOp, first: string, framed: ReadonlyArray<string | number>, prefix: string): string[] {
  const count = Number(framed[0])
  const args = [SCRIPT_COMMANDS[op], first, String(count)]
  for (let i = 1; i < framed.length; i++) args.push(i <= count ? prefix + String(framed[i]) : String(framed[i]))
  return args
}

/** Where a command on `key` goes: its slot's master on a Cluster, else the one node. */
function nodeFinder (target: NodeRedisTarget): (key: string | undefined) => string {
  if (target.kind !== 'node-redis-cluster') return () => 'standalone'
  // The slot table is read per call: the client replaces it when the topology changes.
  const cluster = target.client
  return (key) => key === undefined ? 'standalone' : cluster.slots[keySlot(key)]?.master?.address ?? 'unknown'
}

export function nodeRedisPort (target: NodeRedisTarget): ClientPort {
  const { kind, client } = target
  const cluster = kind === 'node-redis-cluster'
  const send = senderOf(target)
  // v6.1+: the client's keyPrefix (v5 has none). Read once: it is fixed at creation.
  const prefix = '_keyPrefix' in client ? client._keyPrefix : undefined
  const pre = typeof prefix === 'string' ? prefix : ''
  const isReady = (): boolean => client.isReady ?? client.isOpen
  // A v6 Cluster (the one with isReady) copies a raw command's arguments into its parser.
  const copiesArgs = cluster && client.isReady !== undefined
  const nodeOf = nodeFinder(target)
  return {
    kind,
    cluster,
    isReady,
    state: () => isReady() ? 'ready' : client.isOpen ? 'reconnecting' : 'closed',
    whenReady: async (maxWaitMs) => { await pollReady(isReady, maxWaitMs) },
    script: (op, first, framed): ScriptCall => {
      const args = scriptArgs(op, first, framed, pre)
      const firstKey = Number(framed[0]) > 0 ? args[3] : undefined
      const mark = writeMark()
      const reply = send(firstKey, args, { abortSignal: mark.controller.signal, typeMapping: {} })
      return {
        reply,
        node: nodeOf(firstKey),
        get writtenAt () { return mark.at },
        get written () { return mark.written },
        defuse: () => {
          if (mark.written) return
          args[1] = INERT[op]
          if (copiesArgs) mark.controller.abort()
        }
      }
    },
    nodeOf: (key) => nodeOf(pre + key),
    isServerError: (error) => SERVER_ERRORS.has((error as { constructor?: { name?: string } } | null)?.constructor?.name ?? ''),
    masters: async () => await mastersOf(target, send),
    del: async (keys) => await send(pre + keys[0], ['DEL', ...keys.map((key) => pre + key)], PLAIN),
    // Sent in one turn, so written together; TIME routed by the hash's key on a Cluster.
    timedHash: async (key) => {
      const [time, fields] = await Promise.all([send(pre + key, ['TIME'], PLAIN), send(pre + key, ['HGETALL', pre + key], PLAIN)])
      return { timeMs: timeMs(time), fields: toStringMap(fields) }
    },
    hset: async (key, field, value) => await send(pre + key, ['HSET', pre + key, field, value], PLAIN),
    hdel: async (key, field) => Number(await send(pre + key, ['HDEL', pre + key, field], PLAIN)),
    eval: async (source, keys, args) =>
      await send(keys.length > 0 ? pre + keys[0] : undefined, ['EVAL', source, String(keys.length), ...keys.map((key) => pre + key), ...args], PLAIN),
    keyPrefix: pre,
    subscribe: (subscription) => nodeSubscribe(client as { duplicate?: () => unknown }, subscription)
  }
}
