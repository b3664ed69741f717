import { SLOT_RETRY_MS } from '../../kinds/concurrency/lease.js'
import type { RawDecision } from '../algorithms.js'
import { FST_RRL_BAD_SCRIPT_REPLY, FST_RRL_SCRIPT_ERROR } from '../../errors.js'
import { onlySlots, penaltyKey, type Adjustment, type BlockRun, type DecideMode, type StoreBlock, type StoreCallMeasure, type StoreRequest } from '../port.js'
import { isInteger } from '../../util/validate.js'

/*
 * The batch script's wire format, in one place: what a decision, peek or
 * adjustment sends (keys and its ARGV segment), how the calls of one batch are
 * framed into one call, and how its reply is split and read. The Lua side
 * is scripts/batch.lua (layout in its header comment).
 *
 * ARGV layout, modes and reply layout belong to one instance's script SHA and
 * library version (rolling deploys: docs/operations.md): an instance only
 * ever calls the script or function it loaded, so they may change with a release. What old and new instances share
 * is the key names and the state stored under them (keys/layout.ts).
 */

/*
 * A decision's mode argument in the batch script: the algorithms' mode
 * numbers (scripts/*.lua: 0 charge, 1 dry, 2 refund, 3 charge without
 * deciding) as text, charge sent as ''. Refunds and charges without deciding
 * are adjustments, their own call (adjustCall: kinds 'u', 'x', 'n').
 */
export const SCRIPT_MODE = {
  charge: '',
  peek: '1'
} as const

/** Values per block spec in a batch (SpecTable, below): its text, its kind's tail (a period's boundaries, else ''). */
export const SPEC_STRIDE = 2

/** A block admitted at a reserved turn (a delay: scripts/gcra.lua, token-bucket.lua), as the scripts' `allowed`; its retryAfterMs is the wait. */
export const RESERVED = 4

/**
 * A concurrency block with `wait` that found no slot (scripts/concurrency.lua,
 * allowed 5): the request may wait for one. On the wire its head is
 * QUEUED_HEAD minus the waiters ahead of it (a reserved turn's -wait is never
 * below -MAX_DELAY_MS), then 0 and 0.
 */
export const QUEUED = 5
export const QUEUED_HEAD = -(2 ** 30)

/** Integers per block in a decision's or peek's reply: allowed, remaining, resetMs, retryAfterMs, nextMs. */
export const DECISION_STRIDE = 5

/** Values per entry of an adjustment call: kind, spec, units, the charge's time (ms; '' = now). */
export const ADJUST_STRIDE = 4

/**
 * An admitted block's resetMs and nextMs in one reply integer, resetMs *
 * REPLY_PACK + nextMs, when both are below it (2^26 ms, 18.6 h; scripts/reply.lua).
 */
export const REPLY_PACK = 2 ** 26

/** A decision or peek as the batch script takes it (its ARGV is framed per batch): the request's blocks and its KEYS. */
export interface DecisionCall extends StoreRequest {
  kind: 'decide'
  /** The block keys, then the penalty keys (see keysWithPenalties). */
  keys: readonly string[]
  /** The decision's mode argument: '' charge, '1' peek. */
  mode: string
}

/** Adjustments (Store.adjust) as the batch script takes them: one key per entry, one integer per entry in the reply. */
export interface AdjustCall {
  kind: 'adjust'
  entries: readonly Adjustment[]
  keys: readonly string[]
  /**
   * Only slot releases and renewals (a ZREM, a ZADD of a live member): safe
   * to run twice and after its answer was given up, so never defused at a
   * timeout and never framed with calls that are not (dispatcher.ts).
   */
  idempotent: boolean
}

/** One call of a batch: a decision (or peek), or a list of adjustments. */
export type EncodedCall = DecisionCall | AdjustCall

/** What a call answers to: its reply values, the script's `now` (the time it charged at) and the call's size and latency, or why it failed. */
export interface Settlement {
  resolve: (values: number[], at: number, call: StoreCallMeasure) => void
  reject: (error: unknown) => void
}

/** The block keys, then one penalty key per block that has a penalty (see scripts/batch.lua). */
export function keysWithPenalties ({ blocks }: StoreRequest): readonly string[] {
  const keys: string[] = []
  for (const { key } of blocks) keys.push(key)
  for (const { run, key } of blocks) if (run.penalty !== undefined) keys.push(penaltyKey(key))
  return keys
}

/**
 * A decision or peek of every block of one request, with what it answers to
 * (one object literal per request: spreading a call into a job would copy it again).
 */
export function decideCall (request: StoreRequest, mode: DecideMode, resolve: Settlement['resolve'], reject: Settlement['reject']): DecisionCall & Settlement {
  return { kind: 'decide', blocks: request.blocks, slot: request.slot, keys: keysWithPenalties(request), mode: SCRIPT_MODE[mode], resolve, reject }
}

/** Store.adjust's entries, in one call (every key in one slot), with what it answers to. */
export function adjustCall (entries: readonly Adjustment[], resolve: Settlement['resolve'], reject: Settlement['reject']): AdjustCall & Settlement {
  return { kind: 'adjust', entries, keys: entries.map((entry) => entry.key), idempotent: onlySlots(entries), resolve, reject }
}

/**
 * The one block of a straight decision (one block, charged, no penalty, not a
 * slot: a slot is taken only after a dry pass admits), which both scripts run
 * without the general path; undefined for any other call.
 */
function straightBlock (call: EncodedCall): StoreBlock | undefined {
  if (call.kind !== 'decide' || call.blocks.length !== 1 || call.mode !== '') return undefined
  const [block] = call.blocks
  return block !== undefined && block.run.penalty === undefined && block.run.kind.straight ? block : undefined
}

/** An adjustment call's ARGV segment: `-1, n`, then per entry ADJUST_STRIDE values (kind, spec, units, the charge's time). */
function frameAdjust (call: AdjustCall, specs: SpecTable, out: Array<string | number>): void {
  out.push(-1, call.entries.length)
  for (const entry of call.entries) {
    // A slot's release ('x') or renewal ('n') carries the slot id where units go.
    // The charge's time as the script's clock gave it ('': a change made now, outside a request).
    if (entry.kind === 'units') out.push('u', specs.of(entry.run), entry.units, entry.chargedAt ?? '')
    else out.push(entry.kind === 'release' ? 'x' : 'n', specs.of(entry.run), entry.slot, 0)
  }
}

/**
 * The arguments after the SHA (or source) for one batch: key count, every
 * call's keys, now ('' = Redis TIME), the spec table, then per call `spec`
 * (one block without a penalty charged 1: most decisions, in one value),
 * `-2, spec, cost` (the same with another cost), `0, n, mode, n × (spec, cost)`
 * (any decision; a concurrency block's cost is the slot id) or `-1, n, n × (kind,
 * spec, units, chargedAt)` (adjustments; a slot's release or renewal has the slot id for units).
 */
export function frameBatch (calls: readonly EncodedCall[], now: number | undefined): Array<string | number> {
  const keys: string[] = []
  const specs = new SpecTable()
  const decisions: Array<string | number> = []
  for (const call of calls) {
    for (const key of call.keys) keys.push(key)
    if (call.kind === 'adjust') {
      frameAdjust(call, specs, decisions)
      continue
    }
    const straight = straightBlock(call)
    if (straight !== undefined) {
      const { run, cost } = straight
      if (cost === 1) decisions.push(specs.of(run))
      else decisions.push(-2, specs.of(run), cost)
      continue
    }
    decisions.push(0, call.blocks.length, call.mode)
    for (const { run, cost } of call.blocks) {
      // A slot run's "cost" is the request's slot id, its sorted-set member.
      decisions.push(specs.of(run), run.kind.callArg(cost, call.slot))
    }
  }
  return [keys.length, ...keys, now === undefined ? '' : String(now), specs.size, ...specs.values, ...decisions]
}

/**
 * A decision's blocks from list[at] on, as the scripts send them (batch.lua:
 * `remaining * 4 + allowed`, resetMs, retryAfterMs unless allowed is 1,
 * nextMs; or `remaining * 4 + 3` and resetMs * REPLY_PACK + nextMs), into
 * DECISION_STRIDE values each; the position after them, or -1 when the
 * reply is not laid out so.
 */
function readBlocks (list: readonly unknown[], at: number, blocks: number, values: number[]): number {
  for (let b = 0; b < blocks; b++) {
    const head = list[at]
    if (!isInteger(head)) return -1
    if (head < 0) {
      // A reserved turn (a delay): -wait, resetMs, nextMs, or -wait, -1 - resetMs, nextMs and the units
      // free before it (a peek's remaining); nothing remains after it. Or a place in a slot's queue.
      const resetMs = list[at + 1]
      const nextMs = list[at + 2]
      if (typeof resetMs !== 'number' || typeof nextMs !== 'number') return -1
      if (head <= QUEUED_HEAD) values.push(QUEUED, QUEUED_HEAD - head, resetMs, SLOT_RETRY_MS, nextMs)
      else if (resetMs >= 0) values.push(RESERVED, 0, resetMs, -head, nextMs)
      else {
        const free = list[at + 3]
        if (!isInteger(free)) return -1
        values.push(RESERVED, free, -1 - resetMs, -head, nextMs)
        at += 1
      }
      at += 3
      continue
    }
    const allowed = head % 4
    if (allowed === 3) {
      const packed = list[at + 1]
      if (!isInteger(packed) || packed < 0) return -1
      const resetMs = Math.floor(packed / REPLY_PACK)
      values.push(1, (head - 3) / 4, resetMs, 0, packed - resetMs * REPLY_PACK)
      at += 2
      continue
    }
    // An admitted block (allowed 1) sends no retryAfterMs: three values, else four.
    const width = allowed === 1 ? 3 : 4
    const resetMs = list[at + 1]
    const retryAfterMs = allowed === 1 ? 0 : list[at + 2]
    const nextMs = list[at + width - 1]
    if (typeof resetMs !== 'number' || typeof retryAfterMs !== 'number' || typeof nextMs !== 'number') return -1
    values.push(allowed, (head - allowed) / 4, resetMs, retryAfterMs, nextMs)
    at += width
  }
  return at
}

/** An adjustment call's `entries` values from list[at] on, into `values`; the position after them, or -1 when one is not a number. */
function readAdjusted (list: readonly unknown[], at: number, entries: number, values: number[]): number {
  for (let i = 0; i < entries; i++) {
    const value = list[at + i]
    if (typeof value !== 'number') return -1
    values.push(value)
  }
  return at + entries
}

/** A batch reply split among its calls: the script's `now`, then per call its values or the error it failed with. */
export interface SplitReply {
  at: number
  results: Array<number[] | Error>
}

/**
 * Splits a batch reply: its first value is the script's
 * `now`; then its calls' values or error text alone each: per call its values
 * (DECISION_STRIDE per block for a decision, one per entry for adjustments),
 * or the error it failed with.
 */
export function splitBatchReply (calls: readonly EncodedCall[], reply: unknown): SplitReply {
  const out: Array<number[] | Error> = []
  const list: readonly unknown[] = Array.isArray(reply) ? reply : []
  const now = list[0]
  if (!isInteger(now)) return { at: 0, results: calls.map(() => new FST_RRL_BAD_SCRIPT_REPLY()) }
  let at = 1
  for (const call of calls) {
    const error = list[at]
    if (typeof error === 'string') {
      out.push(new FST_RRL_SCRIPT_ERROR(error))
      at += 1
      continue
    }
    const values: number[] = []
    at = call.kind === 'decide' ? readBlocks(list, at, call.blocks.length, values) : readAdjusted(list, at, call.entries.length, values)
    if (at < 0) {
      // The rest cannot be located either.
      while (out.length < calls.length) out.push(new FST_RRL_BAD_SCRIPT_REPLY())
      break
    }
    out.push(values)
  }
  return { at: now, results: out }
}

/** A decision's reply: DECISION_STRIDE integers per block, allowed being 0, 1, 2 for a penalty, RESERVED (its retryAfterMs the wait), or QUEUED (its remaining the waiters ahead). */
export function toDecisions (values: readonly number[]): RawDecision[] {
  const out: RawDecision[] = []
  // readBlocks writes DECISION_STRIDE values per block: the bound keeps every read below in range.
  for (let i = 0; i + DECISION_STRIDE <= values.length; i += DECISION_STRIDE) {
    const head = values[i]
    const second = values[i + 1] as number
    const resetMs = values[i + 2] as number
    const fourth = values[i + 3] as number
    const nextMs = values[i + 4] as number
    if (head === RESERVED) {
      out.push({ allowed: true, remaining: 0, resetMs, retryAfterMs: 0, nextMs, waitMs: fourth, freeNow: second })
      continue
    }
    const decision: RawDecision = { allowed: head === 1, remaining: second, resetMs, retryAfterMs: fourth, nextMs }
    if (head === 2) decision.penalized = true
    else if (head === QUEUED) decision.queued = decision.remaining
    out.push(decision)
  }
  return out
}

/** An adjustment call's reply: per entry 1 when it changed something. */
export function toAdjusted (values: readonly number[]): boolean[] {
  return values.map((changed) => changed === 1)
}

/*
 * The block specs of the wire to Redis: each run's spec text, built once and
 * kept beside the run (the policy compiler never sees it), and a batch's table
 * of the distinct specs its calls use.
 */

/**
 * A block as the scripts read it (scripts/spec.lua), one argument parsed once
 * per library load: 'algorithm|limit|windowMs|burst|shadow|penalty'. Built
 * at a run's first call and kept with it (specOf), not per request.
 */
export function specText (algorithmNumber: number, params: BlockRun['params'], shadow: boolean, penalty: BlockRun['penalty']): string {
  return `${algorithmNumber}|${params.limit}|${params.windowMs}|${params.burst}|${shadow ? '1' : ''}|${penalty?.arg ?? ''}`
}

/** Each run's spec text, built at its first call (a run lives as long as its policy, or one request). */
const specTexts = new WeakMap<BlockRun, string>()

export function specOf (run: BlockRun): string {
  let text = specTexts.get(run)
  if (text === undefined) {
    text = specText(run.algorithmNumber, run.params, run.shadow, run.penalty)
    specTexts.set(run, text)
  }
  return text
}

/** The batch's table of distinct block specs: a run's 1-based index, its SPEC_STRIDE values (protocol.ts: the text, its kind's tail) appended once. */
export class SpecTable {
  readonly values: Array<string | number> = []
  readonly #index = new Map<BlockRun, number>()

  get size (): number {
    return this.#index.size
  }

  of (run: BlockRun): number {
    let index = this.#index.get(run)
    if (index === undefined) {
      index = this.#index.size + 1
      this.#index.set(run, index)
      this.values.push(specOf(run), run.kind.specTail(run))
    }
    return index
  }
}
