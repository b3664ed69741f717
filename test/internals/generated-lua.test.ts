/**
 * The Lua that Redis runs is a file (scripts/library.lua, scripts/eval-script.lua):
 * generated from the fragments by `npm run build:lua`, checked in and shipped.
 * A fragment changed without regenerating fails here, as does a package that
 * would ship a file the store does not read or miss one it does.
 */
import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { generatedFiles } from '../../scripts/build/generate.js'
import { LIBRARY_FILE, readLibrary, readScript, SCRIPT_FILE } from '../../lib/store/redis/lua.js'
import { buildLibrary } from '../../scripts/build/library.js'
import { buildBatchScript } from '../../scripts/build/assemble.js'

test('the checked-in Lua is what the fragments generate (npm run build:lua rewrites it)', async (t) => {
  for (const { url, text } of generatedFiles()) {
    t.equal(readFileSync(url, 'utf8'), text, `${fileURLToPath(url)} is fresh`)
  }
})

test('the store reads the generated files: the library\'s name and function, the script\'s SHA', async (t) => {
  const library = readLibrary()
  t.same(library, buildLibrary(), 'the library as built, its name read from its first line')
  t.match(library.name, /^frrl_[0-9a-f]{12}$/)
  t.same(readScript(), buildBatchScript(), 'the EVAL script and its SHA')
})

test('package.json ships the generated files and no fragment; the build regenerates them', async (t) => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { files: string[], scripts: Record<string, string> }
  const shipped = pkg.files.filter((file) => file.startsWith('scripts/'))
  t.same(shipped.sort(), [`scripts/${SCRIPT_FILE}`, `scripts/${LIBRARY_FILE}`].sort())
  t.match(pkg.scripts.build, /build:lua/, 'npm run build runs build:lua')
})
