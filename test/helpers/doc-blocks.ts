/**
 * The documents' ```ts and ```js blocks as code: each with its file, line and
 * kind, and a module made of one, to run as copied (test/docs/readme-code.test.ts,
 * test/docs/blocks.test.ts, test/docs/blocks-run.test.ts,
 * test/docs/startup-wiring.test.ts).
 *
 * The convention (CONTRIBUTING.md, "Documentation"): a block is a complete
 * program, or its first line is `// Excerpt: the complete program is <target>`,
 * the target a file of this repository or `page.md#anchor` of a section that
 * holds a complete block.
 */
import { readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { awaitWithin } from '../../lib/util/await-within.js'
import { tempDir } from './processes.js'

export const root = fileURLToPath(new URL('../..', import.meta.url))
/** What `fastify-redis-rate-limit` resolves to in a block: this tree's lib/. */
export const entry = join(root, 'lib', 'index.ts')

export const EXCERPT = '// Excerpt: the complete program is '

export interface Block {
  file: string
  line: number
  lang: 'ts' | 'js'
  code: string
  /** The excerpt's target as written, or undefined for a complete program. */
  excerptOf: string | undefined
}

/** README.md first (its first block is the Quick Start), then CONTRIBUTING.md, then docs/*.md by name. */
export function documents (): string[] {
  return ['README.md', 'CONTRIBUTING.md', ...readdirSync(join(root, 'docs')).filter((name) => name.endsWith('.md')).sort().map((name) => `docs/${name}`)]
}

export const read = (file: string): string => readFileSync(join(root, file), 'utf8')

/** Every ```ts and ```js block of the documents, in document order. */
export function codeBlocks (): Block[] {
  const blocks: Block[] = []
  for (const file of documents()) {
    const text = read(file)
    for (const match of text.matchAll(/^```(ts|js)\n([\s\S]*?)^```$/gm)) {
      const code = match[2] as string
      const first = code.split('\n', 1)[0] as string
      blocks.push({
        file,
        line: text.slice(0, match.index).split('\n').length,
        lang: match[1] as 'ts' | 'js',
        code,
        excerptOf: first.startsWith(EXCERPT) ? first.slice(EXCERPT.length).trim() : undefined
      })
    }
  }
  return blocks
}

/** Every ```ts block (test/docs/startup-wiring.test.ts picks its snippets among them). */
export function tsBlocks (): Block[] {
  return codeBlocks().filter((block) => block.lang === 'ts')
}

/** A complete program in CommonJS: `require()`, no `import` statement. */
export const isCommonJs = (block: Block): boolean => block.lang === 'js' && /\brequire\(/.test(block.code) && !/^import /m.test(block.code)

/** The file name a block is checked and run as. */
export const extensionOf = (block: Block): string => block.lang === 'ts' ? 'ts' : isCommonJs(block) ? 'cjs' : 'mjs'

/** Text outside fenced code blocks: headings and links in code are not the document's. */
export const prose = (text: string): string => text.replace(/^```[\s\S]*?^```$/gm, '')

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export const anchorOf = (heading: string): string =>
  heading.trim().toLowerCase().replace(/`/g, '').replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-')

/** The anchors of a document's headings. */
export function anchors (text: string): Set<string> {
  return new Set([...prose(text).matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => anchorOf(heading as string)))
}

/**
 * The text of the section under the heading with this anchor, up to the next
 * heading of the same or a higher level (its subsections included), or undefined.
 */
export function section (text: string, anchor: string): string | undefined {
  const lines = text.split('\n')
  let level = 0
  let start = -1
  let fenced = false
  for (const [index, line] of lines.entries()) {
    if (line.startsWith('```')) fenced = !fenced
    const heading = fenced ? null : /^(#{1,6}) (.+)$/.exec(line)
    if (heading === null) continue
    const depth = (heading[1] as string).length
    if (start >= 0 && depth <= level) return lines.slice(start, index).join('\n')
    if (start < 0 && anchorOf(heading[2] as string) === anchor) [start, level] = [index, depth]
  }
  return start < 0 ? undefined : lines.slice(start).join('\n')
}

/**
 * The block's code (plus `tail`) as a file of its own directory: an ESM
 * package that sees this project's node_modules, the package (imported or
 * required) resolved to lib/.
 */
export function blockModule (label: string, code: string, tail = '', extension = 'ts'): string {
  const dir = tempDir(label)
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir')
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  const file = join(dir, `${label}.${extension}`)
  const source = code
    .replace(/from 'fastify-redis-rate-limit'/, `from '${pathToFileURL(entry).href}'`)
    .replace(/require\('fastify-redis-rate-limit'\)/, `require(${JSON.stringify(entry)})`)
  writeFileSync(file, source + tail)
  return file
}

/** The value, or the outcome's error thrown: a wait that overruns `ms` fails the test instead of hanging it. */
export async function within<T> (value: PromiseLike<T>, ms: number, what: string): Promise<T> {
  const outcome = await awaitWithin(value, ms, what)
  if (!outcome.ok) throw outcome.error
  return outcome.value as T
}
