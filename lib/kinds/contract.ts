import type { BlockParams, MemoryStep, RawDecision, RunAlgorithm } from '../store/algorithms.js'
import type { CalendarPeriod, CalendarSpec, PeriodBoundaries } from './period/calendar.js'
import type { PolicyBlockSummary } from '../types/index.js'

/*
 * The block-kind seam: what the engine, the headers, the stores and the end of
 * a request ask of a run, answered by its kind (window, period, concurrency),
 * so no code outside lib/kinds/ asks which kind a run is. A kind's steps that
 * need a higher tier sit in its folder under that tier's name
 * (concurrency/decide.ts, period/policy.ts); kinds/policy.ts picks a block's
 * kind. The Lua drivers dispatch by algorithm number (scripts/<kind>.lua).
 */

/** What a block counts over: exactly one of these fields. */
export const BLOCK_KINDS = ['window', 'period', 'concurrency'] as const
export type KindName = typeof BLOCK_KINDS[number]

/** A units change the memory store applies: the new state and how long it matters; undefined: nothing changed. */
export type MemoryChange = { state: unknown, ttlMs: number } | undefined

/** A run's terms in the RateLimit headers: `q`, `w` (1 for slots: the legacy reset's cap) and the parameters after `q`. */
export interface HeaderTerms {
  quota: number
  windowSeconds: number
  /** `;w=60`, or `;qu="concurrent-requests"` for slots. */
  params: string
  /** Slots rather than units per window. */
  slots: boolean
}

/** What a key suffix is made of: the block's algorithm and window, or its calendar period. */
export interface SuffixSource {
  algorithm: RunAlgorithm
  windowMs: number
  period?: { spec: CalendarSpec } | undefined
}

/**
 * What a kind reads of a run: its algorithm, its numbers and a period's
 * boundaries. A store's run (store/port.ts BlockRun) carries these and its
 * kind; the kind asks nothing else of it.
 */
export interface KindRun {
  readonly algorithm: RunAlgorithm
  readonly params: BlockParams
  readonly period?: PeriodBoundaries | undefined
}

export interface BlockKind {
  readonly name: KindName
  /**
   * The block's key suffix before sibling disambiguation, at most 10
   * characters (the 128-byte key bound is met exactly at `SW86400000`); a new
   * state format takes a new suffix, so old and new instances never read each
   * other's state in a deploy.
   */
  keySuffix: (shape: SuffixSource) => string
  /**
   * A request holds a slot of the run until it ends: it carries a slot id,
   * the end of the request releases it, and nothing else changes its usage.
   */
  readonly holdsSlot: boolean
  /** Decided in one pass when alone and without a penalty (a slot is taken only after a dry pass admits). */
  readonly straight: boolean
  /** What the run is decided at, in the scripts and the memory step: its cost, or the request's slot id. */
  callArg: (cost: number, slot: string | undefined) => number | string
  /** The batch script's per-spec tail after the spec text: a period's boundaries, else ''. */
  specTail: (run: KindRun) => string
  /** The run's numbers at `now` (a calendar period's start and length). */
  paramsAt: (run: KindRun, now: number) => BlockParams
  /**
   * What a units change after the decision sends as its charge's time: the
   * call's time `at`, or a delay's gcra turn (the arrival time its charge
   * left, which a give-back must find unchanged: scripts/gcra.lua mode 2).
   */
  chargeMark: (run: KindRun, decision: RawDecision, at: number) => number
  /** Until when the deny cache keeps a refusal answered until `until`; undefined: never cached. */
  denyHold: (run: KindRun, now: number, until: number) => number | undefined
  headerTerms: (run: KindRun) => HeaderTerms
  /** The instant the run's header strings hold for (a period's start); absent: they never change. */
  headerEpoch?: (run: KindRun) => number
  /** The memory store's decision step, as the kind's Lua step takes it. */
  memoryStep: (state: unknown, run: KindRun, arg: number | string, now: number) => MemoryStep<unknown>
  /** A units change after the decision (refundOn, settle, adjust); undefined where the kind has no units to change. */
  memoryUnits: (state: unknown, run: KindRun, units: number, now: number, chargedAt: number) => MemoryChange
  /** Fields the kind adds to its policies() row (a period's unit, time zone and current length). */
  summarize?: (row: PolicyBlockSummary, period: CalendarPeriod | undefined) => void
}
