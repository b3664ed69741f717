import type { Test } from 'tap'

export type Warning = Error & { code?: string }

/**
 * The process warnings with `warning.code` emitted from now on, for this test.
 * The once-per-process latch is re-armed, so each case sees its own first one.
 */
export function watchWarnings (t: Test, warning: { code: string, emitted: boolean }): Warning[] {
  const seen: Warning[] = []
  const listener = (emitted: Warning) => { if (emitted.code === warning.code) seen.push(emitted) }
  process.on('warning', listener)
  t.teardown(() => { process.off('warning', listener) })
  warning.emitted = false
  return seen
}

/** process.emitWarning delivers on a later tick. */
export const warningsDelivered = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }
