/** A loopback TCP proxy for the fault tests: lost replies, paused links, cut connections. */
import { createServer, connect, type Server, type Socket } from 'node:net'
import { HOST } from './ioredis-clients.js'

export type ProxyMode = 'pass' | 'drop-replies' | 'pause' | 'hold-replies'

export interface Proxy {
  port: number
  /** pass: forward; drop-replies: client→server forwarded, server→client discarded; pause: hold both ways; hold-replies: client→server forwarded, server→client held until the mode changes. */
  mode: ProxyMode
  /** Destroys every open connection (both sides); new connections are still accepted. */
  cut: () => void
  /** Refuses new connections too (closes the listener). */
  close: () => Promise<void>
  readonly connections: number
  readonly droppedBytes: number
}

/** A loopback TCP proxy in front of `targetPort`. */
export async function startProxy (targetPort: number): Promise<Proxy> {
  const pairs = new Set<[Socket, Socket]>()
  let dropped = 0
  const held: Array<() => void> = []
  const state = { mode: 'pass' as ProxyMode }
  const server: Server = createServer((downstream) => {
    const upstream = connect(targetPort, HOST)
    const pair: [Socket, Socket] = [downstream, upstream]
    pairs.add(pair)
    const end = (): void => {
      pairs.delete(pair)
      downstream.destroy()
      upstream.destroy()
    }
    downstream.on('error', end).on('close', end)
    upstream.on('error', end).on('close', end)
    downstream.on('data', (chunk: Buffer) => {
      if (state.mode === 'pause') held.push(() => upstream.write(chunk))
      else upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => {
      if (state.mode === 'drop-replies') dropped += chunk.length
      else if (state.mode === 'pause' || state.mode === 'hold-replies') held.push(() => downstream.write(chunk))
      else downstream.write(chunk)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve))
  const address = server.address()
  if (address === null || typeof address !== 'object') throw new Error('proxy has no port')
  const cut = (): void => {
    held.length = 0
    for (const [a, b] of pairs) { a.destroy(); b.destroy() }
    pairs.clear()
  }
  return {
    port: address.port,
    get mode () { return state.mode },
    set mode (next: ProxyMode) {
      state.mode = next
      if (next !== 'pause' && next !== 'hold-replies') for (const release of held.splice(0)) release()
    },
    cut,
    close: async () => {
      cut()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
    get connections () { return pairs.size },
    get droppedBytes () { return dropped }
  }
}
