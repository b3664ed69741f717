import { test } from 'tap'
import { readdirSync, readFileSync } from 'node:fs'

/*
 * The README's module map is the contract for where code goes: every lib/
 * module is on it, and a module imports only from modules listed after it.
 * An upward import (the decision core reaching for presentation, a store for
 * the policy compiler) fails here instead of eroding the layering quietly.
 */

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')
const libDir = new URL('../lib/', import.meta.url)

function mapOrder (): string[] {
  const section = readme.slice(readme.indexOf('### Module map'))
  const block = /```\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  const order: string[] = []
  for (const name of block.match(/[\w-]+\.ts/g) ?? []) if (!order.includes(name)) order.push(name)
  return order
}

test('every lib module is on the README module map, and none imports upward', async (t) => {
  const order = mapOrder()
  const modules = readdirSync(libDir).filter((name) => name.endsWith('.ts'))
  t.ok(modules.length >= 20, `${modules.length} modules in lib/`)
  for (const name of modules) t.ok(order.includes(name), `${name} is on the map`)
  for (const name of order) t.ok(modules.includes(name), `${name} on the map exists in lib/`)
  for (const name of modules) {
    const source = readFileSync(new URL(name, libDir), 'utf8')
    for (const [, imported] of source.matchAll(/from '\.\/([\w-]+)\.js'/g)) {
      const target = `${imported as string}.ts`
      t.ok(order.indexOf(target) > order.indexOf(name), `${name} imports ${target}, listed below it`)
    }
  }
})
