import type { BlockRun } from '../port.js'

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
