import { SCRIPT_MODE } from './protocol.js'
import { slotReleases, type SlotAdjustment } from '../port.js'
import type { BatchJob } from './in-flight.js'

/*
 * A decision given up on (timeout, connection lost, unreadable reply) may
 * have taken concurrency slots that nobody holds, renews or releases: its copy
 * written before the timeout is not defused and still runs after a stall. So
 * every decision failed after it was written has its slots released (a ZREM
 * of its own slot id: harmless when nothing was taken), at once and again on
 * its late reply. The release at once is enqueued after the abandoned call was
 * written, so it is written behind it on the same connection (a Cluster
 * routes it by the same key) and Redis, which runs one connection's commands
 * in order, runs it after the call, never before: a release that ran first
 * would free nothing. The one on the late reply covers what that order does
 * not (a redirect that moved the call, or every try of the first failing); a
 * release that is never answered leaves the slot to its lease. A call Redis
 * refused before running it (BUSY, OOM, a replica, …) took nothing: no release.
 */

/** Frees slots a failed decision may have taken (Store.adjustSlots: retried). */
export type ReleaseSlots = (entries: SlotAdjustment[]) => void

/** The slot releases of a call's decisions that charge (a peek or an adjustment takes none). */
export function releasesOf (jobs: readonly BatchJob[]): SlotAdjustment[] {
  const out: SlotAdjustment[] = []
  for (const job of jobs) if (job.kind === 'decide' && job.mode === SCRIPT_MODE.charge) out.push(...slotReleases(job))
  return out
}
