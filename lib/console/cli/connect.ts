import { CliError, EXIT } from './exit.js'
import { settleWithin } from '../../util/await-within.js'

/*
 * The CLI's Redis connection, through whichever supported client the
 * project installed: ioredis first, then iovalkey, then node-redis (`redis`),
 * or the one `--client` names. The package never imports a client itself
 * (test/internals/layers.test.ts): the module is loaded by name at run time,
 * from the project's node_modules, as the application loads its own.
 */

export const CLIENTS = ['ioredis', 'iovalkey', 'redis'] as const
export type ClientName = typeof CLIENTS[number]

/** Where to connect: one of a URL, Cluster seed nodes, or Sentinels with the master's name. */
export type Target =
  | { kind: 'standalone', url: string }
  | { kind: 'cluster', nodes: Array<{ host: string, port: number }> }
  | { kind: 'sentinel', sentinels: Array<{ host: string, port: number }>, name: string }

export interface Connection {
  /** The connected client, as the plugin's `redis` option takes it. */
  client: object
  /** The client package that made it. */
  name: ClientName
  close: () => Promise<void>
}

type Loaded = Record<string, unknown>

/** Loads a client package by name; undefined when the project does not have it. */
async function load (name: ClientName): Promise<Loaded | undefined> {
  try {
    // A name in a variable: the package stays an optional peer, never a static import.
    const spec: string = name
    return await import(spec) as Loaded
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') return undefined
    throw error
  }
}

/** The client package to drive: the one asked for, else the first installed of CLIENTS. */
async function pick (wanted: ClientName | undefined): Promise<{ name: ClientName, module: Loaded }> {
  for (const name of wanted === undefined ? CLIENTS : [wanted]) {
    const module = await load(name)
    if (module !== undefined) return { name, module }
  }
  const how = wanted === undefined
    ? 'no Redis client is installed: install one of ioredis, iovalkey or redis (npm install ioredis)'
    : `--client ${wanted}: the package ${wanted} is not installed (npm install ${wanted})`
  throw new CliError(how, EXIT.failure)
}

interface IoClient { connect: () => Promise<unknown>, disconnect: () => void, quit: () => Promise<unknown>, on: (event: string, listener: (error: Error) => void) => unknown }
type IoConstructor = new (...args: unknown[]) => IoClient

/** ioredis and iovalkey: no retries and no reconnection (a CLI run fails at once, with one message). */
function ioClient (module: Loaded, target: Target, timeoutMs: number): IoClient {
  const Redis = (module.Redis ?? module.default) as IoConstructor
  const Cluster = module.Cluster as IoConstructor
  const common = { lazyConnect: true, connectTimeout: timeoutMs, commandTimeout: timeoutMs, maxRetriesPerRequest: 0, enableOfflineQueue: true, retryStrategy: () => null }
  if (target.kind === 'cluster') {
    return new Cluster(target.nodes, { lazyConnect: true, clusterRetryStrategy: () => null, enableOfflineQueue: true, redisOptions: { connectTimeout: timeoutMs, commandTimeout: timeoutMs, maxRetriesPerRequest: 0 } })
  }
  if (target.kind === 'sentinel') {
    return new Redis({ ...common, sentinels: target.sentinels, name: target.name, sentinelRetryStrategy: () => null })
  }
  return new Redis(target.url, common)
}

interface NodeClient { connect: () => Promise<unknown>, destroy?: () => void, close?: () => Promise<unknown>, quit?: () => Promise<unknown>, on: (event: string, listener: (error: Error) => void) => unknown }
type NodeFactory = (options: Record<string, unknown>) => NodeClient

function nodeClient (module: Loaded, target: Target, timeoutMs: number): NodeClient {
  const socket = { connectTimeout: timeoutMs, reconnectStrategy: false }
  if (target.kind === 'cluster') {
    return (module.createCluster as NodeFactory)({ rootNodes: target.nodes.map((node) => ({ socket: node })), defaults: { socket } })
  }
  if (target.kind === 'sentinel') {
    if (typeof module.createSentinel !== 'function') throw new CliError('--sentinel needs node-redis 5 or later (createSentinel), or ioredis', EXIT.failure)
    return (module.createSentinel as NodeFactory)({ name: target.name, sentinelRootNodes: target.sentinels, nodeClientOptions: { socket } })
  }
  return (module.createClient as NodeFactory)({ url: target.url, socket })
}

/** Rejects after `ms` with what was being waited for. */
async function within<T> (work: Promise<T>, ms: number, what: string): Promise<T> {
  return await settleWithin(work, ms, () => new Error(`no answer within ${ms} ms from ${what}`))
}

/** Where the target is, for messages. */
export function describeTarget (target: Target): string {
  if (target.kind === 'standalone') {
    try {
      const url = new URL(target.url)
      // Never print a password given in the URL.
      return `${url.protocol}//${url.host}`
    } catch {
      return 'the Redis URL'
    }
  }
  const nodes = target.kind === 'cluster' ? target.nodes : target.sentinels
  return `${target.kind} ${nodes.map((node) => `${node.host}:${node.port}`).join(',')}`
}

/** A connected client of the chosen package; a failure is a one-line CliError (exit 1). */
export async function connect (target: Target, wanted: ClientName | undefined, timeoutMs: number): Promise<Connection> {
  const { name, module } = await pick(wanted)
  const where = describeTarget(target)
  let close: () => Promise<void>
  let client: IoClient | NodeClient
  let lastError: Error | undefined
  if (name === 'redis') {
    const node = nodeClient(module, target, timeoutMs)
    client = node
    close = async () => {
      try {
        if (typeof node.destroy === 'function') node.destroy()
        else await node.close?.()
      } catch {}
    }
  } else {
    const io = ioClient(module, target, timeoutMs)
    client = io
    close = async () => { io.disconnect() }
  }
  // Without a listener a client's socket error would end the process with a stack trace.
  client.on('error', (error) => { lastError = error })
  try {
    await within(client.connect(), timeoutMs, where)
  } catch (error) {
    await close()
    const cause = lastError ?? (error as Error)
    throw new CliError(`cannot connect to Redis at ${where}: ${oneLine(cause)}`, EXIT.failure)
  }
  return { client, name, close }
}

/** An error's message on one line (AggregateErrors name their first cause). */
export function oneLine (error: unknown): string {
  const inner = error instanceof AggregateError && error.errors.length > 0 ? error.errors[0] as unknown : error
  const text = inner instanceof Error ? (inner.message !== '' ? inner.message : inner.name) : String(inner)
  return text.split('\n')[0] ?? text
}
