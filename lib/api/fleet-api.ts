import type { FastifyBaseLogger } from 'fastify'
import { FST_RRL_INVALID_API_CALL, FST_RRL_REDIS_TIMEOUT } from '../errors.js'
import { audited, parseJson } from '../fleet/records.js'
import { MAX_AUDIT_READ } from '../limits.js'
import { readFleet } from '../picture/fleet.js'
import type { AuditTrail, PictureBoard } from '../store/port.js'
import type { AuditEntry, RateLimitApi, RateLimitIdentity } from '../types/index.js'
import { settleWithin } from '../util/await-within.js'
import { shown } from '../util/validate.js'
import { shownIdentity } from './inputs.js'

/* fastify.rateLimit.fleet() and auditTrail(), and the audit of a reset: what the console and the CLI read. */

/** The newest changes auditTrail() gives without a count. */
const AUDIT_DEFAULT = 50

export interface ConsoleRecords {
  audit: AuditTrail
  board: PictureBoard
  /** The plugin's `timeout`. */
  timeout: number
}

export function fleetApi (records: ConsoleRecords): Pick<RateLimitApi, 'fleet' | 'auditTrail'> {
  const { audit, board } = records
  // What an operator's page or tool waits on is bounded as close-time calls are (30 timeouts, at least 1 s): a hung Redis without a client commandTimeout answers with an error.
  const waitMs = Math.max(1000, 30 * records.timeout)
  const bounded = async <T>(work: Promise<T>): Promise<T> => await settleWithin(work, waitMs, () => new FST_RRL_REDIS_TIMEOUT(waitMs))
  return {
    async fleet () {
      return await bounded(readFleet(board))
    },
    async auditTrail (count) {
      const wanted = count ?? AUDIT_DEFAULT
      if (typeof wanted !== 'number' || !Number.isInteger(wanted) || wanted < 1 || wanted > MAX_AUDIT_READ) {
        throw new FST_RRL_INVALID_API_CALL('auditTrail', `count must be an integer from 1 to ${MAX_AUDIT_READ} (got ${shown(wanted)})`)
      }
      const out: AuditEntry[] = []
      for (const json of await bounded(audit.recent(wanted))) {
        const entry = parseJson(json)
        if (entry !== undefined) out.push(entry as unknown as AuditEntry)
      }
      return out
    }
  }
}

/** A reset given `{ actor, reason }`: logged and in the audit trail; the caller named by its kinds and shown values only (shownIdentity: no API key). */
export async function auditReset (route: string, identity: RateLimitIdentity, who: { actor: string, reason: string }, to: { audit: AuditTrail, log: FastifyBaseLogger }): Promise<void> {
  const shownCaller = shownIdentity(identity)
  to.log.info({ usage: { route, identity: shownCaller }, change: 'reset', actor: who.actor, reason: who.reason }, 'rate limit usage reset')
  await audited(to.audit, to.log, { at: new Date().toISOString(), change: 'reset', noun: 'usage', id: route, ...who, record: { identity: shownCaller } })
}
