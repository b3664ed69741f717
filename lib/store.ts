import type { RawDecision } from './algorithm-types.js'
import type { CompiledPolicy } from './policy.js'

/** Where decisions are taken: one atomic step per request. */
export interface Store {
  /** Rejects on any failure (unavailable, timeout, bad reply); the caller applies onRedisError. */
  consume: (policy: CompiledPolicy, key: string, cost: number) => Promise<RawDecision>
  /** Called at app.ready(): gives a connecting client a bounded moment to become ready. */
  warmUp: () => Promise<void>
  close: () => void
}
