import { ALGORITHMS, type AlgorithmName } from '../../store/algorithms.js'
import { BLOCK_DEFAULTS, MAX_DELAY_MS, MAX_WINDOW_MS } from '../../limits.js'
import type { Fail } from '../../policy/block-fields.js'
import { parseWindow } from '../../policy/duration.js'
import type { Counting } from '../../policy/shape.js'
import { isBursty } from './kind.js'

/** A gcra or token-bucket block's `delay` (ms), undefined without one. */
function readDelay (input: Record<string, unknown>, algorithm: AlgorithmName, fail: Fail): number | undefined {
  if (input.delay === undefined) return undefined
  if (!isBursty(algorithm)) fail('delay', `only applies to gcra and token-bucket, which can reserve a later turn (algorithm is ${algorithm}; use algorithm: 'gcra')`)
  const delayMs = parseWindow(input.delay, MAX_DELAY_MS)
  if (typeof delayMs === 'string') return fail('delay', delayMs)
  return delayMs
}

/** A window block's algorithm (sliding-window unless declared), window (a duration aligned to the epoch) and delay. */
export function readWindowCounting (input: Record<string, unknown>, fail: Fail): Counting {
  const algorithm = (input.algorithm ?? BLOCK_DEFAULTS.algorithm) as AlgorithmName
  if (!ALGORITHMS.includes(algorithm)) {
    fail('algorithm', `must be one of ${ALGORITHMS.join(', ')} (got ${JSON.stringify(input.algorithm)})`)
  }
  const windowMs = parseWindow(input.window, MAX_WINDOW_MS)
  if (typeof windowMs === 'string') return fail('window', windowMs)
  return { algorithm, windowMs, period: undefined, delayMs: readDelay(input, algorithm, fail) }
}
