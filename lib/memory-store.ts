import type { AlgorithmName, RawDecision } from './algorithm-types.js'
import { memoryAlgorithms } from './memory-algorithms.js'
import type { CompiledPolicy } from './policy.js'
import type { Store } from './store.js'

interface Entry {
  state: unknown
  expiresAt: number
}

const SWEEP_INTERVAL_MS = 10_000

/*
 * The same five algorithms in one process (memory-algorithms.ts): for a single
 * instance, for the demo without Redis, and as the reference model the Lua
 * scripts are tested against. Expired entries are swept on a timer that never
 * keeps the process alive.
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

  consume (policy: CompiledPolicy, key: string, cost: number): Promise<RawDecision> {
    return Promise.resolve(this.consumeNow(policy.algorithm, policy.params, key, cost))
  }

  consumeNow (algorithm: AlgorithmName, params: CompiledPolicy['params'], key: string, cost: number): RawDecision {
    const now = this.#clock()
    const entry = this.#entries.get(key)
    const current = entry !== undefined && entry.expiresAt > now ? entry.state : undefined
    const step = memoryAlgorithms[algorithm].step(current, params, cost, now)
    if (step.state !== undefined) this.#entries.set(key, { state: step.state, expiresAt: now + step.ttlMs })
    return step.decision
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
