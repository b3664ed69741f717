import type { RawDecision } from './algorithm-types.js'
import type { CompiledPolicy } from './policy.js'

/** Where decisions are taken: one atomic step per request. */
export interface Store {
  /** Rejects on any failure (unavailable, timeout, bad reply); the caller applies onRedisError. */
  consume: (policy: CompiledPolicy, key: string, cost: number) => Promise<RawDecision>
  close: () => void
}
