/**
 * The one place the test helpers start processes and temporary directories,
 * and the one mechanism that makes sure none outlives the test process:
 *
 * - every child is spawned unref'd (a forgotten server never keeps a test
 *   file alive: tap would wait for it until its per-file timeout);
 * - on 'exit', and on SIGTERM/SIGINT/SIGHUP/SIGALRM (tap ends a timed-out
 *   file with SIGALRM, then SIGKILL), every live child is killed (SIGCONT
 *   first, in case a test paused it) and every directory removed;
 * - a small `sh` watchdog reads the live pids and directories on a pipe from
 *   this process; if the test process dies without running any hook
 *   (SIGKILL), the pipe closes and the watchdog kills and removes them.
 *
 * redis.ts (the per-file Redis) and topologies.ts (servers the fault,
 * cluster and sentinel tests stop and restart) both start servers through
 * startServer() in topologies.ts, which spawns with spawnOwned() here.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'

const live = new Set<ChildProcess>()
const dirs = new Set<string>()
let hooksInstalled = false
let watchdog: ChildProcess | undefined

/*
 * Lines on stdin: `+<pid>`, `-<pid>`, `d<dir>`. At end of input
 * (the test process is gone): SIGCONT and SIGKILL every listed pid, then
 * remove every listed directory.
 */
const WATCHDOG = `
pids=''; dirs=''
while IFS= read -r line; do
  v=\${line#?}
  case $line in
    +*) pids="$pids $v" ;;
    -*) keep=''; for p in $pids; do [ "$p" = "$v" ] || keep="$keep $p"; done; pids=$keep ;;
    d*) dirs="$dirs
$v" ;;
  esac
done
for p in $pids; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
printf '%s\\n' "$dirs" | while IFS= read -r d; do [ -n "$d" ] && rm -rf "$d"; done
`

function tell (line: string): void {
  if (watchdog === undefined) {
    watchdog = spawn('sh', ['-c', WATCHDOG], { stdio: ['pipe', 'ignore', 'ignore'] })
    watchdog.on('error', () => {})
    watchdog.stdin?.on('error', () => {})
    watchdog.unref()
    ;(watchdog.stdin as Socket | null)?.unref()
  }
  watchdog.stdin?.write(line + '\n')
}

/** Synchronous: runs in 'exit' and signal handlers. */
function cleanUp (): void {
  // Orderly end: this process kills and removes everything itself, so the watchdog has nothing to do.
  if (watchdog !== undefined) {
    try { watchdog.kill('SIGKILL') } catch {}
    watchdog = undefined
  }
  for (const child of live) {
    try { if (child.pid !== undefined) process.kill(child.pid, 'SIGCONT') } catch {}
    try { child.kill('SIGKILL') } catch {}
  }
  live.clear()
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  dirs.clear()
}

const SIGNALS = { SIGHUP: 1, SIGINT: 2, SIGALRM: 14, SIGTERM: 15 } as const

function installHooks (): void {
  if (hooksInstalled) return
  hooksInstalled = true
  process.once('exit', cleanUp)
  for (const [signal, number] of Object.entries(SIGNALS)) {
    process.once(signal, () => {
      cleanUp()
      process.exit(128 + number)
    })
  }
}

/** A fresh directory `<tmp>/rrl-<label>-XXXXXX`, removed when the test process ends. */
export function tempDir (label: string): string {
  installHooks()
  const dir = mkdtempSync(join(tmpdir(), `rrl-${label}-`))
  dirs.add(dir)
  tell('d' + dir)
  return dir
}

/** Spawns a child this process owns: unref'd, killed when the test process ends for any reason. */
export function spawnOwned (command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
  installHooks()
  const child = spawn(command, args, { stdio: 'ignore', ...options })
  child.unref()
  if (child.pid !== undefined) {
    const pid = child.pid
    live.add(child)
    tell('+' + pid)
    child.once('exit', () => {
      live.delete(child)
      tell('-' + pid)
    })
  }
  return child
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

/** Whether a Redis answers PING at host:port, within about half a second. */
export async function ping (port: number, host = '127.0.0.1'): Promise<boolean> {
  const client = new Redis({ port, host, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 })
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
