/**
 * Where the tests get a real Redis, in this order:
 *   1. REDIS_URL, when set (never flushed: tests isolate themselves by key prefix);
 *   2. a container from @testcontainers/redis, where a Docker engine answers;
 *   3. a private `redis-server` from PATH, started on a free loopback port.
 * If none works the suite fails with a message saying how to provide one:
 * a missing Redis never turns into a skipped test.
 */
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { Redis, type RedisOptions } from 'ioredis'

export interface RedisServer {
  url: string
  host: string
  port: number
  /** Stops what this helper started; a no-op for REDIS_URL. */
  stop: () => Promise<void>
}

export async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => {
        if (address !== null && typeof address === 'object') resolve(address.port)
        else reject(new Error('no port'))
      })
    })
  })
}

const HOW_TO_PROVIDE = 'No Redis for the tests. Set REDIS_URL=redis://127.0.0.1:6379, start Docker so @testcontainers/redis can run one, or install redis-server (apt-get install redis-server) so the helper can start one on a free port.'

/** Starts a throwaway `redis-server` on a free loopback port; resolves once it answers PING. */
export async function startRedisServer (extraArgs: string[] = []): Promise<RedisServer & { pid: number, dir: string }> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'rrl-redis-'))
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir, ...extraArgs
  ], { stdio: 'ignore', detached: false })
  const exited = new Promise<never>((_resolve, reject) => {
    child.once('error', (err) => reject(new Error(`${HOW_TO_PROVIDE} (${err.message})`)))
    child.once('exit', (code) => reject(new Error(`redis-server exited with code ${code}`)))
  })
  exited.catch(() => {})
  const deadline = Date.now() + 5000
  for (;;) {
    if (await ping(port)) break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`redis-server on port ${port} did not answer within 5 s. ${HOW_TO_PROVIDE}`)
    }
    await Promise.race([new Promise((resolve) => setTimeout(resolve, 25)), exited])
  }
  const pid = child.pid ?? -1
  return {
    url: `redis://127.0.0.1:${port}`,
    host: '127.0.0.1',
    port,
    pid,
    dir,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((resolve) => child.once('exit', resolve))
        try { process.kill(pid, 'SIGCONT') } catch {}
        child.kill('SIGKILL')
        await gone
      }
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

async function ping (port: number, host = '127.0.0.1'): Promise<boolean> {
  const client = new Redis({ port, host, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  try {
    await client.connect()
    return (await client.ping()) === 'PONG'
  } catch {
    return false
  } finally {
    client.disconnect()
  }
}

function dockerAnswers (): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 3000 })
    return true
  } catch {
    return false
  }
}

let shared: Promise<RedisServer> | undefined

/** One Redis per test file, chosen as the module comment says. */
export async function getRedis (): Promise<RedisServer> {
  shared ??= provision()
  return await shared
}

async function provision (): Promise<RedisServer> {
  const fromEnv = process.env.REDIS_URL
  if (fromEnv !== undefined && fromEnv !== '') {
    const parsed = new URL(fromEnv)
    const port = Number(parsed.port || 6379)
    if (!(await ping(port, parsed.hostname))) throw new Error(`REDIS_URL=${fromEnv} does not answer PING. ${HOW_TO_PROVIDE}`)
    return { url: fromEnv, host: parsed.hostname, port, stop: async () => {} }
  }
  if (dockerAnswers()) {
    const { RedisContainer } = await import('@testcontainers/redis')
    const container = await new RedisContainer('redis:7.0').start()
    const url = container.getConnectionUrl()
    const parsed = new URL(url)
    return { url, host: parsed.hostname, port: Number(parsed.port), stop: async () => { await container.stop() } }
  }
  return await startRedisServer()
}

/** A key prefix no other test (or other run) shares; tests never flush a shared server. */
export function uniquePrefix (label = 't'): string {
  return `${label}${randomBytes(4).toString('hex')}`
}

/** A client that fails fast instead of queueing: what the README recommends. */
export function createClient (server: RedisServer, options: RedisOptions = {}): Redis {
  return new Redis(server.url, { enableOfflineQueue: true, maxRetriesPerRequest: 1, ...options })
}
