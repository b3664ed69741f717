/*
 * npm run build:lua — writes the Lua that Redis runs, from the fragments in
 * scripts/: scripts/library.lua (FUNCTION LOAD, then FCALL) and
 * scripts/eval-script.lua (EVALSHA where a master refuses FUNCTION). Both are
 * checked in and shipped; test/internals/generated-lua.test.ts fails when
 * either differs from what this writes.
 */
import { writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { buildBatchScript, readSources } from './assemble.js'
import { buildLibrary } from './library.js'
import { LIBRARY_FILE, SCRIPT_FILE, SCRIPTS_DIR } from '../../lib/store/redis/lua.js'

/** Each generated file's path and its text. */
export function generatedFiles (): Array<{ url: URL, text: string }> {
  const sources = readSources()
  return [
    { url: new URL(LIBRARY_FILE, SCRIPTS_DIR), text: buildLibrary(sources).source },
    { url: new URL(SCRIPT_FILE, SCRIPTS_DIR), text: buildBatchScript(sources).source }
  ]
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const { url, text } of generatedFiles()) {
    writeFileSync(url, text)
    // stderr: npm pack --json (prepack builds) reads stdout as its JSON
    process.stderr.write(`written ${fileURLToPath(url)} (${text.split('\n').length} lines)\n`)
  }
}
