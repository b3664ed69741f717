/**
 * The documents' ```ts blocks as code: each with its file and line, and a
 * module made of one, to run as copied (test/docs/readme-code.test.ts,
 * test/docs/startup-wiring.test.ts).
 */
import { readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { tempDir } from './processes.js'

export const root = fileURLToPath(new URL('../..', import.meta.url))
/** What `fastify-redis-rate-limit` resolves to in a block: this tree's lib/. */
export const entry = join(root, 'lib', 'index.ts')

export interface Block { file: string, line: number, code: string }

/** Every ```ts block of README.md (first: its first block is the Quick Start), then of docs/*.md by name. */
export function tsBlocks (): Block[] {
  const documents = ['README.md', ...readdirSync(join(root, 'docs')).filter((name) => name.endsWith('.md')).sort().map((name) => `docs/${name}`)]
  const blocks: Block[] = []
  for (const file of documents) {
    const text = readFileSync(join(root, file), 'utf8')
    for (const match of text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)) {
      blocks.push({ file, line: text.slice(0, match.index).split('\n').length, code: match[1] as string })
    }
  }
  return blocks
}

/**
 * The block's code (plus `tail`) as a file of its own directory: an ESM
 * package that sees this project's node_modules, the package resolved to lib/.
 */
export function blockModule (label: string, code: string, tail = ''): string {
  const dir = tempDir(label)
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir')
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  const file = join(dir, `${label}.ts`)
  writeFileSync(file, code.replace(/from 'fastify-redis-rate-limit'/, `from '${pathToFileURL(entry).href}'`) + tail)
  return file
}
