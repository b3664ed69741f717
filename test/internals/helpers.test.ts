/**
 * The test helpers own what they start: a test process that ends in any way
 * (tap's timeout sends SIGALRM and then SIGKILL; Ctrl-C is SIGINT) leaves no
 * redis-server and no temporary directory behind, and with no Redis to be
 * had the suite fails with a message saying how to provide one.
 */
import { test } from 'tap'
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { once } from 'node:events'
import { tempDir, waitFor } from '../helpers/topologies.js'

const root = fileURLToPath(new URL('../..', import.meta.url))
const helper = (name: string): string => pathToFileURL(join(root, 'test', 'helpers', name)).href

/** Running, as opposed to gone or a zombie nobody has reaped yet. */
function running (pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

/** A script in its own temp dir, run by node with tsx from the project root. */
function script (code: string): { file: string, tmp: string } {
  const dir = tempDir('helper-child')
  const file = join(dir, 'child.mts') // ESM: its directory has no package.json
  writeFileSync(file, code)
  return { file, tmp: dir }
}

// SIGKILL: the watchdog cleans up; SIGALRM (tap's timeout; SIGTERM and SIGINT take the same hook): the process does.
for (const signal of ['SIGKILL', 'SIGALRM'] as const) {
  test(`a test process ended by ${signal} leaves no redis-server and no directory behind`, async (t) => {
    const { file } = script(`
      import { startRedisServer } from '${helper('redis.ts')}'
      const perFile = await startRedisServer()
      const paused = await startRedisServer()
      paused.pause()
      console.log(JSON.stringify({ pids: [perFile.pid, paused.pid], dirs: [perFile.dir, paused.dir] }))
      setInterval(() => {}, 1000)
    `)
    // The child's TMPDIR stays this one's: a fresh one would make tsx compile everything again.
    const child = spawn(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, REDIS_URL: '' }, stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => { child.kill('SIGKILL') })
    const [line] = await Promise.race([
      once(child.stdout, 'data') as Promise<[Buffer]>,
      once(child, 'exit').then(([code]) => { throw new Error(`the child exited (${String(code)}) before starting its servers`) })
    ])
    const { pids, dirs } = JSON.parse(line.toString()) as { pids: number[], dirs: string[] }
    t.ok(pids.every(running) && pids.every((pid, i) => readlinkSync(`/proc/${pid}/cwd`) === dirs[i]), 'the child runs a per-file Redis and a server it paused, each in its directory')
    child.kill(signal)
    await once(child, 'exit')
    await waitFor('every server to be gone', () => !pids.some(running), 5000)
    await waitFor('every directory to be removed', () => !dirs.some((dir) => existsSync(dir)), 5000)
    t.pass(`after ${signal}: no server, no directory`)
  })
}

test('with no REDIS_URL, no Docker and no redis-server on PATH the suite fails, saying how to provide a Redis', async (t) => {
  const { file, tmp } = script(`
    import { getRedis } from '${helper('redis.ts')}'
    await getRedis()
  `)
  // A PATH with node alone: no redis-server, no docker.
  const bin = join(tmp, 'bin')
  mkdirSync(bin)
  symlinkSync(process.execPath, join(bin, 'node'))
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: { ...process.env, REDIS_URL: '', PATH: bin },
    stdio: ['ignore', 'ignore', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [code] = await once(child, 'exit') as [number]
  t.not(code, 0, 'the process fails')
  t.match(stderr, /No Redis for the tests/)
  t.match(stderr, /redis-server/)
  t.match(stderr, /REDIS_URL=/)
})
