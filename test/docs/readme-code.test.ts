/**
 * The documents' TypeScript is code, not prose: every ```ts block of
 * README.md and docs/*.md is type-checked under this project's strict
 * settings, and the README's Quick Start runs as copied against a private
 * redis-server.
 *
 * The blocks are checked as the modules of one project that followed the
 * Quick Start (its `declare module 'fastify'` merge applies to all of them,
 * as it would in an app that declares it once); each block is its own module,
 * so it must import and define everything it uses. `fastify-redis-rate-limit`
 * resolves to this tree's lib/.
 */
import { test } from 'tap'
import { join } from 'node:path'
import ts from 'typescript'
import { blockModule, entry, root, tsBlocks } from '../helpers/doc-blocks.js'
import { freePort, spawnOwned } from '../helpers/processes.js'
import { startRedisServer } from '../helpers/redis.js'

const blocks = tsBlocks()

test('every ```ts block of README.md and docs/*.md type-checks under strict', async (t) => {
  t.ok(blocks.length >= 7, `${blocks.length} blocks`)
  t.ok(new Set(blocks.map((block) => block.file)).size >= 5, 'from the README and the docs pages')
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile)
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, root)
  Object.assign(options, { noEmit: true, paths: { 'fastify-redis-rate-limit': [entry] } })
  // Virtual files next to the project's own, so packages resolve from its node_modules.
  const files = new Map(blocks.map((block) => [join(root, `${block.file.replace('/', '-')}-line-${block.line}.ts`), block]))
  const host = ts.createCompilerHost(options)
  const { fileExists, readFile } = host
  host.fileExists = (name) => files.has(name) || fileExists(name)
  host.readFile = (name) => files.get(name)?.code ?? readFile(name)
  const program = ts.createProgram([...files.keys()], options, host)
  t.equal(options.strict, true)
  for (const [name, block] of files) {
    const source = program.getSourceFile(name)
    const diagnostics = [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)]
    const messages = diagnostics.map((d) => {
      const at = d.start === undefined || d.file === undefined ? '' : `line ${block.line + d.file.getLineAndCharacterOfPosition(d.start).line + 1}: `
      return `${at}TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`
    })
    t.same(messages, [], `${block.file} block at line ${block.line} compiles`)
  }
})

test('the Quick Start runs as copied: routes answer with their limits against a real Redis', async (t) => {
  const quickStart = blocks[0]
  if (quickStart?.file !== 'README.md') throw new Error('no ```ts block in the README')
  t.match(quickStart.code, /await app\.listen/, 'the first block is the Quick Start')
  const server = await startRedisServer()
  t.teardown(async () => { await server.stop() })
  const file = blockModule('quick-start', quickStart.code)
  const port = await freePort()
  const child = spawnOwned(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, REDIS_URL: server.url, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  t.teardown(() => { child.kill('SIGKILL') })
  const base = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 30_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the Quick Start exited (${child.exitCode}): ${stderr}`)
    try {
      await fetch(`${base}/health`)
      break
    } catch {
      if (Date.now() > deadline) throw new Error(`the Quick Start did not listen within 30 s: ${stderr}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  const login = async (username: string): Promise<number> => {
    const res = await fetch(`${base}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password: 'x' }) })
    await res.arrayBuffer()
    return res.status
  }
  // The first decisions load the scripts into the fresh Redis; under load that may exceed the
  // Quick Start's 50 ms timeout once (a fail-closed 503). Warm up with another username.
  for (let i = 0; i < 20 && await login('warm-up') === 503; i++);
  const health = await fetch(`${base}/health`)
  t.equal(health.status, 200)
  t.equal(health.headers.get('ratelimit-policy'), null, '/health opted out')
  const order = await fetch(`${base}/orders/42`)
  t.equal(order.status, 200)
  t.equal(order.headers.get('ratelimit-policy'), '"get-orders-id";q=100;w=60')
  // Quiet machine: 200 ×5, then 429. A decision over the Quick Start's 50 ms timeout answers 503 on
  // this fail-closed route (it may or may not have been counted), so a loaded machine may show one.
  const logins: number[] = []
  while (logins.length < 12 && !logins.includes(429)) logins.push(await login('alice'))
  const admitted = logins.filter((status) => status === 200).length
  t.ok(logins.every((status) => status === 200 || status === 429 || status === 503), `only 200, 429 or 503: ${logins.join(' ')}`)
  t.equal(logins.at(-1), 429, 'refused once the quota is used up')
  t.ok(admitted >= 1 && admitted <= 5 && logins.length >= 6, `login: 5 per 15 minutes per IP and username (${logins.join(' ')})`)
  t.equal(stderr, '', 'nothing on stderr')
})
