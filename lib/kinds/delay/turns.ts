import type { BlockRun } from '../../store/port.js'

/*
 * A block's `delay` on the engine's side: the runs a decision takes when no
 * turn may be reserved (this instance holds maxDelayed requests, or the caller
 * would not wait: consume()). They keep the delay's reach, so the scripts
 * keep every reservation already stored (scripts/gcra.lua, token-bucket.lua),
 * and admit only what fits now.
 */

const twins = new WeakMap<BlockRun, BlockRun>()

/** The run without turns: the same numbers and key, `hold: false` (built once per run). */
function withoutTurn (run: BlockRun): BlockRun {
  if (run.params.delayMs === undefined) return run
  let twin = twins.get(run)
  if (twin === undefined) {
    twin = { ...run, params: { ...run.params, hold: false } }
    twins.set(run, twin)
  }
  return twin
}

/**
 * The blocks a decision takes: a delaying run keeps its turns when `turns`, a
 * concurrency run with `wait` its place in the queue when `waits` (the twin
 * keeps the queue's order without joining it: scripts/concurrency.lua 'o').
 * A block whose run changes is a copy; the others are the same records.
 */
export function withoutTurns<B extends { run: BlockRun }> (blocks: readonly B[], turns = false, waits = false): B[] {
  return blocks.map((block) => {
    const run = (block.run.kind.holdsSlot ? waits : turns) ? block.run : withoutTurn(block.run)
    return run === block.run ? block : { ...block, run }
  })
}
