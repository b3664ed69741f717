/**
 * The ioredis clients of the helpers and the topology suites: admin probes
 * and the plugin's client with the README's options. Apart from clients.ts
 * (every supported client), so that the per-file Redis does not load four
 * more client libraries into every test process.
 */
import { Redis } from 'ioredis'

export const HOST = '127.0.0.1'

/** A throwaway client that fails fast: for probing and administering servers, never for the plugin. */
export function adminClient (port: number): Redis {
  const client = new Redis({ port, host: HOST, enableOfflineQueue: true, maxRetriesPerRequest: 1, connectTimeout: 2000, retryStrategy: (n) => Math.min(n * 50, 200), protocol: 2 })
  client.on('error', () => {})
  return client
}

export type ClientKind = 'recommended' | 'default'

/** The ioredis options the README recommends, as the fault tests use them. */
/** The recommended retryStrategy's longest pause between reconnects: the part of recovery that waits (docs/operations.md, "Recovery"). */
export const RECONNECT_CAP_MS = 200
/**
 * Recovery's bound in tests: the reconnect pause plus slack for the handshake, the first
 * call (the library's EVAL after an empty restart) and a loaded 2-core machine's event loop.
 */
export const RECOVERY_BOUND_MS = RECONNECT_CAP_MS + 300

export const RECOMMENDED_OPTIONS = {
  enableOfflineQueue: false,
  commandTimeout: 1000,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 1,
  retryStrategy: (times: number): number => Math.min(times * 50, RECONNECT_CAP_MS)
}

export function pluginClient (kind: ClientKind, port: number): Redis {
  const client = kind === 'recommended'
    ? new Redis({ host: HOST, port, ...RECOMMENDED_OPTIONS })
    : new Redis({ host: HOST, port })
  client.on('error', () => {})
  return client
}
