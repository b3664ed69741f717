import { test } from 'tap'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { anchors, documents, prose, read, root } from '../helpers/doc-blocks.js'

const pages = documents().filter((file) => file.startsWith('docs/'))

test('every relative link of the documents reaches a file, and a heading in it', async (t) => {
  let checked = 0
  for (const file of documents()) {
    for (const [, target] of prose(read(file)).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target as string)) continue // https:, mailto:
      const [path, anchor] = (target as string).split('#') as [string, string | undefined]
      const resolved = path === '' ? file : relative(root, join(root, dirname(file), path))
      t.ok(existsSync(join(root, resolved)), `${file}: ${target as string} exists`)
      if (anchor !== undefined && resolved.endsWith('.md') && existsSync(join(root, resolved))) {
        t.ok(anchors(read(resolved)).has(anchor), `${file}: ${target as string} names a heading of ${resolved}`)
      }
      checked++
    }
  }
  t.ok(checked >= 50, `${checked} links`)
})

test('docs/performance.md is the present state: at most 400 lines, no round-by-round headings', async (t) => {
  const text = read('docs/performance.md')
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0)
  t.ok(lines <= 400, `${lines} lines (the history belongs in benchmarks/results/HISTORY.md)`)
  const headings = [...prose(text).matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => heading as string)
  t.ok(headings.length >= 5, `${headings.length} headings`)
  for (const heading of headings) t.notMatch(heading, /\bRound |\bround \d/, `"${heading}" names no round`)
})

test('the README indexes every docs/ page, and CONTRIBUTING.md', async (t) => {
  const readme = read('README.md')
  for (const page of pages) t.match(readme, `](${page})`, `${page} is in the index`)
  t.match(readme, '](CONTRIBUTING.md)')
})

/** `name: ['a', 'b']` rows of one table in test/internals/layers.test.ts. */
function rulesOf (name: string): Map<string, string[]> {
  const source = read('test/internals/layers.test.ts')
  const body = new RegExp(`const ${name}\\b[^=]*= \\{\\n([\\s\\S]*?)\\n\\}`).exec(source)?.[1]
  if (body === undefined) throw new Error(`no ${name} table in layers.test.ts`)
  const rows = [...body.matchAll(/^\s*(\w+): \[([^\]]*)\]/gm)]
  return new Map(rows.map(([, tier, list]) => [tier as string, (list as string).split(',').map((item) => item.trim().replace(/'/g, '')).filter(Boolean)]))
}

test('CONTRIBUTING.md states the import rules exactly as layers.test.ts enforces them', async (t) => {
  const allowed = rulesOf('ALLOWED')
  const typesAlso = rulesOf('TYPES_ALSO')
  t.ok(allowed.size >= 10, `${allowed.size} tiers`)
  const section = read('CONTRIBUTING.md').split('### Import rules')[1]?.split('\n### ')[0] ?? ''
  const list = (cell: string): string[] => cell.trim() === '—' ? [] : cell.split(',').map((item) => item.trim().replace(/`/g, ''))
  const documented = new Map<string, [string[], string[]]>()
  for (const [, tier, values, types] of section.matchAll(/^\| `(\w+)` \| ([^|]*) \| ([^|]*) \|$/gm)) {
    documented.set(tier as string, [list(values as string), list(types as string)])
  }
  t.same([...documented.keys()].sort(), [...allowed.keys()].sort(), 'one row per tier')
  for (const [tier, values] of allowed) {
    t.same(documented.get(tier)?.[0], values, `${tier}: values`)
    t.same(documented.get(tier)?.[1], typesAlso.get(tier) ?? [], `${tier}: types only`)
  }
})

test('CONTRIBUTING.md names every folder of lib/', async (t) => {
  const contributing = read('CONTRIBUTING.md')
  const folders = readdirSync(join(root, 'lib')).filter((name) => statSync(join(root, 'lib', name)).isDirectory())
  t.ok(folders.length >= 5, folders.join(', '))
  for (const folder of folders) t.match(contributing, `| \`lib/${folder}/\` |`, `lib/${folder}/ has a row`)
})

test("CONTRIBUTING.md's request lifecycle names functions that exist in the files it names", async (t) => {
  const text = read('CONTRIBUTING.md')
  const section = text.split('### Request lifecycle')[1]?.split('```')[1] ?? ''
  let frames = 0
  for (const line of section.split('\n')) {
    // `names (prose) .... files`; a file without a folder is in the folder of the one before it
    const match = /^[\s│├└─]*(.+?)\s*(?:\.{2,}\s*)?((?:[a-z-]+\/)+[\w.-]+\.ts(?:, [\w/.-]+\.ts)*)$/.exec(line)
    if (match === null) continue
    let folder = ''
    const sources = (match[2] as string).split(', ').map((path) => {
      if (path.includes('/')) folder = path.slice(0, path.lastIndexOf('/') + 1)
      return read(`lib/${path.includes('/') ? path : folder + path}`)
    })
    const names = (match[1] as string).replace(/\(.*?\)/g, '').split('─').map((name) => name.trim()).filter(Boolean)
    for (const name of names) {
      const own = (name.split('.').pop() as string).replace(/^#/, '')
      t.ok(sources.some((source) => new RegExp(`\\b${own}\\b`).test(source)), `${name} is in ${match[2] as string}`)
      frames++
    }
  }
  t.ok(frames >= 25, `${frames} frames checked`)
})

test("CONTRIBUTING.md's block-kind table: every member is in the contract, asked where the table says, and each file named asks one", async (t) => {
  const contract = read('lib/kinds/contract.ts')
  const section = read('CONTRIBUTING.md').split('### Block kinds')[1]?.split('\n### ')[0] ?? ''
  let rows = 0
  for (const [, members, files] of section.matchAll(/^\| [^|]+ \| ([^|]+) \| ([^|]+) \|$/gm)) {
    const names = [...(members as string).matchAll(/`(\w+)`/g)].map((match) => match[1] as string)
    const paths = [...(files as string).matchAll(/`([\w/.-]+\.ts)`/g)].map((match) => match[1] as string)
    if (names.length === 0 || paths.length === 0) continue
    rows++
    for (const name of names) {
      // SHAPES is the compiler's table (kinds/policy.ts); the rest are BlockKind's members
      const home = name === 'SHAPES' ? read('lib/kinds/policy.ts') : contract
      t.match(home, new RegExp(`\\b${name}\\b`), `${name} is declared`)
      const askers = name === 'SHAPES' ? ['readShape'] : [name]
      t.ok(paths.some((path) => askers.some((word) => new RegExp(`\\b${word}\\b`).test(read(`lib/${path}`)))), `${name} is asked in ${paths.join(', ')}`)
    }
    const words = names.map((name) => name === 'SHAPES' ? 'readShape' : name)
    for (const path of paths) t.ok(words.some((word) => new RegExp(`\\b${word}\\b`).test(read(`lib/${path}`))), `lib/${path} asks ${words.join(' or ')}`)
  }
  t.ok(rows >= 8, `${rows} rows`)
})
