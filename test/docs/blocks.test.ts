/**
 * Every ```ts and ```js block of README.md, CONTRIBUTING.md and docs/*.md is
 * a complete program (run by blocks-run.test.ts, type- or syntax-checked by
 * readme-code.test.ts) or an excerpt whose first line names a complete one:
 * `// Excerpt: the complete program is <target>`, the target a file the
 * tests type-check or run (under lib/, test/, example/ or benchmarks/), or
 * `page.md#anchor` whose section holds a complete block. A relative target
 * resolves from the document's folder, else from the repository's root.
 */
import { test } from 'tap'
import { existsSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { anchors, codeBlocks, EXCERPT, read, root, section, type Block } from '../helpers/doc-blocks.js'

const blocks = codeBlocks()
/** What `npm run typecheck` covers (tsconfig.json's include), so a file there is checked code. */
const CHECKED_FOLDERS = ['lib/', 'test/', 'example/', 'benchmarks/']

/** The repository path a target names, or undefined when neither reading of it exists. */
function resolveTarget (block: Block, path: string): string | undefined {
  const candidates = [relative(root, join(root, dirname(block.file), path)), path]
  return candidates.find((candidate) => !candidate.startsWith('..') && existsSync(join(root, candidate)))
}

/** Why an excerpt's target is not a complete program, or undefined when it is one. */
function targetProblem (block: Block, target: string, all: Block[] = blocks): string | undefined {
  const [path, anchor] = target.split('#') as [string, string | undefined]
  const resolved = path === '' ? block.file : resolveTarget(block, path)
  if (resolved === undefined) return `${path} is no file of the repository`
  if (anchor === undefined) {
    if (resolved.endsWith('.md')) return all.some((other) => other.file === resolved && other.excerptOf === undefined) ? undefined : `${resolved} holds no complete block`
    return CHECKED_FOLDERS.some((folder) => resolved.startsWith(folder)) && /\.(ts|js|mjs|cjs)$/.test(resolved) ? undefined : `${resolved} is not code the tests check (${CHECKED_FOLDERS.join(', ')})`
  }
  if (!resolved.endsWith('.md') || !anchors(read(resolved)).has(anchor)) return `${resolved} has no heading #${anchor}`
  const text = section(read(resolved), anchor) as string
  const complete = all.some((other) => other.file === resolved && other.excerptOf === undefined && text.includes(other.code))
  return complete ? undefined : `the section ${resolved}#${anchor} holds no complete block`
}

test('every block is a complete program or an excerpt that names one', async (t) => {
  t.ok(blocks.length >= 25, `${blocks.length} blocks`)
  t.ok(blocks.some((block) => block.lang === 'js'), 'some are JavaScript')
  for (const block of blocks) {
    const where = `${block.file} block at line ${block.line}`
    if (block.excerptOf === undefined) {
      // A complete program imports what it uses: an excerpt without the marker fails blocks-run.test.ts.
      t.notMatch(block.code, /^\/\/ *excerpt/im, `${where}: a marker is exactly "${EXCERPT}<target>" on the first line`)
      continue
    }
    t.equal(targetProblem(block, block.excerptOf), undefined, `${where}: an excerpt of ${block.excerptOf}`)
  }
})

test('the target check refuses what it must', async (t) => {
  const fake = (excerptOf: string, file = 'docs/routes.md'): Block => ({ file, line: 1, lang: 'ts', code: '', excerptOf })
  t.match(targetProblem(fake('docs/nothing.md'), 'docs/nothing.md'), /no file/)
  t.match(targetProblem(fake('../README.md#no-such-heading'), '../README.md#no-such-heading'), /no heading/)
  t.match(targetProblem(fake('README.md#why-a-fleet-wide-limiter'), 'README.md#why-a-fleet-wide-limiter'), /holds no complete block/, 'a section of prose only')
  t.match(targetProblem(fake('LICENSE'), 'LICENSE'), /not code the tests check/)
  t.equal(targetProblem(fake('../example/server.ts'), '../example/server.ts'), undefined, 'relative to the document')
  t.equal(targetProblem(fake('example/server.ts'), 'example/server.ts'), undefined, 'relative to the root')
  t.equal(targetProblem(fake('../README.md#quick-start'), '../README.md#quick-start'), undefined, 'the Quick Start is complete')
})
