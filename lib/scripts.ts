import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { ALGORITHMS, type AlgorithmName } from './algorithm-types.js'

export interface LoadedScript {
  source: string
  sha: string
}

/*
 * scripts/ ships beside lib/ and dist/, so one relative URL works from the
 * TypeScript sources and from the published build alike.
 */
const SCRIPTS_DIR = new URL('../scripts/', import.meta.url)

export function loadScripts (): Record<AlgorithmName, LoadedScript> {
  const scripts = {} as Record<AlgorithmName, LoadedScript>
  for (const name of ALGORITHMS) {
    const source = readFileSync(new URL(`${name}.lua`, SCRIPTS_DIR), 'utf8')
    scripts[name] = { source, sha: createHash('sha1').update(source).digest('hex') }
  }
  return scripts
}
