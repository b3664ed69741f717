import type { FastifyReply } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import { retryAfterSeconds, secondsCeil, shownRemaining, type Charge } from '../decide/decision-math.js'
import type { DecisionInput, Evaluation } from '../decide/evaluate.js'
import type { CompiledBlock, CompiledPolicy, RouteBlock } from '../policy/policy.js'
import type { BlockRun } from '../store/port.js'
import type { HeaderFormat } from '../types/index.js'

/*
 * The only module that knows header syntax: one writer per header format
 * (`'ietf'`: IETF httpapi-ratelimit-headers draft-10 Structured Fields;
 * `'draft-6'` and `'draft-7'` as express-rate-limit sends them; `'legacy'`:
 * X-RateLimit-*), each rendering the header items (below). The
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

/*
 * The header items: what each block contributes to the quota headers (name,
 * quota, window, concurrency, tier; per decision the units left, the reset and
 * the next unit), as numbers and strings rendered once per run. Each header
 * format above renders these; none computes them itself.
 *
 * - `t`'s seconds are until `r` grows by one unit (draft-10 §4.1.2: "until
 *   additional quota is made available"), from each decision's nextMs; 0 when
 *   the quota is full. A penalty's is its retry delay.
 * - The reset of the single-valued formats (legacy, draft-6, draft-7) keeps
 *   "until fully restored" (admitted) or the retry delay (refused).
 * - A concurrency block states its slots (`qu="concurrent-requests"`, no `w`, no `t`).
 */

/** A Structured Fields string: printable ASCII with `"` and `\` escaped. */
export function sfString (value: string): string {
  return '"' + value.replace(/[\\"]/g, '\\$&') + '"'
}

/** What the headers state of one run, rendered once from its numbers. */
export interface RunHeader {
  /** `"name"`: the block's name as a Structured Fields string. */
  name: string
  /** The draft-10 `RateLimit-Policy` list member: `"name";q=100;w=60` (plus the tier parameter). */
  item: string
  /** `;frrl-tier="pro"`: a vendor-prefixed extension parameter (draft-10 §3.1), '' without a tier. */
  tierParam: string
  /** `q`: the limit, or the burst capacity for token-bucket and gcra; a concurrency block's slots. */
  quota: number
  /** `w` in seconds: the window, or the time to refill the burst; a calendar period's current length. 1 for slots (the legacy reset's cap). */
  windowSeconds: number
  /** A concurrency block: slots, not units per window (no `w`). */
  slots: boolean
  /** The instant these strings were rendered for, when they change (a calendar period's start: a new period renders again). */
  periodStart?: number
}

/**
 * A block's quota as the headers state it: `q` units per `w` seconds, or a
 * concurrency block's slots (`qu="concurrent-requests"`, no `w`); its kind
 * gives the terms (BlockKind.headerTerms: for token-bucket and gcra `q` is the
 * burst capacity and `w` the time to refill it from empty).
 */
function renderRun (run: BlockRun, block: CompiledBlock): RunHeader {
  const { quota, windowSeconds, params, slots } = run.kind.headerTerms(run)
  const name = sfString(block.name)
  const tierParam = run.tier === undefined ? '' : `;frrl-tier=${sfString(run.tier)}`
  const header: RunHeader = { name, item: `${name};q=${quota}${params}${tierParam}`, tierParam, quota, windowSeconds, slots }
  const epoch = run.kind.headerEpoch?.(run)
  if (epoch !== undefined) header.periodStart = epoch
  return header
}

/** A run belongs to one block, so the run alone keys its strings. */
const runHeaders = new WeakMap<BlockRun, RunHeader>()

export function runHeader (run: BlockRun, block: CompiledBlock): RunHeader {
  let header = runHeaders.get(run)
  if (header === undefined || (header.periodStart !== undefined && header.periodStart !== run.kind.headerEpoch?.(run))) {
    header = renderRun(run, block)
    runHeaders.set(run, header)
  }
  return header
}

/** `r`: units left, never more than `q` (a fresh token bucket reports its capacity). */
export function remainingShown (decision: RawDecision, cost: number, charge: Charge, header: RunHeader): number {
  return Math.min(shownRemaining(decision, cost, charge), header.quota)
}

/**
 * The single-valued formats' reset: seconds until the quota is fully restored
 * (admitted) or until this policy admits again (refused), at most `w`. Only a
 * penalty may say more (the documented exception): the client must wait it
 * out. Capping matters for the sliding window, whose weighted previous window
 * can keep part of the quota busy up to one more window; Retry-After on a 429 stays exact.
 */
export function resetSeconds (decision: RawDecision, header: RunHeader): number {
  const seconds = decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs)
  return decision.penalized === true ? seconds : Math.min(seconds, header.windowSeconds)
}

/**
 * draft-6 and -7's reset: resetSeconds, but on a refusal exactly Retry-After
 * (draft-6, Server Behavior: "the RateLimit-Reset header field value SHOULD reference the
 * same point in time as the Retry-After field value"; -7 says it of `reset`).
 */
export function draftResetSeconds (decision: RawDecision, header: RunHeader, evaluation: Evaluation): number {
  return evaluation.rejected ? evaluation.retrySeconds : resetSeconds(decision, header)
}

/** Seconds until `r` grows by one (0 when the quota is full); a penalty's is its retry delay. */
export function nextSeconds (decision: RawDecision): number {
  return decision.penalized === true ? retryAfterSeconds(decision.retryAfterMs) : secondsCeil(decision.nextMs)
}

/** Writes the single-valued fields from the reported block's numbers. */
export type SingleFields = (reply: FastifyReply, header: RunHeader, remaining: number, reset: number) => void

/** How a single-valued format counts its reset (resetSeconds or draftResetSeconds). */
export type ResetOf = (decision: RawDecision, header: RunHeader, evaluation: Evaluation) => number

/**
 * A writer of a single-valued format: it reports the binding block (combine's
 * rule: the refusing block with the latest retry, else the one with the
 * fewest units left; draft-6 §"RateLimit-Limit": "the service limit that is
 * closest to reaching its limit"), nothing when that block is a shadow one or
 * was not decided.
 */
export function reportingBinding (write: SingleFields, resetOf: ResetOf): (reply: FastifyReply, evaluation: Evaluation) => void {
  return (reply, evaluation) => {
    const { binding, input } = evaluation
    const block = input.blocks[binding]
    const decision = evaluation.decisions[binding]
    if (block === undefined || block.run.shadow || decision === undefined) return
    const header = runHeader(block.run, block.compiled)
    write(reply, header, remainingShown(decision, block.cost, evaluation.charge, header), resetOf(decision, header, evaluation))
  }
}

/** A `RateLimit-Policy` value: each enforced block's list member joined; '' = send none. */
export type PolicyValue = (input: DecisionInput) => string

/** Renders block `i`'s list member, '' to leave it out (`blocks` lets it look at the blocks before it). */
export type PolicyMember = (header: RunHeader, i: number, blocks: readonly RouteBlock[]) => string

/**
 * A format's `RateLimit-Policy` value, cached per compiled block list (policy.routeBlocks
 * and tierBlocks, filled per policy on first use). The same on every response of
 * a route (draft §3: it SHOULD stay consistent), whatever was decided.
 */
export function policyValues (member: PolicyMember): PolicyValue {
  const listValues = new WeakMap<readonly RouteBlock[], string>()
  const filled = new WeakSet<CompiledPolicy>()
  const join = (blocks: readonly RouteBlock[]): string => {
    let value = ''
    for (const [i, { run, compiled }] of blocks.entries()) {
      if (run.shadow) continue
      const text = member(runHeader(run, compiled), i, blocks)
      if (text !== '') value += (value === '' ? '' : ', ') + text
    }
    return value
  }
  const fill = (policy: CompiledPolicy): void => {
    filled.add(policy)
    // A list whose strings change (a calendar period's `w`) is joined per request.
    for (const list of [policy.routeBlocks, ...policy.tierBlocks?.values() ?? []]) {
      if (!list.some(({ run }) => run.kind.headerEpoch !== undefined)) listValues.set(list, join(list))
    }
  }
  return (input) => {
    const { policy, compiledBlocks } = input
    // Runs made for one request (a runtime override, requestLimit) are no compiled list: join their items.
    if (compiledBlocks === undefined) return join(input.blocks)
    const value = listValues.get(compiledBlocks)
    if (value !== undefined) return value
    if (!filled.has(policy)) fill(policy)
    return listValues.get(compiledBlocks) ?? join(input.blocks)
  }
}
