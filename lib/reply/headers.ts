import type { FastifyReply } from 'fastify'
import type { RawDecision } from '../store/algorithms.js'
import { retryAfterSeconds, secondsCeil, shownRemaining, type Charge } from '../decide/decision-math.js'
import type { DecisionInput, Evaluation } from '../decide/evaluate.js'
import type { CompiledBlock, CompiledPolicy } from '../policy/policy.js'
import type { BlockRun } from '../store/port.js'
import type { HeaderMode } from '../types.js'

/*
 * The only module that knows header syntax: IETF httpapi-ratelimit-headers
 * draft-10 (Structured Fields) and the legacy X-RateLimit-* trio. Every string
 * is rendered here from the runs' numbers and cached: per run (a WeakMap, so a
 * run made for an override or a requestLimit is rendered once and dropped with
 * it) and per compiled run list (the RateLimit-Policy value).
 *
 * - `t` is the seconds until `r` grows by one unit (draft-10 §4.1.2: "until
 *   additional quota is made available"), from each decision's nextMs; omitted
 *   when the quota is full. A penalty's `t` is its retry delay.
 * - RateLimit-Policy lists every enforced policy of the request's run list, in
 *   declaration order, on every response (draft §3: it SHOULD stay consistent).
 * - RateLimit lists every enforced policy when admitted; on a refusal only the
 *   refusing ones, each `t` no later than Retry-After (draft §6).
 * - Shadow policies are never shown: they must not make clients slow down.
 * - The legacy trio shows the binding policy; X-RateLimit-Reset keeps "until
 *   fully restored" (admitted) or the retry delay (refused).
 * - No field on a 3xx (draft §6: a low `r` could stop a client following it).
 * - A concurrency block states its slots (`qu="concurrent-requests"`, no `w`, no `t`).
 */

/** A Structured Fields string: printable ASCII with `"` and `\` escaped. */
export function sfString (value: string): string {
  return '"' + value.replace(/[\\"]/g, '\\$&') + '"'
}

/** What the headers state of one run, rendered once from its numbers. */
interface RunHeader {
  /** `"name"`: the block's name as a Structured Fields string. */
  name: string
  /** The `RateLimit-Policy` list member: `"name";q=100;w=60` (plus `;frrl-tier="pro"`: a vendor-prefixed extension parameter, draft-10 §3.1). */
  item: string
  /** `q`: the limit, or the burst capacity for token-bucket and gcra. */
  quota: number
  /** `w` in seconds: the window, or the time to refill the burst; a calendar period's current length. */
  windowSeconds: number
  /** A calendar period's start these strings were rendered for (a new period renders again). */
  periodStart?: number
}

/**
 * A block's quota as the headers state it: `q` units per `w` seconds. For
 * token-bucket and gcra the quota is the burst capacity and `w` the time to
 * refill it from empty (burst × window / limit), so `r` never exceeds `q` and
 * `t` (time until full) never exceeds `w`; otherwise `q` = limit, `w` = window.
 */
function renderRun (run: BlockRun, block: CompiledBlock): RunHeader {
  if (run.algorithm === 'concurrency') return renderSlots(run, block)
  const { limit, burst } = run.params
  const windowMs = run.period?.lengthMs() ?? run.params.windowMs
  const bursty = run.algorithm === 'token-bucket' || run.algorithm === 'gcra'
  const quota = bursty ? burst : limit
  const windowSeconds = Math.max(1, secondsCeil(bursty ? Math.ceil(burst * windowMs / limit) : windowMs))
  const name = sfString(block.name)
  const item = `${name};q=${quota};w=${windowSeconds}` + (run.tier === undefined ? '' : `;frrl-tier=${sfString(run.tier)}`)
  const header: RunHeader = { name, item, quota, windowSeconds }
  if (run.period !== undefined) header.periodStart = run.period.bounds()[1]
  return header
}

/**
 * A concurrency block: `"name";q=N;qu="concurrent-requests"` (draft-10's
 * registered quota unit), no `w`: slots do not refill over time. `r` is the
 * free slots; no `t` (nextMs is 0: a slot frees when a request ends). The
 * legacy reset of a refusal is its Retry-After, 1 s.
 */
function renderSlots (run: BlockRun, block: CompiledBlock): RunHeader {
  const name = sfString(block.name)
  const quota = run.params.limit
  const item = `${name};q=${quota};qu="concurrent-requests"` + (run.tier === undefined ? '' : `;frrl-tier=${sfString(run.tier)}`)
  return { name, item, quota, windowSeconds: 1 }
}

/** A run belongs to one block, so the run alone keys its strings. */
const runHeaders = new WeakMap<BlockRun, RunHeader>()

function runHeader (run: BlockRun, block: CompiledBlock): RunHeader {
  let header = runHeaders.get(run)
  if (header === undefined || (run.period !== undefined && header.periodStart !== run.period.bounds()[1])) {
    header = renderRun(run, block)
    runHeaders.set(run, header)
  }
  return header
}

/** The `RateLimit-Policy` value: the enforced runs; '' = send none. */
function joinItems (policy: CompiledPolicy, runs: readonly BlockRun[]): string {
  let value = ''
  for (let i = 0; i < runs.length; i++) {
    const run = runs[i]
    const block = policy.blocks[i]
    if (run === undefined || block === undefined || run.shadow) continue
    value += (value === '' ? '' : ', ') + runHeader(run, block).item
  }
  return value
}

/** The `RateLimit-Policy` value of each compiled run list (policy.runs and tierRuns), filled per policy on first use. */
const listValues = new WeakMap<readonly BlockRun[], string>()
const filled = new WeakSet<CompiledPolicy>()

function fill (policy: CompiledPolicy): void {
  filled.add(policy)
  // A list with a calendar period is joined per request: its `w` changes with the period.
  for (const list of [policy.runs, ...policy.tierRuns?.values() ?? []]) {
    if (!list.some((run) => run.period !== undefined)) listValues.set(list, joinItems(policy, list))
  }
}

/** `RateLimit-Policy`: every enforced block of the run list, whatever was decided (a deny-cache answer too). */
function policyValue (input: DecisionInput): string {
  const { policy, runs } = input
  const value = listValues.get(runs)
  if (value !== undefined) return value
  if (!filled.has(policy)) fill(policy)
  // A run list made for one request (a runtime override, requestLimit) is not a compiled one: join its runs' items.
  return listValues.get(runs) ?? joinItems(policy, runs)
}

/**
 * X-RateLimit-Reset: seconds until the quota is fully restored (admitted) or
 * until this policy admits again (refused), at most `w`. Only a penalty may
 * say more (the documented exception): the client must wait it out. Capping
 * matters for the sliding window, whose weighted previous window can keep part
 * of the quota busy up to one more window; Retry-After on a 429 stays exact.
 */
function resetSeconds (decision: RawDecision, header: RunHeader): number {
  const seconds = decision.allowed ? secondsCeil(decision.resetMs) : retryAfterSeconds(decision.retryAfterMs)
  return decision.penalized === true ? seconds : Math.min(seconds, header.windowSeconds)
}

/** `r`: units left, never more than `q` (a fresh token bucket reports its capacity). */
function remainingShown (decision: RawDecision, cost: number, charge: Charge, header: RunHeader): number {
  return Math.min(shownRemaining(decision, cost, charge), header.quota)
}

/** `;t=<seconds until r grows by one>`, '' when the quota is full; on a refusal never later than Retry-After. */
function nextParam (decision: RawDecision, retrySeconds: number | undefined): string {
  const seconds = decision.penalized === true ? retryAfterSeconds(decision.retryAfterMs) : secondsCeil(decision.nextMs)
  if (seconds === 0) return ''
  return `;t=${retrySeconds === undefined ? seconds : Math.min(seconds, retrySeconds)}`
}

/** `RateLimit`: every enforced block decided; on a refusal only the refusing ones. */
function rateLimitValue (input: DecisionInput, evaluation: Evaluation): string {
  const { policy, runs, costs } = input
  const { decisions, charge, rejected } = evaluation
  const retrySeconds = rejected ? evaluation.retrySeconds : undefined
  let value = ''
  for (let i = 0; i < runs.length; i++) {
    const run = runs[i]
    const decision = decisions[i]
    const block = policy.blocks[i]
    const cost = costs[i]
    if (run === undefined || run.shadow || decision === undefined || block === undefined || cost === undefined) continue
    if (rejected && decision.allowed) continue
    const header = runHeader(run, block)
    value += (value === '' ? '' : ', ') + `${header.name};r=${remainingShown(decision, cost, charge, header)}${nextParam(decision, retrySeconds)}`
  }
  return value
}

/**
 * Writes the quota headers of one decision. `evaluation.decisions[i]` is
 * undefined when block i was not decided (a local deny-cache answer knows only
 * the blocks it holds); `evaluation.binding` is the block the legacy headers report.
 */
export type HeaderWriter = (reply: FastifyReply, input: DecisionInput, evaluation: Evaluation) => void

const writeIetf: HeaderWriter = (reply, input, evaluation) => {
  const policyHeader = policyValue(input)
  if (policyHeader === '') return
  reply.header('ratelimit-policy', policyHeader)
  const value = rateLimitValue(input, evaluation)
  if (value !== '') reply.header('ratelimit', value)
}

const writeLegacy: HeaderWriter = (reply, input, evaluation) => {
  const { binding } = evaluation
  const run = input.runs[binding]
  const decision = evaluation.decisions[binding]
  const block = input.policy.blocks[binding]
  const cost = input.costs[binding]
  if (run === undefined || run.shadow || decision === undefined || block === undefined || cost === undefined) return
  const header = runHeader(run, block)
  reply.header('x-ratelimit-limit', header.quota)
  reply.header('x-ratelimit-remaining', remainingShown(decision, cost, evaluation.charge, header))
  reply.header('x-ratelimit-reset', resetSeconds(decision, header))
}

const writeBoth: HeaderWriter = (reply, input, evaluation) => {
  writeIetf(reply, input, evaluation)
  writeLegacy(reply, input, evaluation)
}

const writeNone: HeaderWriter = () => {}

const IETF_FIELDS = ['ratelimit', 'ratelimit-policy']
const LEGACY_FIELDS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']

/**
 * An onSend hook that drops the fields from a 3xx (304 included): the status is
 * known only once the handler (or an etag plugin's onSend) has set it.
 * Undefined when the mode writes no field.
 */
export function redirectGuard (mode: HeaderMode): ((request: unknown, reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void) => void) | undefined {
  if (mode === false) return undefined
  const fields = mode === 'ietf' ? IETF_FIELDS : mode === 'legacy' ? LEGACY_FIELDS : [...IETF_FIELDS, ...LEGACY_FIELDS]
  return function rateLimitRedirectGuard (_request, reply, payload, done) {
    const status = reply.statusCode
    if (status >= 300 && status < 400) for (const field of fields) reply.removeHeader(field)
    done(null, payload)
  }
}

/** Picks the writer once at startup, so requests never branch on the mode. */
export function headerWriter (mode: HeaderMode): HeaderWriter {
  switch (mode) {
    case 'ietf': return writeIetf
    case 'legacy': return writeLegacy
    case 'both': return writeBoth
    default: return writeNone
  }
}
