import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'

/*
 * The Lua that Redis runs, as files: generated from the fragments in scripts/
 * by `npm run build:lua` (scripts/build/), checked in and shipped beside
 * dist/. The library is called by FCALL; the same batch driver as a script
 * by EVALSHA where a master refuses FUNCTION (script-route.ts). An operator
 * can load the library by hand (docs/operations.md).
 *
 * scripts/ ships beside lib/ and dist/, so one relative URL works from the
 * TypeScript sources and from the published build alike.
 */
export const SCRIPTS_DIR = new URL('../../../scripts/', import.meta.url)
export const LIBRARY_FILE = 'library.lua'
export const SCRIPT_FILE = 'eval-script.lua'

export interface LoadedScript {
  readonly source: string
  readonly sha: string
}

export interface FunctionLibrary {
  /** `frrl_` and 12 hex digits of the source's SHA-1. */
  readonly name: string
  /** FUNCTION LOAD's argument. */
  readonly source: string
  /** The FCALL name of the batch function. */
  readonly batch: string
}

export function loadedScript (source: string): LoadedScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') }
}

/** The library file, and the names its first line gives it. */
export function readLibrary (): FunctionLibrary {
  const source = readFileSync(new URL(LIBRARY_FILE, SCRIPTS_DIR), 'utf8')
  const name = /^#!lua name=(frrl_[0-9a-f]{12})\n/.exec(source)?.[1]
  if (name === undefined) throw new Error(`scripts/${LIBRARY_FILE} does not start with its library name: regenerate it (npm run build:lua)`)
  return { name, source, batch: `${name}_batch` }
}

/** The EVAL script file. */
export function readScript (): LoadedScript {
  return loadedScript(readFileSync(new URL(SCRIPT_FILE, SCRIPTS_DIR), 'utf8'))
}
