import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { renderDoc, sessionFiles } from '../../example/sessions.js'
import { spawnOwned } from '../helpers/processes.js'

const root = fileURLToPath(new URL('../..', import.meta.url))

// Every console session in the docs is a real run (example/sessions.ts): regenerated here, it must
// come out byte for byte as committed. On a difference, run `npm run docs:sessions` and review the diff.
test('every console session in README.md and docs/*.md is what a fresh demo answers now', async (t) => {
  const withSessions = sessionFiles().filter((file) => readFileSync(file, 'utf8').includes('<!-- session -->'))
  t.ok(withSessions.length >= 2, `${withSessions.length} documents with sessions`)
  for (const file of withSessions) {
    const text = readFileSync(file, 'utf8')
    // Rendered from a tampered copy, so the test also sees that the output is rewritten, not kept.
    const tampered = text.replace(/^(ratelimit: "orders";r=)\d+/m, '$10')
    t.equal(await renderDoc(tampered, spawnOwned), text, `${relative(root, file)}: the sessions match a fresh run (npm run docs:sessions rewrites them)`)
  }
})

test('the demo session shows what the demo declares', async (t) => {
  const demo = readFileSync(new URL('../../docs/demo.md', import.meta.url), 'utf8')
  // The token bucket's burst of 20 refills at 10/s: 2 s to fill (issue 16: the session once said q=10;w=1).
  t.match(demo, /ratelimit-policy: "search";q=20;w=2/)
  t.match(demo, /ratelimit-policy: "orders";q=100;w=60/)
})
