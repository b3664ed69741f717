import { parseInvocation } from './args.js'
import { audit, banAdd, banRemove, bans, overrideClear, overrides, overrideSet, peek, reset } from './changes.js'
import { oneLine } from './connect.js'
import { CliError, EXIT, type ExitCode } from './exit.js'
import { escapeText } from './render.js'
import { Session, type Io } from './session.js'
import { commandHelp, toolHelp } from './usage.js'
import { policies, status, top, watch } from './views.js'

/*
 * `npx fastify-redis-rate-limit <command>`: the command line to a command,
 * run on one session (a connection and the plugin apps on it), its errors to
 * one line on stderr and an exit code (docs/cli.md). Never a stack trace.
 */

type Command = (session: Session, operands: string[]) => Promise<ExitCode>

const RUN: Record<string, Command> = {
  status,
  watch,
  top,
  policies,
  bans,
  'bans add': banAdd,
  'bans remove': banRemove,
  overrides,
  'overrides set': overrideSet,
  'overrides clear': overrideClear,
  peek,
  reset,
  audit
}

export async function runCli (argv: readonly string[], io: Io): Promise<ExitCode> {
  let session: Session | undefined
  try {
    const invocation = parseInvocation(argv)
    if (invocation.spec === undefined) {
      if (argv.length === 0) {
        io.err(toolHelp())
        return EXIT.usage
      }
      io.out(toolHelp())
      return EXIT.ok
    }
    if (invocation.help) {
      io.out(commandHelp(invocation.spec))
      return EXIT.ok
    }
    const command = RUN[invocation.spec.name] as Command
    session = new Session(invocation.values, io)
    return await command(session, invocation.operands)
  } catch (error) {
    const known = error instanceof CliError
    io.err(`${'fastify-redis-rate-limit'}: ${escapeText(known ? error.message : oneLine(error), 2000)}`)
    return known ? error.exitCode : EXIT.failure
  } finally {
    await session?.close()
  }
}
