/** Whether a value is a promise or any other thenable (user functions may return either). */
export function isThenable (value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as { then?: unknown }).then === 'function'
}

/**
 * For functions that must answer synchronously (a `cost` function, `refundOn`,
 * `replyBuilder`): whether one returned a thenable instead, whose rejection is
 * then handled here so it never goes unhandled. The caller treats the value as
 * unusable and never waits for it.
 */
export function strayThenable (value: unknown): boolean {
  if (!isThenable(value)) return false
  Promise.resolve(value).catch(() => {})
  return true
}

/** How an awaited user function ended: its value, or why there is none (a rejection or an overrun). */
export type Outcome = { ok: true, value: unknown } | { ok: false, error: unknown }

/**
 * Awaits a promise for at most `ms`. Never rejects (a rejection is an outcome),
 * never leaves a timer behind, and never waits longer: a promise that never
 * resolves ends as an overrun, described by `what` (for example `identityTimeout`).
 */
export function awaitWithin (value: PromiseLike<unknown>, ms: number, what: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { resolve({ ok: false, error: new Error(`did not finish within ${ms} ms (${what})`) }) }, ms)
    Promise.resolve(value).then(
      (result) => { clearTimeout(timer); resolve({ ok: true, value: result }) },
      (error: unknown) => { clearTimeout(timer); resolve({ ok: false, error }) }
    )
  })
}

/**
 * Awaits a promise for at most `ms`: its value, its rejection, or `late()`'s
 * error once `ms` have passed (the timer is cleared either way).
 */
export function settleWithin<T> (work: PromiseLike<T>, ms: number, late: () => Error): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { reject(late()) }, ms)
    Promise.resolve(work).then(
      (value) => { clearTimeout(timer); resolve(value) },
      (error: Error) => { clearTimeout(timer); reject(error) }
    )
  })
}
