import type { FastifyReply } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import type { DecisionInput, Evaluation } from '../decide/evaluate.js'
import type { RouteBlock } from '../policy/policy.js'
import type { HeaderFormat } from '../types/index.js'
import {
  draftResetSeconds, nextSeconds, policyValues, remainingShown, reportingBinding, resetSeconds, runHeader, type RunHeader
} from './header-items.js'

/*
 * The only module that knows header syntax: one writer per header format
 * (`'ietf'`: IETF httpapi-ratelimit-headers draft-10 Structured Fields;
 * `'draft-6'` and `'draft-7'` as express-rate-limit sends them; `'legacy'`:
 * X-RateLimit-*), each rendering the header items of header-items.ts. The
 * writer is chosen once at startup; a combination runs its formats' writers
 * in turn (options/fields.ts refuses two formats that send one field name
 * in two syntaxes).
 *
 * draft-10 (`'ietf'`):
 * - RateLimit-Policy lists every enforced policy of the request's run list, in
 *   declaration order, on every response (draft §3: it SHOULD stay consistent).
 * - RateLimit lists every enforced policy when admitted; on a refusal only the
 *   refusing ones, each `t` no later than Retry-After (draft §6).
 * The single-valued formats report the binding block; draft-6 and -7's
 * RateLimit-Policy lists the rate blocks (see integerPolicy).
 * Shadow policies are never shown: they must not make clients slow down.
 * No field on a 3xx (draft §6: a low `r` could stop a client following it).
 */

/**
 * Writes the quota headers of one decision. `evaluation.decisions[i]` is
 * undefined when block i was not decided (a local deny-cache answer knows only
 * the blocks it holds); `evaluation.binding` is the block the single-valued formats report.
 */
export type HeaderWriter = (reply: FastifyReply, evaluation: Evaluation) => void

const ietfPolicy = policyValues((header) => header.item)

/** `;t=<seconds until r grows by one>`, '' when the quota is full; on a refusal never later than Retry-After. */
function nextParam (decision: RawDecision, retrySeconds: number | undefined): string {
  const seconds = nextSeconds(decision)
  if (seconds === 0) return ''
  return `;t=${retrySeconds === undefined ? seconds : Math.min(seconds, retrySeconds)}`
}

/** draft-10 `RateLimit`: every enforced block decided; on a refusal only the refusing ones. */
function rateLimitValue (evaluation: Evaluation): string {
  const { decisions, charge, rejected } = evaluation
  const retrySeconds = rejected ? evaluation.retrySeconds : undefined
  let value = ''
  for (const [i, { run, cost, compiled }] of evaluation.input.blocks.entries()) {
    const decision = decisions[i]
    if (run.shadow || decision === undefined || (rejected && decision.allowed)) continue
    const header = runHeader(run, compiled)
    value += (value === '' ? '' : ', ') + `${header.name};r=${remainingShown(decision, cost, charge, header)}${nextParam(decision, retrySeconds)}`
  }
  return value
}

const writeIetf: HeaderWriter = (reply, evaluation) => {
  const policyHeader = ietfPolicy(evaluation.input)
  if (policyHeader === '') return
  reply.header('ratelimit-policy', policyHeader)
  const value = rateLimitValue(evaluation)
  if (value !== '') reply.header('ratelimit', value)
}

/** Whether a rate block before block `i` already lists this quota. */
function quotaListed (quota: number, i: number, blocks: readonly RouteBlock[]): boolean {
  for (const [j, { run, compiled }] of blocks.entries()) {
    if (j >= i) break
    if (run.shadow) continue
    const header = runHeader(run, compiled)
    if (!header.slots && header.quota === quota) return true
  }
  return false
}

/**
 * draft-6 and -7's RateLimit-Policy: `100;w=60, 1000;w=3600`, an Integer item
 * per rate block. Concurrency blocks are left out (their `w` is REQUIRED
 * there, and slots have none), and so is a block whose quota an earlier one
 * already lists ("Two quota policies MUST NOT be associated with the same
 * quota units value").
 */
const integerPolicy = policyValues((header, i, blocks) => {
  if (header.slots || quotaListed(header.quota, i, blocks)) return ''
  return `${header.quota};w=${header.windowSeconds}${header.tierParam}`
})

function writeIntegerPolicy (reply: FastifyReply, input: DecisionInput): void {
  const value = integerPolicy(input)
  if (value !== '') reply.header('ratelimit-policy', value)
}

/** draft-6's trio: `RateLimit-Limit: 100`, `RateLimit-Remaining: 40`, `RateLimit-Reset: 20`. */
const writeDraft6Fields = reportingBinding((reply, header: RunHeader, remaining, reset) => {
  reply.header('ratelimit-limit', header.quota)
  reply.header('ratelimit-remaining', remaining)
  reply.header('ratelimit-reset', reset)
}, draftResetSeconds)

const writeDraft6: HeaderWriter = (reply, evaluation) => {
  writeIntegerPolicy(reply, evaluation.input)
  writeDraft6Fields(reply, evaluation)
}

/** draft-7's Dictionary: `RateLimit: limit=100, remaining=40, reset=20`. */
const writeDraft7Field = reportingBinding((reply, header, remaining, reset) => {
  reply.header('ratelimit', `limit=${header.quota}, remaining=${remaining}, reset=${reset}`)
}, draftResetSeconds)

const writeDraft7: HeaderWriter = (reply, evaluation) => {
  writeIntegerPolicy(reply, evaluation.input)
  writeDraft7Field(reply, evaluation)
}

/** X-RateLimit-Limit/Remaining/Reset; the reset is capped at `w` on a refusal too (resetSeconds). */
const writeLegacy = reportingBinding((reply, header, remaining, reset) => {
  reply.header('x-ratelimit-limit', header.quota)
  reply.header('x-ratelimit-remaining', remaining)
  reply.header('x-ratelimit-reset', reset)
}, resetSeconds)

/** Field syntaxes, by what a parser must understand: one name in two syntaxes never goes out together. */
const SF_NAMED_LIST = 'a List of named items (draft-8 to -11)'
const SF_INTEGER_LIST = 'a List of Integer items with w (draft-6, -7)'
const INTEGER = 'an Integer'

interface Format {
  /** Each field the format sends, lower case, with its syntax. */
  fields: Readonly<Record<string, string>>
  write: HeaderWriter
}

/** The header formats: what each sends and its writer. */
export const FORMATS: Readonly<Record<HeaderFormat, Format>> = {
  ietf: { fields: { 'ratelimit-policy': SF_NAMED_LIST, ratelimit: SF_NAMED_LIST }, write: writeIetf },
  'draft-6': {
    fields: { 'ratelimit-policy': SF_INTEGER_LIST, 'ratelimit-limit': INTEGER, 'ratelimit-remaining': INTEGER, 'ratelimit-reset': INTEGER },
    write: writeDraft6
  },
  'draft-7': { fields: { 'ratelimit-policy': SF_INTEGER_LIST, ratelimit: 'a Dictionary of limit, remaining and reset (draft-7)' }, write: writeDraft7 },
  legacy: { fields: { 'x-ratelimit-limit': INTEGER, 'x-ratelimit-remaining': INTEGER, 'x-ratelimit-reset': INTEGER }, write: writeLegacy }
}

/**
 * An onSend hook that drops the fields from a 3xx (304 included): the status is
 * known only once the handler (or an etag plugin's onSend) has set it.
 * Undefined when no format is sent.
 */
export function redirectGuard (formats: readonly HeaderFormat[]): ((request: unknown, reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void) => void) | undefined {
  if (formats.length === 0) return undefined
  const fields = [...new Set(formats.flatMap((format) => Object.keys(FORMATS[format].fields)))]
  return function rateLimitRedirectGuard (_request, reply, payload, done) {
    const status = reply.statusCode
    if (status >= 300 && status < 400) for (const field of fields) reply.removeHeader(field)
    done(null, payload)
  }
}

const writeNone: HeaderWriter = () => {}

/** Picks the writer once at startup, so requests never branch on the formats. */
export function headerWriter (formats: readonly HeaderFormat[]): HeaderWriter {
  const writers = formats.map((format) => FORMATS[format].write)
  const [only] = writers
  if (only === undefined) return writeNone
  if (writers.length === 1) return only
  return (reply, evaluation) => {
    for (let i = 0; i < writers.length; i++) writers[i]?.(reply, evaluation)
  }
}
