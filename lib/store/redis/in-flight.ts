import type { ScriptCall, ScriptOp } from './client/port.js'
import type { BatchJob } from './dispatcher.js'
import type { ScriptNumber } from './script-route.js'

/*
 * What the dispatcher's timeout rule judges (dispatcher.ts): a script call in
 * flight, and per connection when Redis last answered this store and which of
 * its calls it still owes.
 */

/** When this store last had a reply from one connection: Redis is alive and working through the pipeline. */
export interface Progress {
  lastAt: number
  /** This store's unanswered calls on the connection. */
  open: Set<InFlight>
}

/** A call the client still holds after this many timeouts is abandoned even if Redis owes nothing (another user filled the socket). */
export const UNWRITTEN_TIMEOUTS = 20

/**
 * Whether Redis has owed one of this store's calls on the connection (other
 * than `call`) for at least `timeout` ms at `at`: written that long ago and
 * still unanswered. A call written a moment ago (node-redis writes a flood's
 * calls as its socket drains) does not make Redis late.
 */
export function owedFor (call: InFlight, timeout: number, at: number): boolean {
  for (const other of call.progress.open) {
    if (other !== call && other.current.written && at - other.current.writtenAt >= timeout) return true
  }
  return false
}

/** One script call in flight: its jobs and what the timeout rule judges it by. */
export interface InFlight {
  jobs: readonly BatchJob[]
  /** The script called (script-route.ts numbers), and its framed arguments after the name (or SHA), kept for the EVAL after "Function not found" or NOSCRIPT. */
  script: ScriptNumber
  args: ReadonlyArray<string | number>
  /** The call first written (FCALL or EVALSHA): the timeout rule measures from its write. */
  first: ScriptCall
  /** The call last written: the first, or the EVAL that answers its "Function not found" or NOSCRIPT. */
  current: ScriptCall
  op: ScriptOp
  /** Every job is idempotent (slot releases, renewals): a resend is harmless, so it is never defused. */
  idempotent: boolean
  settled: boolean
  timedOut: boolean
  progress: Progress
  firedAt: number
  timer: NodeJS.Timeout | undefined
}
