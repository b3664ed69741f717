import type { RawDecision } from './algorithm-types.js'
import { memoryAlgorithms, type MemoryStep } from './memory-algorithms.js'
import type { BlockRun, DecideMode, Store } from './store.js'

interface Entry {
  state: unknown
  expiresAt: number
}

const SWEEP_INTERVAL_MS = 10_000

/*
 * The same five algorithms in one process (memory-algorithms.ts): for a single
 * instance, for the demo without Redis, and as the reference model the Lua
 * scripts are tested against. Several blocks are decided all-or-nothing, as
 * the multi script does: every step is computed first, and states are stored
 * only when every enforced block admits. Expired entries are swept on a timer
 * that never keeps the process alive.
 */
export class MemoryStore implements Store {
  readonly #entries = new Map<string, Entry>()
  readonly #clock: () => number
  readonly #sweeper: NodeJS.Timeout

  constructor (clock: () => number = Date.now) {
    this.#clock = clock
    this.#sweeper = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS)
    this.#sweeper.unref()
  }

  decide (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], mode: DecideMode): Promise<RawDecision[]> {
    return Promise.resolve(this.decideNow(runs, keys, costs, mode === 'peek'))
  }

  /** The model's synchronous entry (property tests drive it with their own `now`); `dry` is a peek. */
  decideNow (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], dry: boolean, now: number = this.#clock()): RawDecision[] {
    const steps: Array<MemoryStep<unknown>> = []
    let admit = true
    for (let i = 0; i < runs.length; i++) {
      const run = runs[i] as BlockRun
      const key = keys[i] as string
      const entry = this.#entries.get(key)
      const current = entry !== undefined && entry.expiresAt > now ? entry.state : undefined
      const step = memoryAlgorithms[run.algorithm].step(current, run.params, costs[i] as number, now)
      steps.push(step)
      if (!step.decision.allowed && !run.shadow) admit = false
    }
    if (admit && !dry) {
      for (let i = 0; i < runs.length; i++) {
        const step = steps[i] as MemoryStep<unknown>
        if (step.decision.allowed && step.state !== undefined) this.#entries.set(keys[i] as string, { state: step.state, expiresAt: now + step.ttlMs })
      }
    }
    return steps.map((step) => step.decision)
  }

  async refund (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], elapsedMs: number): Promise<boolean[]> {
    return this.refundNow(runs, keys, costs, elapsedMs)
  }

  refundNow (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], elapsedMs: number, now: number = this.#clock()): boolean[] {
    return runs.map((run, i) => {
      const key = keys[i] as string
      const entry = this.#entries.get(key)
      const current = entry !== undefined && entry.expiresAt > now ? entry.state : undefined
      const given = memoryAlgorithms[run.algorithm].refund?.(current, run.params, costs[i] as number, now, Math.max(0, Math.round(elapsedMs)))
      if (given === undefined) return false
      if (given.state === undefined || given.ttlMs <= 0) this.#entries.delete(key)
      else this.#entries.set(key, { state: given.state, expiresAt: now + given.ttlMs })
      return true
    })
  }

  async reset (keys: readonly string[]): Promise<void> {
    for (const key of keys) this.#entries.delete(key)
  }

  /** Drops entries whose state no longer matters. */
  sweep (): void {
    const now = this.#clock()
    for (const [key, entry] of this.#entries) {
      if (entry.expiresAt <= now) this.#entries.delete(key)
    }
  }

  get size (): number {
    return this.#entries.size
  }

  async warmUp (): Promise<void> {}

  close (): void {
    clearInterval(this.#sweeper)
    this.#entries.clear()
  }
}
