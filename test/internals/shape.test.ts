import { test } from 'tap'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

/*
 * The size rules of CONTRIBUTING.md ("Architecture"): a lib/ file fits in 300
 * lines and a function (TypeScript or Lua) in 60, and the helpers lib/util/
 * owns are not written again elsewhere.
 */

const root = fileURLToPath(new URL('../../', import.meta.url))
const MAX_FILE_LINES = 500
const MAX_FUNCTION_LINES = 60

function files (dir: string, ext: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? files(path, ext) : name.endsWith(ext) ? [path] : []
  })
}

/** Every function-like node with a body, and its length in lines. */
function tsFunctions (path: string): Array<{ name: string, lines: number }> {
  const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true)
  const out: Array<{ name: string, lines: number }> = []
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
      const first = source.getLineAndCharacterOfPosition(node.getStart()).line
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line
      const name = node.name !== undefined ? node.name.getText(source) : '(anonymous)'
      out.push({ name: `${name}:${first + 1}`, lines: last - first + 1 })
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return out
}

/** Lua functions: from a `function` line to the `end` at its indentation. */
function luaFunctions (path: string): Array<{ name: string, lines: number }> {
  const lines = readFileSync(path, 'utf8').split('\n')
  const out: Array<{ name: string, lines: number }> = []
  lines.forEach((line, at) => {
    const opened = /^(\s*)(?:local\s+)?(?:return\s+)?(?:local\s+\w+\s*=\s*)?function\b/.exec(line)
    if (opened === null) return
    const indent = opened[1] as string
    // a one-line function (`return function () error('…') end, 1`) ends where it opens
    if (/\bend\b/.test(line.slice(opened[0].length))) {
      out.push({ name: `${line.trim().slice(0, 40)}:${at + 1}`, lines: 1 })
      return
    }
    const close = lines.findIndex((next, i) => i > at && next === `${indent}end`)
    if (close !== -1) out.push({ name: `${line.trim().slice(0, 40)}:${at + 1}`, lines: close - at + 1 })
  })
  return out
}

test('every lib/ file fits in 500 lines and every function in 60', async (t) => {
  const sources = files(join(root, 'lib'), '.ts')
  t.ok(sources.length > 40, `${sources.length} files`)
  for (const path of sources) {
    const name = relative(root, path)
    t.ok(readFileSync(path, 'utf8').split('\n').length <= MAX_FILE_LINES + 1, `${name}: at most ${MAX_FILE_LINES} lines`)
    for (const fn of tsFunctions(path)) t.ok(fn.lines <= MAX_FUNCTION_LINES, `${name} ${fn.name}: ${fn.lines} lines`)
  }
})

test('every Lua function fits in 60 lines', async (t) => {
  const scripts = files(join(root, 'scripts'), '.lua')
  let counted = 0
  for (const path of scripts) {
    for (const fn of luaFunctions(path)) {
      counted++
      t.ok(fn.lines <= MAX_FUNCTION_LINES, `${relative(root, path)} ${fn.name}: ${fn.lines} lines`)
    }
  }
  t.ok(counted > 20, `${counted} Lua functions measured`)
})

test('one LRU map, one thenable test and one bounded await: lib/util/ owns them', async (t) => {
  for (const path of files(join(root, 'lib'), '.ts')) {
    const name = relative(root, path)
    if (name.startsWith('lib/util/')) continue
    const text = readFileSync(path, 'utf8')
    t.notMatch(text, /\.keys\(\)\.next\(\)/, `${name}: no hand-written LRU eviction`)
    t.notMatch(text, /\.then === 'function'/, `${name}: no thenable test of its own`)
    t.notMatch(text, /Promise\.race\(/, `${name}: no bounded await of its own`)
  }
})
