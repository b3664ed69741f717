import { test } from 'tap'
import type { Test } from 'tap'
import { existsSync } from 'node:fs'
import Fastify, { type FastifyInstance } from 'fastify'
import { chromium, type BrowserContext, type Page } from 'playwright-core'
import { request } from 'undici'
import rateLimit from '../../lib/index.js'
import consolePage from '../../lib/console/page/index.js'
import { listeningFleet } from '../helpers/fleet.js'
import { tempDir } from '../helpers/processes.js'

/*
 * The console page end to end in a real browser: Debian's chromium driven by
 * playwright-core (never a browser download: `npm run install:chromium`
 * installs the distribution's package; CI runs it before npm test). A fleet of
 * two instances on one private redis-server, each publishing its picture
 * every second, the console on the first: a refusal on the second shows on
 * the page, a ban made on the page refuses the caller on the second within its
 * 1 s poll, lifting it lets the caller through, the audit trail shows both,
 * and hostile values (markup, control characters, right-to-left marks, 8 KB)
 * render as inert text without breaking the layout. Without chromium the test
 * fails; it never skips.
 */

const CHROMIUM = '/usr/bin/chromium'
const PREFIX = '/ops/limits'
const INTERVAL_MS = 1000
/** The caller the test makes the fleet refuse (by: 'user', so its key is `u=<hash>`). */
const MALLORY = 'mallory'
/** Markup that would set window.__pwned (and open a dialog) if any value reached the DOM as HTML. */
const MARKUP = '<img src=x onerror="window.__pwned=1;alert(1)">'
/** A policy name: printable ASCII, at most 64 characters. */
const HOSTILE_POLICY = '<img src=x onerror=window.__pwned=1>'
const HOSTILE_REASON = `${MARKUP}\u0007\u001b[31m\u202e\u2067reversed\u2069 ${'W'.repeat(100)}`.slice(0, 200)
const HOSTILE_USER = `${MARKUP}\u0000\u200f\u202e${'x'.repeat(8192)}`

/** A fleet instance: the app's routes, its picture every second, the console on the first. */
async function instance (redis: import('ioredis').Redis, prefix: string, i: number): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(rateLimit, {
    redis,
    prefix,
    picture: { interval: INTERVAL_MS, rawIdentities: true },
    user: (req) => req.headers['x-user'] as string | undefined
  })
  app.get('/orders/:id', { config: { rateLimit: { limit: 2, window: '1m', by: 'user', name: 'orders' } } }, async () => 'ok')
  app.get('/hostile', { config: { rateLimit: { limit: 1, window: '1m', by: 'header:x-tag', name: HOSTILE_POLICY } } }, async () => 'ok')
  if (i === 0) {
    await app.register(consolePage, {
      prefix: PREFIX,
      authorize: (req) => req.headers['x-operator'] === 'alice',
      actor: (req) => `op:${req.headers['x-operator'] as string}`
    })
  }
  return app
}

async function status (base: string, path: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await request(base + path, { headers })
  await res.body.dump()
  return res.statusCode
}

/** Polls `check` until it holds: the ms it took, or the test fails at `withinMs`. */
async function within (t: Test, what: string, withinMs: number, check: () => Promise<boolean>): Promise<number> {
  const started = Date.now()
  while (!(await check())) {
    if (Date.now() - started > withinMs) {
      t.fail(`${what}: not within ${withinMs} ms`)
      return Date.now() - started
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const took = Date.now() - started
  t.pass(`${what} (${took} ms)`)
  return took
}

/** Debian's chromium, headless, with a fresh profile and no background networking (docs: node-svc.md). */
async function browser (t: Test): Promise<BrowserContext> {
  const context = await chromium.launchPersistentContext(tempDir('chromium'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    extraHTTPHeaders: { 'x-operator': 'alice' },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage']
  })
  t.teardown(async () => await context.close())
  return context
}

/** What the page did that it must not: dialogs, CSP refusals (markup that tried to run), page errors. */
function watch (page: Page): { dialogs: string[], errors: string[] } {
  const seen = { dialogs: [] as string[], errors: [] as string[] }
  page.on('dialog', (dialog) => { seen.dialogs.push(dialog.message()); dialog.dismiss().catch(() => {}) })
  page.on('pageerror', (error) => { seen.errors.push(error.message) })
  page.on('console', (message) => { if (message.type() === 'error' && !/status of 4\d\d/.test(message.text())) seen.errors.push(message.text()) })
  return seen
}

test('the console in chromium: a refusal shows, a ban on the page refuses the caller on the other instance, lifting it lets it through, the audit trail shows both', async (t) => {
  if (!existsSync(CHROMIUM)) {
    t.fail(`${CHROMIUM} is missing: run \`npm run install:chromium\` (Debian's chromium package; .ci/run does it before npm test)`)
    return
  }
  const fleet = await listeningFleet(t, 'console', 2, instance)
  const [consoleBase, otherBase] = fleet.bases as [string, string]
  const context = await browser(t)
  const page = await context.newPage()
  const seen = watch(page)
  await page.goto(`${consoleBase}${PREFIX}`)
  t.equal(new URL(page.url()).pathname, `${PREFIX}/`, 'the prefix redirects to the page')
  await page.waitForSelector('#instances tbody tr td:not(.empty)')
  await within(t, 'both instances show on the page', 3 * INTERVAL_MS, async () => await page.locator('#instances tbody tr').count() === 2)
  t.match(await page.locator('#actor').textContent(), 'op:alice', 'the page names the actor the app gives')
  await within(t, 'the console\'s own routes, declared on one instance of two, show as a disagreement', 2000, async () =>
    await page.locator('#disagreement-list li', { hasText: `GET ${PREFIX}/api/state` }).filter({ hasText: 'not declared on 1 instance' }).count() === 1)

  // Refusals on the other instance: mallory spends the orders limit and is refused.
  const refused: number[] = []
  for (let i = 0; i < 5; i++) refused.push(await status(otherBase, '/orders/1', { 'x-user': MALLORY }))
  t.same(refused, [200, 200, 429, 429, 429], 'the other instance refuses mallory')
  const shown = await within(t, 'the refusal shows on the page within two intervals and a refresh', 2 * INTERVAL_MS + 1000 + 500, async () =>
    await page.locator('#top-table tbody tr.caller', { hasText: 'GET /orders/:id' }).count() > 0)
  t.ok(shown <= 3500, `shown ${shown} ms after the refusals`)
  const routeRow = page.locator('#route-table tbody tr', { hasText: 'orders' })
  await within(t, 'the route\'s row counts the refusals', 2 * INTERVAL_MS + 1000, async () => {
    const cells = await routeRow.first().locator('td').allTextContents()
    return Number(cells[4]) > 0
  })
  t.equal(await routeRow.first().locator('svg.spark polyline').count(), 3, 'a sparkline of admitted, refused and degraded')

  // Ban the top caller from the page: the form is filled from the top list; the reason is typed.
  const caller = page.locator('#top-table tbody tr.caller', { hasText: 'GET /orders/:id' }).first()
  const hash = await caller.locator('button').getAttribute('data-hash')
  t.match(hash, /^[A-Za-z0-9_-]+$/, 'the top caller is shown by its key hash')
  t.match(await caller.textContent(), 'u=', 'and, with rawIdentities, by its key\'s identity part (a user is still hashed)')
  await caller.locator('button').click()
  const form = page.locator('#ban-form')
  t.equal(await form.locator('[name=kind]').inputValue(), 'keyHash', 'the ban form names the caller by key hash')
  t.equal(await form.locator('[name=target]').inputValue(), 'GET /orders/:id', 'on the route it was refused on')
  await form.locator('[name=reason]').fill('INC-7 scraping orders')
  await form.locator('button[type=submit]').click()
  await page.waitForSelector('#notice:not([hidden])')
  t.match(await page.locator('#notice').textContent(), 'Banned:', 'the page says the ban is made')
  await within(t, 'the other instance refuses the banned caller (403) within its 1 s poll', 1000 + 1000, async () =>
    await status(otherBase, '/orders/1', { 'x-user': MALLORY }) === 403)
  t.equal(await status(otherBase, '/orders/1', { 'x-user': 'bob' }), 200, 'another caller from the same address is not banned (the ban names mallory\'s key)')
  await within(t, 'the ban is listed on the page', 2000, async () => await page.locator('#ban-table tbody tr', { hasText: 'INC-7 scraping orders' }).count() === 1)

  // Lift it from the page.
  await page.locator('#lift-reason').fill('INC-7 resolved')
  await page.locator('#ban-table tbody tr', { hasText: 'INC-7 scraping orders' }).locator('button').click()
  await within(t, 'the ban is lifted: mallory is back to her limit (429, not 403)', 1000 + 1000, async () =>
    await status(otherBase, '/orders/1', { 'x-user': MALLORY }) === 429)
  await within(t, 'the audit trail shows the ban and its lifting, by whom and why', 2000, async () => {
    const rows = await page.locator('#audit-table tbody tr').allTextContents()
    return rows.some((row) => row.includes('set ban') && row.includes('op:alice') && row.includes('INC-7 scraping orders')) &&
      rows.some((row) => row.includes('clear ban') && row.includes('op:alice') && row.includes('INC-7 resolved'))
  })
  // An override with a value typed but "every caller" left selected is refused on the page, not set for everyone.
  const overrides = await (fleet.apps[0] as FastifyInstance).rateLimit.listOverrides()
  const overrideForm = page.locator('#override-form')
  await overrideForm.locator('[name=target]').fill('GET /orders/:id')
  await overrideForm.locator('[name=value]').fill('just-bob')
  await overrideForm.locator('[name=limit]').fill('1000')
  await overrideForm.locator('[name=reason]').fill('raise for bob')
  await overrideForm.locator('button[type=submit]').click()
  await within(t, 'the page says the form names no caller kind', 2000, async () => /every caller/.test(await page.locator('#notice').textContent() ?? ''))
  t.same(await (fleet.apps[0] as FastifyInstance).rateLimit.listOverrides(), overrides, 'and no override was set')
  // One read loop whatever the changes: reads of the state over 3 s at a 1 s refresh.
  let reads = 0
  page.on('request', (request) => { if (request.url().endsWith('/api/state')) reads++ })
  for (let i = 0; i < 3; i++) await overrideForm.locator('button[type=submit]').click()
  await page.waitForTimeout(3000)
  t.ok(reads <= 3 + 3 + 1, `one loop: ${reads} reads in 3 s after 3 changes (refresh 1 s)`)
  t.same(seen, { dialogs: [], errors: [] }, 'no dialog, no script error')
})

test('hostile values render inert: markup, control characters, right-to-left marks and 8 KB values', async (t) => {
  if (!existsSync(CHROMIUM)) {
    t.fail(`${CHROMIUM} is missing: run \`npm run install:chromium\``)
    return
  }
  const fleet = await listeningFleet(t, 'hostile', 2, instance)
  const [consoleBase, otherBase] = fleet.bases as [string, string]
  const api = (fleet.apps[0] as FastifyInstance).rateLimit
  // Values an attacker controls: a user name, a header the limit is keyed by (hashed in the key), and
  // what an operator's tooling may pass along (a reason, an actor).
  await api.ban({ identity: { user: HOSTILE_USER }, ttl: 600_000, actor: `${MARKUP}\u202e`.slice(0, 200), reason: HOSTILE_REASON })
  await api.setOverride({ target: 'orders', identity: { user: HOSTILE_USER }, limit: 5, ttl: 600_000, actor: 'op', reason: HOSTILE_REASON })
  for (let i = 0; i < 3; i++) await status(otherBase, '/hostile', { 'x-tag': MARKUP })

  const context = await browser(t)
  const page = await context.newPage()
  const seen = watch(page)
  await page.goto(`${consoleBase}${PREFIX}/`)
  await within(t, 'the hostile ban, override and refused caller show', 3 * INTERVAL_MS + 2000, async () =>
    await page.locator('#ban-table tbody tr:not(:has(.empty))').count() === 1 &&
    await page.locator('#override-table tbody tr:not(:has(.empty))').count() === 1 &&
    await page.locator('#top-table tbody tr.caller', { hasText: 'GET /hostile' }).count() === 1)
  await page.waitForTimeout(300)

  t.equal(await page.evaluate('window.__pwned'), undefined, 'no markup ran (window.__pwned unset)')
  t.equal(await page.locator('main img, main script, main iframe').count(), 0, 'no element came from a value')
  const text = await page.locator('main').textContent() ?? ''
  t.match(text, '<img src=x onerror=', 'the markup shows as text')
  t.match(text, '\\u{202e}', 'a right-to-left override shows as its code')
  t.match(text, '\\u{0007}', 'a control character shows as its code')
  t.notMatch(text, /[\u0000-\u0008\u202e\u200f]/, 'none reaches the page as itself') // eslint-disable-line no-control-regex
  t.match(await page.locator('#route-table').textContent(), HOSTILE_POLICY, 'a hostile policy name shows as text')
  t.notMatch(await page.locator('#top-table').textContent(), '<img', 'a caller keyed by a hostile header shows hashed, even with rawIdentities')

  // Run in the page (a string: this project compiles without the DOM's types).
  const layout = await page.evaluate(`({
    viewport: document.documentElement.clientWidth,
    page: document.documentElement.scrollWidth,
    tables: [...document.querySelectorAll('table')].map((table) => table.getBoundingClientRect().right),
    tallest: Math.max(...[...document.querySelectorAll('td')].map((cell) => cell.getBoundingClientRect().height))
  })`) as { viewport: number, page: number, tables: number[], tallest: number }
  t.ok(layout.page <= layout.viewport, `the page is no wider than the viewport (${layout.page} ≤ ${layout.viewport})`)
  for (const right of layout.tables) t.ok(right <= layout.viewport, `a table ends within the viewport (${Math.round(right)})`)
  t.ok(layout.tallest < 200, `an 8 KB value scrolls inside its cell (tallest cell ${Math.round(layout.tallest)} px)`)
  t.same(seen, { dialogs: [], errors: [] }, 'no dialog, no script error, no CSP refusal')
})
