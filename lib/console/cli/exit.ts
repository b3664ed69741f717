/*
 * The CLI's exit codes (docs/cli.md) and its one error type: a one-line
 * reason and the code to exit with. Nothing the CLI prints for an error is a
 * stack trace.
 */

export const EXIT = {
  /** Done; for `status` and `watch`: every instance's breakers closed. */
  ok: 0,
  /** Redis failed or could not be reached, no client is installed, or a change was refused (no such ban or override). */
  failure: 1,
  /** Usage or input: an unknown command, option or route, a malformed identity, a ttl out of range, a missing hashSecret. */
  usage: 2,
  /** The fleet is not healthy: no live instance publishes its picture, or a node's breaker is open or probing. */
  unhealthy: 3
} as const

export type ExitCode = typeof EXIT[keyof typeof EXIT]

export class CliError extends Error {
  readonly exitCode: ExitCode
  constructor (message: string, exitCode: ExitCode = EXIT.usage) {
    super(message)
    this.exitCode = exitCode
  }
}

/** A usage error (exit 2). */
export function usage (message: string): CliError {
  return new CliError(message, EXIT.usage)
}
