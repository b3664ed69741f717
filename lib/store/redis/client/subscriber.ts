/*
 * The plugin's own subscriber connection (a concurrency block's `wait`): a
 * duplicate of the user's client, subscribed to one channel, for each client
 * family. Its errors are not reported: the store's own calls on the user's
 * client report a Redis in trouble, and a waiter polls anyway. Messages sent
 * while it reconnects are lost: `onReady` runs when its connection is lost
 * and each time it is subscribed again, and the waiters poll at once
 * (kinds/concurrency/waiters.ts).
 */

/** Closes the subscriber connection. */
export type Unsubscribe = () => Promise<void>

export interface Subscription {
  channel: string
  onMessage: (message: string) => void
  onReady: () => void
}

type Listener = (...args: unknown[]) => void

interface IoSubscriberLike {
  readonly status: string
  on: (event: string, listener: Listener) => unknown
  connect: () => Promise<unknown>
  subscribe: (channel: string) => Promise<unknown>
  disconnect: () => void
}

const ignore = (): void => {}

/**
 * ioredis and iovalkey (Redis or Cluster): `duplicate()`; it subscribes again
 * on each ready. A standalone duplicate turns the client's own
 * autoResubscribe off: that one's promise is nobody's, and a close racing a
 * reconnect rejected it unhandled (chaos seed 606917315).
 */
export function ioSubscribe (client: { duplicate?: (options?: object) => unknown, isCluster?: boolean }, { channel, onMessage, onReady }: Subscription): Unsubscribe | undefined {
  if (typeof client.duplicate !== 'function') return undefined
  const subscriber = (client.isCluster === true ? client.duplicate() : client.duplicate({ autoResubscribe: false })) as IoSubscriberLike
  subscriber.on('error', ignore)
  subscriber.on('message', (name, message) => { if (name === channel) onMessage(String(message)) })
  subscriber.on('ready', () => { subscriber.subscribe(channel).then(onReady, ignore) })
  // Lost: the waiters meet the store at once (a failure answers by onRedisError).
  subscriber.on('close', onReady)
  if (subscriber.status === 'wait') subscriber.connect().catch(ignore)
  return async () => { subscriber.disconnect() }
}

interface NodeSubscriberLike {
  on?: (event: string, listener: Listener) => unknown
  connect: () => Promise<unknown>
  subscribe: (channel: string, listener: (message: unknown) => void) => Promise<unknown>
  destroy?: () => unknown
  disconnect?: () => Promise<unknown>
}

/** node-redis (client, Cluster, Sentinel): `duplicate()`, connected once; it subscribes again itself after a reconnect. */
export function nodeSubscribe (client: { duplicate?: () => unknown }, { channel, onMessage, onReady }: Subscription): Unsubscribe | undefined {
  if (typeof client.duplicate !== 'function') return undefined
  const subscriber = client.duplicate() as NodeSubscriberLike
  // 'error' comes with a lost connection: the waiters meet the store at once.
  subscriber.on?.('error', onReady)
  subscriber.on?.('ready', onReady)
  subscriber.connect()
    .then(async () => await subscriber.subscribe(channel, (message) => { onMessage(String(message)) }))
    .then(onReady, ignore)
  return async () => {
    if (typeof subscriber.destroy === 'function') subscriber.destroy()
    else await subscriber.disconnect?.()
  }
}
