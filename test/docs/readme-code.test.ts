/**
 * The documents' code is code, not prose: every complete ```ts block of
 * README.md, CONTRIBUTING.md and docs/*.md is type-checked under this
 * project's strict settings, every ```js block and every excerpt is parsed
 * (syntax only: an excerpt's names are its complete program's), and the
 * README's Quick Start runs as copied against a private redis-server.
 *
 * The blocks are checked as the modules of one project that followed the
 * Quick Start (its `declare module 'fastify'` merge applies to all of them,
 * as it would in an app that declares it once); each block is its own module,
 * so it must import and define everything it uses. `fastify-redis-rate-limit`
 * resolves to this tree's lib/.
 */
import { test } from 'tap'
import { join } from 'node:path'
import ts from 'typescript'
import { codeBlocks, entry, extensionOf, root, type Block } from '../helpers/doc-blocks.js'

const blocks = codeBlocks()

/** A diagnostic as `line N: TSxxxx message`, N the line in the document. */
function describe (block: Block, d: ts.Diagnostic): string {
  const at = d.start === undefined || d.file === undefined ? '' : `line ${block.line + d.file.getLineAndCharacterOfPosition(d.start).line + 1}: `
  return `${at}TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`
}

test('every complete ```ts block type-checks under strict; every ```js block and excerpt parses', async (t) => {
  t.ok(blocks.length >= 25, `${blocks.length} blocks`)
  t.ok(blocks.some((block) => block.lang === 'js') && blocks.some((block) => block.excerptOf !== undefined), 'JavaScript and excerpts among them')
  t.ok(new Set(blocks.map((block) => block.file)).size >= 5, 'from the README and the docs pages')
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile)
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, root)
  Object.assign(options, { noEmit: true, paths: { 'fastify-redis-rate-limit': [entry] } })
  t.equal(options.strict, true)
  const name = (block: Block): string => join(root, `${block.file.replace('/', '-')}-line-${block.line}.${extensionOf(block)}`)
  // Parsed alone, as the module kind its file name says: a ```js block (JavaScript, so that TypeScript
  // syntax in it is an error) or an excerpt (whose names are its complete program's).
  for (const block of blocks.filter((block) => block.lang === 'js' || block.excerptOf !== undefined)) {
    const { diagnostics = [] } = ts.transpileModule(block.code, { fileName: name(block), reportDiagnostics: true, compilerOptions: { ...options, allowJs: true } })
    t.same(diagnostics.map((d) => describe(block, d)), [], `${block.file} block at line ${block.line} parses`)
  }
  // The complete ```ts blocks: one program (virtual files next to the project's own, so packages resolve from its node_modules).
  const files = new Map(blocks.filter((block) => block.lang === 'ts' && block.excerptOf === undefined).map((block) => [name(block), block]))
  const host = ts.createCompilerHost(options)
  const { fileExists, readFile } = host
  host.fileExists = (file) => files.has(file) || fileExists(file)
  host.readFile = (file) => files.get(file)?.code ?? readFile(file)
  const program = ts.createProgram([...files.keys()], options, host)
  for (const [file, block] of files) {
    const source = program.getSourceFile(file)
    const diagnostics = [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)]
    t.same(diagnostics.map((d) => describe(block, d)), [], `${block.file} block at line ${block.line} compiles`)
  }
})
