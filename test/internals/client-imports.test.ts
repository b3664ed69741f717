import { test } from 'tap'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

/*
 * Issue 19: every Redis client is an optional peer dependency. No lib module
 * (and so no published .js or .d.ts) imports a client package, so a project
 * that installed only node-redis, or only iovalkey, loads and compiles.
 */
const root = fileURLToPath(new URL('../../', import.meta.url))
const CLIENT_PACKAGES = /^(ioredis|iovalkey|redis|@redis\/[^/]+|@valkey\/valkey-glide)(\/|$)/

function sources (dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? sources(path) : name.endsWith('.ts') ? [path] : []
  })
}

test('no lib module imports a Redis client package', async (t) => {
  const files = sources(join(root, 'lib'))
  for (const file of files) {
    const specs = [...readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)].map((match) => match[1] as string)
    t.same(specs.filter((spec) => CLIENT_PACKAGES.test(spec)), [], `${relative(root, file)} imports no client`)
  }
})

test('every supported client is an optional peer dependency', async (t) => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string>, peerDependenciesMeta: Record<string, { optional?: boolean }> }
  for (const name of ['ioredis', 'iovalkey', 'redis']) {
    t.ok(pkg.peerDependencies[name], `${name} is a peer dependency`)
    t.equal(pkg.peerDependenciesMeta[name]?.optional, true, `${name} is optional`)
  }
})
