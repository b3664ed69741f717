import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { CLI_DOC, cliReference } from '../../scripts/docs/cli-reference.js'
import { COMMANDS, commandHelp, toolHelp } from '../../lib/console/cli/usage.js'
import { escapeText, table } from '../../lib/console/cli/render.js'

test('docs/cli.md is what `npm run docs:cli` writes from the tool\'s own --help', async (t) => {
  t.equal(readFileSync(CLI_DOC, 'utf8'), cliReference(), 'docs/cli.md is fresh (run npm run docs:cli)')
  const page = cliReference()
  t.ok(page.includes(toolHelp()), 'the tool\'s help')
  for (const command of COMMANDS) t.ok(page.includes(commandHelp(command)), `${command.name}'s help`)
})

test('escapeText: control, DEL, C1 and bidi characters become visible escapes; long values are cut', async (t) => {
  t.equal(escapeText('<img src=x onerror=alert(1)>'), '<img src=x onerror=alert(1)>', 'HTML is text in a terminal')
  t.equal(escapeText('a\u0000b\u001b[2Jc\u007fd\u0085e\\'), 'a\\x00b\\x1b[2Jc\\x7fd\\x85e\\\\')
  t.equal(escapeText('\u200e\u200f\u202a\u202e\u2066\u2069'), '\\u200e\\u200f\\u202a\\u202e\\u2066\\u2069')
  const cut = escapeText('y'.repeat(8193))
  t.equal(cut.length, 8192)
  t.ok(cut.endsWith('…'))
  t.equal(escapeText('z'.repeat(8192)), 'z'.repeat(8192), '8 KB fits')
  t.equal(table(['A', 'B'], [['\u202eevil', 1]]), 'A           B\n\\u202eevil  1', 'cells are escaped before they are padded')
})
