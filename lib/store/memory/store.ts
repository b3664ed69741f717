import type { MemoryStep, RawDecision } from '../algorithms.js'
import { MemoryRecords } from './records.js'
import { MemoryAudit, MemoryBoard } from './board.js'
import type { NodeHealth } from '../../types/api.js'
import { penaltyKey, type Adjustment, type BlockRun, type DecideMode, type Decided, type Penalty, type RecordHash, type AuditTrail, type PictureBoard, type PictureKeys, type SlotAdjustment, type Store, type StoreBlock, type StoreRequest } from '../port.js'
import { joinQueue, leaveQueue, queuedSlotStep, slotRelease, slotRenew, type SlotQueue, type SlotState } from '../../kinds/concurrency/memory-step.js'
import { LruMap } from '../../util/lru-map.js'
import { DEFAULT_MAX_KEYS } from '../../limits.js'

interface Entry {
  state: unknown
  expiresAt: number
}

const SWEEP_INTERVAL_MS = 10_000

/** A penalty key's state, as the batch script stores "until:offences:refusals:windowIndex". */
interface PenaltyState { until: number, offences: number, refusals: number, index: number }

/** The penalty after `offences` offences: forMs, times backoff per further offence, capped (as the script computes it). */
function penaltyLength (penalty: Penalty, offences: number): number {
  if (offences < 1) return 0
  let length = penalty.forMs
  for (let k = 2; k <= offences; k++) length = Math.min(penalty.maxMs, length * penalty.backoff)
  return Math.floor(Math.min(penalty.maxMs, length))
}

/*
 * The same five algorithms in one process (kinds/window/memory/, by each run's kind): for a single
 * instance, for the demo without Redis, and as the reference model the Lua
 * scripts are tested against. Several blocks are decided all-or-nothing, as
 * the multi script does: every step is computed first, and states are stored
 * only when every enforced block admits. Penalties follow the batch script
 * (scripts/penalty.lua) step for step. Expired entries are swept on
 * a timer that never keeps the process alive, and at most `maxKeys` keys are
 * kept: the least recently used goes first (its caller then starts afresh,
 * which admits more than the limit would have: size maxKeys above the number of
 * callers active within one window).
 */
export class MemoryStore implements Store {
  readonly #entries: LruMap<string, Entry>
  readonly #clock: () => number
  readonly #sweeper: NodeJS.Timeout
  readonly #records = new Map<string, MemoryRecords>()
  readonly #boards = new Map<string, MemoryBoard>()
  readonly #audits = new Map<string, MemoryAudit>()
  /** Slot queues (a concurrency block's `wait`), by slot key. */
  readonly #queues = new Map<string, SlotQueue>()
  #onWake: ((key: string) => void) | undefined
  readonly cluster = false

  constructor (clock: () => number = Date.now, maxKeys = DEFAULT_MAX_KEYS) {
    this.#clock = clock
    this.#entries = new LruMap(maxKeys)
    this.#sweeper = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS)
    this.#sweeper.unref()
  }

  decide (request: StoreRequest, mode: DecideMode): Promise<Decided> {
    try {
      const at = this.#clock()
      return Promise.resolve({ decisions: this.decideNow(request, mode, at), at })
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** The live entry of a key, marked as recently used; undefined when absent or expired. */
  #live (key: string, now: number): Entry | undefined {
    const entry = this.#entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      this.#entries.delete(key)
      return undefined
    }
    return entry
  }

  /** The live state of a key (see #live). */
  #read (key: string, now: number): unknown {
    return this.#live(key, now)?.state
  }

  #write (key: string, state: unknown, expiresAt: number): void {
    this.#entries.set(key, { state, expiresAt })
  }

  /** A block's step, by its run's kind: its algorithm at its cost, or its slots for the request's slot id (and its queue, with `wait`). */
  #step ({ run, key, cost }: StoreBlock, slot: string | undefined, now: number): MemoryStep<unknown> {
    if (run.kind.holdsSlot && run.params.delayMs !== undefined) return queuedSlotStep(this.#read(key, now) as SlotState | undefined, this.#queues.get(key), run.params, slot ?? '', now)
    return run.kind.memoryStep(this.#read(key, now), run, run.kind.callArg(cost, slot), now)
  }

  /** A slot run with `wait`: the slot id joins its queue (`join`), or leaves it and the key is announced when a slot is free for the next. */
  #queue (run: BlockRun, key: string, slot: string, now: number, join: boolean): void {
    if (!run.kind.holdsSlot || run.params.delayMs === undefined) return
    let queue = this.#queues.get(key)
    if (join) {
      if (queue === undefined) this.#queues.set(key, (queue = new Map()))
      joinQueue(queue, slot, run.params.windowMs, now)
      return
    }
    const announce = leaveQueue(queue, this.#read(key, now) as SlotState | undefined, run.params, slot, now)
    if (queue?.size === 0) this.#queues.delete(key)
    const onWake = this.#onWake
    if (announce && onWake !== undefined) queueMicrotask(() => { onWake(key) })
  }

  /** The memory store's announcements are in-process: one listener, called after the step that freed a slot. */
  watchSlots (onWake: (key: string) => void): () => Promise<void> {
    this.#onWake = onWake
    return async () => { if (this.#onWake === onWake) this.#onWake = undefined }
  }

  /** The model's synchronous entry (property tests drive it with their own `now`). */
  decideNow (request: StoreRequest, mode: DecideMode, now: number = this.#clock()): RawDecision[] {
    const { blocks } = request
    const dry = mode === 'peek'
    const blocked = this.#penalized(blocks, now)
    if (blocked !== undefined) {
      return blocks.map((block, i) => {
        const wait = blocked[i]
        if (wait !== undefined) return { allowed: false, remaining: 0, resetMs: wait, retryAfterMs: wait, nextMs: wait, penalized: true }
        return this.#step(block, request.slot, now).decision
      })
    }
    const steps: Array<{ block: StoreBlock, step: MemoryStep<unknown> }> = []
    let admit = true
    let queued = false
    for (const block of blocks) {
      const step = this.#step(block, request.slot, now)
      steps.push({ block, step })
      if (step.decision.queued !== undefined) queued = true
      else if (!step.decision.allowed && !block.run.shadow) admit = false
    }
    if (admit && !dry) {
      // As multi.lua: every other block admits, so the request waits in the queues of the blocks without a slot.
      const slot = request.slot ?? ''
      for (const { block: { run, key }, step } of steps) {
        if (queued) {
          if (step.decision.queued !== undefined) this.#queue(run, key, slot, now, true)
          continue
        }
        if (step.decision.allowed && step.state !== undefined) this.#write(key, step.state, now + step.ttlMs)
        this.#queue(run, key, slot, now, false)
      }
    }
    const decisions = steps.map(({ step }) => step.decision)
    if (!dry) this.#countRefusals(blocks, decisions, now)
    return decisions
  }

  /** A charge's refusals by blocks with a penalty: each counts one, and one may start a penalty. */
  #countRefusals (blocks: readonly StoreBlock[], decisions: RawDecision[], now: number): void {
    for (const [i, { run, key }] of blocks.entries()) {
      const decision = decisions[i]
      if (decision === undefined || run.penalty === undefined || run.shadow || decision.allowed) continue
      const until = this.#refused(penaltyKey(key), run.penalty, run.kind.paramsAt(run, now).windowMs, now)
      if (until !== undefined) {
        const wait = until - now
        decisions[i] = { ...decision, resetMs: Math.max(decision.resetMs, wait), retryAfterMs: Math.max(decision.retryAfterMs, wait), nextMs: Math.max(decision.nextMs, wait), penalized: true }
      }
    }
  }

  /** Per block, the ms left of a penalty the identity is serving; undefined when none is. */
  #penalized (blocks: readonly StoreBlock[], now: number): Array<number | undefined> | undefined {
    let blocked: Array<number | undefined> | undefined
    for (const [i, { run, key }] of blocks.entries()) {
      if (run.penalty === undefined || run.shadow) continue
      const state = this.#read(penaltyKey(key), now) as PenaltyState | undefined
      if (state !== undefined && state.until > now) {
        blocked ??= new Array<number | undefined>(blocks.length)
        blocked[i] = state.until - now
      }
    }
    return blocked
  }

  /** Counts one refusal; returns the penalty's end when this refusal starts one. */
  #refused (key: string, penalty: Penalty, windowMs: number, now: number): number | undefined {
    const state = (this.#read(key, now) as PenaltyState | undefined) ?? { until: 0, offences: 0, refusals: 0, index: -1 }
    const index = Math.floor(now / windowMs)
    let { until, offences, refusals } = state
    if (state.index !== index) refusals = 0
    refusals++
    let last = penaltyLength(penalty, offences)
    // Quiet for as long as the last penalty after it ended: the offences are forgotten.
    if (offences > 0 && now >= until + last) {
      offences = 0
      last = 0
    }
    let started: number | undefined
    if (refusals >= penalty.after) {
      offences++
      last = penaltyLength(penalty, offences)
      until = now + last
      refusals = 0
      started = until
    }
    this.#write(key, { until, offences, refusals, index }, now + Math.max(windowMs, until - now + last))
    return started
  }

  async adjust (entries: readonly Adjustment[]): Promise<boolean[]> {
    return this.adjustNow(entries)
  }

  /** The model of the batch script's adjustment call (adjustOne there): per entry whether it changed something. */
  adjustNow (entries: readonly Adjustment[], now: number = this.#clock()): boolean[] {
    return entries.map((entry) => this.#adjustOne(entry, now))
  }

  #adjustOne (entry: Adjustment, now: number): boolean {
    if (entry.kind !== 'units') return this.#adjustSlot(entry, now)
    const { run, key, units } = entry
    // The charge's time on this store's clock (batch.lua's adjustOne: none is now)
    const changed = run.kind.memoryUnits(this.#read(key, now), run, units, now, entry.chargedAt ?? now)
    if (changed === undefined) return false
    if (changed.state === undefined || changed.ttlMs <= 0) this.#entries.delete(key)
    else this.#write(key, changed.state, now + changed.ttlMs)
    return true
  }

  /** A slot's release or renewal, as scripts/concurrency.lua's modes 2 and 3. */
  #adjustSlot ({ kind, run, key, slot }: SlotAdjustment, now: number): boolean {
    const entry = this.#live(key, now)
    const state = entry?.state as SlotState | undefined
    if (kind === 'renew') {
      const renewed = slotRenew(state, run.params, slot, now)
      if (renewed === undefined) return false
      this.#write(key, renewed.state, now + renewed.ttlMs)
      return true
    }
    const released = slotRelease(state, slot, now)
    // A release changes only a live entry, and keeps its expiry.
    if (entry !== undefined && released.state !== state) {
      if (released.state === undefined) this.#entries.delete(key)
      else this.#write(key, released.state, entry.expiresAt)
    }
    this.#queue(run, key, slot, now, false)
    return released.removed
  }

  async adjustSlots (entries: readonly SlotAdjustment[]): Promise<boolean[]> {
    return this.adjustNow(entries)
  }

  async reset (keys: readonly string[]): Promise<void> {
    for (const key of keys) {
      this.#entries.delete(key)
      this.#entries.delete(penaltyKey(key))
    }
  }

  /** Drops entries whose state no longer matters. */
  sweep (): void {
    const now = this.#clock()
    for (const [key, entry] of this.#entries.entries()) {
      if (entry.expiresAt <= now) this.#entries.delete(key)
    }
    for (const [key, queue] of this.#queues) {
      for (const [slot, expiry] of queue) if (expiry <= now) queue.delete(slot)
      if (queue.size === 0) this.#queues.delete(key)
    }
  }

  get size (): number {
    return this.#entries.size
  }

  async warmUp (): Promise<void> {}

  /** Every call is answered in its own turn: nothing is ever pending. */
  async drain (): Promise<void> {}

  board (keys: PictureKeys): PictureBoard {
    let board = this.#boards.get(keys.pictures)
    if (board === undefined) this.#boards.set(keys.pictures, board = new MemoryBoard(this.#clock))
    return board
  }

  audit (key: string, max: number): AuditTrail {
    let audit = this.#audits.get(key)
    if (audit === undefined) this.#audits.set(key, audit = new MemoryAudit(max))
    return audit
  }

  /** No node can fail: nothing to show. */
  health (): NodeHealth[] {
    return []
  }

  /** One hash per key, kept apart from the limiter's keys (never swept, never evicted: operators' records). */
  records (key: string): RecordHash {
    let records = this.#records.get(key)
    if (records === undefined) this.#records.set(key, records = new MemoryRecords(this.#clock))
    return records
  }

  /** One process, one node. */
  nodeOf (_key: string): string {
    return 'memory'
  }

  close (): void {
    clearInterval(this.#sweeper)
    this.#entries.clear()
    this.#queues.clear()
  }
}
