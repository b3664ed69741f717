import { test } from 'tap'
import type { RawDecision } from '../../lib/store/algorithms.js'
import { combine } from '../../lib/decide/combine.js'
import { compilePolicy } from '../../lib/policy/policy.js'
import { compileContext } from '../helpers/app.js'

/*
 * combine() is the one rule the route hook, consume() and peek() share for
 * several blocks; these cases pin it down without a store (the integration
 * tests exercise it against Redis).
 */

const context = compileContext()
const admit = (remaining: number): RawDecision => ({ allowed: true, remaining, resetMs: 1000, retryAfterMs: 0, nextMs: 1000 })
const refuse = (retryAfterMs: number): RawDecision => ({ allowed: false, remaining: 0, resetMs: retryAfterMs, retryAfterMs, nextMs: retryAfterMs })

test('enforced blocks: the refusal with the latest retry binds; otherwise the fewest units left', async (t) => {
  const policy = compilePolicy([{ limit: 10, window: '1s', name: 'a' }, { limit: 100, window: '1h', name: 'b' }, { limit: 50, window: '1m', name: 'c' }], { method: 'GET', url: '/x', source: 'declared' }, context)
  const allowed = combine(policy.routeBlocks, [admit(7), admit(3), admit(5)])
  t.same([allowed.rejected, allowed.binding, allowed.outcome, allowed.violated], [false, 1, 'allowed', []], 'fewest remaining binds')
  const refused = combine(policy.routeBlocks, [refuse(400), admit(3), refuse(9000)])
  t.same([refused.rejected, refused.binding, refused.outcome, refused.violated, refused.latestRetryMs], [true, 2, 'limited', ['a', 'c'], 9000], 'latest retry binds, every refusal named')
  const partial = combine(policy.routeBlocks, [undefined, refuse(250), undefined])
  t.same([partial.rejected, partial.binding, partial.violated], [true, 1, ['b']], 'blocks without a decision (deny-cache answer) are skipped')
})

test('shadow blocks never refuse; with no enforced block, the first shadow refusal binds', async (t) => {
  const mixed = compilePolicy([{ limit: 10, window: '1s', name: 'real' }, { limit: 1, window: '1s', name: 'trial', mode: 'shadow' }], { method: 'GET', url: '/x', source: 'declared' }, context)
  const verdict = combine(mixed.routeBlocks, [admit(4), refuse(800)])
  t.same([verdict.rejected, verdict.binding, verdict.outcome, verdict.violated, verdict.shadowViolated], [false, 0, 'shadow-limited', [], ['trial']], 'the enforced block still binds')
  const shadows = compilePolicy([{ limit: 10, window: '1s', name: 's1', mode: 'shadow' }, { limit: 1, window: '1s', name: 's2', mode: 'shadow' }], { method: 'GET', url: '/y', source: 'declared' }, context)
  const only = combine(shadows.routeBlocks, [admit(4), refuse(800)])
  t.same([only.rejected, only.binding, only.outcome, only.shadowViolated], [false, 1, 'shadow-limited', ['s2']], 'all shadow: the refusing shadow block binds')
})
