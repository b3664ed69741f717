import { ALGORITHMS, MAX_WINDOW_MS, type AlgorithmName } from '../../store/algorithms.js'
import type { Fail } from '../../policy/block-fields.js'
import { parseWindow } from '../../policy/duration.js'
import type { Counting } from '../../policy/shape.js'

/** A window block's algorithm (sliding-window unless declared) and window, a duration aligned to the epoch. */
export function readWindowCounting (input: Record<string, unknown>, fail: Fail): Counting {
  const algorithm = (input.algorithm ?? 'sliding-window') as AlgorithmName
  if (!ALGORITHMS.includes(algorithm)) {
    fail('algorithm', `must be one of ${ALGORITHMS.join(', ')} (got ${JSON.stringify(input.algorithm)})`)
  }
  const windowMs = parseWindow(input.window, MAX_WINDOW_MS)
  if (typeof windowMs === 'string') return fail('window', windowMs)
  return { algorithm, windowMs, period: undefined }
}
