import diagnostics from 'node:diagnostics_channel'
import { monitorEventLoopDelay } from 'node:perf_hooks'

/*
 * Observability without a dependency: every decision is published on
 * node:diagnostics_channel (free when nobody subscribes), and, when the
 * application has @opentelemetry/api installed, recorded as OpenTelemetry
 * metrics through whatever MeterProvider it registered globally. The import is
 * dynamic: without the package the plugin works and records nothing.
 */

/** Channel names (stable, part of the public API). */
export const CHANNELS = {
  /** One message per decision: see DecisionMessage. */
  decision: 'fastify-redis-rate-limit:decision',
  /** One message per store failure (Redis error, timeout, bad reply). */
  storeError: 'fastify-redis-rate-limit:store-error'
} as const

/** `skipped`: let through unlimited by `allowList` or a route's `skip`, with no store call. `banned`: refused by an operator ban, with none either. */
export type Outcome = 'allowed' | 'delayed' | 'limited' | 'penalized' | 'shadow-limited' | 'degraded' | 'skipped' | 'banned'
export type DecisionSource = 'store' | 'deny-cache' | 'local' | 'api' | 'allow-list' | 'skip' | 'ban'

/** What the decision channel carries. Never an identity value: only its kinds. */
export interface DecisionMessage {
  /** `GET /orders/:id`, or `api <policy>` for fastify.rateLimit.consume(). */
  route: string
  /** The binding policy: the violated one with the latest retry, else the one with the fewest units left. */
  policy: string
  outcome: Outcome
  /** Names of the enforced policies that refused the request (empty unless limited). */
  violated: string[]
  /** Names of the shadow policies that would have refused it. */
  shadowViolated: string[]
  /** Tier applied, when the route has tier maps. */
  tier: string | undefined
  /** Whether the store was asked (`store`), the local deny cache answered (`deny-cache`), the API (`api`), or nothing was asked (`allow-list`, `skip`: outcome `skipped`; `ban`: outcome `banned`). */
  source: DecisionSource
  /** Milliseconds from the start of the decision to its end (performance.now()). */
  durationMs: number
  /** Outcome `delayed`: ms the request is held until its reserved turn (a block's `delay`); else 0. */
  delayMs: number
  /** The identity parts used, e.g. ['user'] or ['ip', 'body']: kinds only. */
  identityKinds: string[]
}

export interface StoreErrorMessage {
  route: string
  cause: StoreErrorCause
  error: unknown
}

export type StoreErrorCause = 'timeout' | 'unavailable' | 'overloaded' | 'circuit-open' | 'bad-reply' | 'script-error' | 'other'

export const decisionChannel = diagnostics.channel(CHANNELS.decision)
export const storeErrorChannel = diagnostics.channel(CHANNELS.storeError)

export function errorCause (error: unknown): StoreErrorCause {
  const code = typeof error === 'object' && error !== null && 'code' in error ? error.code : undefined
  if (code === 'FST_RRL_REDIS_TIMEOUT') return 'timeout'
  if (code === 'FST_RRL_REDIS_UNAVAILABLE') return 'unavailable'
  if (code === 'FST_RRL_STORE_OVERLOADED') return 'overloaded'
  if (code === 'FST_RRL_REDIS_CIRCUIT_OPEN') return 'circuit-open'
  if (code === 'FST_RRL_BAD_SCRIPT_REPLY') return 'bad-reply'
  if (code === 'FST_RRL_SCRIPT_ERROR') return 'script-error'
  return 'other'
}

/** What changed usage after the fact: refundOn, settle, adjust(), or a held request whose client left (abort). */
export type UsageChangeSource = 'refund' | 'settle' | 'adjust' | 'abort'

/** The instruments, once @opentelemetry/api is loaded. */
export interface Metrics {
  decision: (route: string, policy: string, outcome: Outcome, durationMs: number) => void
  storeError: (route: string, cause: StoreErrorCause) => void
  denyCacheHit: (route: string, policy: string) => void
  /** Usage changed after the fact: a request's refund or settle, or an adjust() call (decide/given-back.ts). */
  usageChange: (route: string, source: UsageChangeSource) => void
  /** A request admitted at a reserved turn: the ms it is held (a block's `delay`). */
  delay: (route: string, policy: string, delayMs: number) => void
  /** One script call to Redis: how many decisions it carried, and ms from write to reply (or failure). */
  storeCall: (size: number, latencyMs: number) => void
  /** Stops the event-loop sampler (at close). */
  close: () => void
}

/** How a throwing metrics instrument or logger on the decision path is logged (once per burst). */
export const TELEMETRY_THREW = 'rate limit telemetry threw (a metrics instrument or a logger); the request was answered as if it had not'

/** The record function, isolated: a throw goes to `onThrow`, never to the decision path that recorded. */
function isolated<A extends unknown[]> (record: (...args: A) => void, onThrow: (error: unknown) => void): (...args: A) => void {
  return (...args) => {
    try {
      record(...args)
    } catch (error) {
      onThrow(error)
    }
  }
}

/** Instrument names (stable, part of the public API). */
export const METRICS = {
  decisions: 'rate_limit.decisions',
  duration: 'rate_limit.decision.duration',
  storeErrors: 'rate_limit.store.errors',
  denyCacheHits: 'rate_limit.deny_cache.hits',
  usageChanges: 'rate_limit.usage.changes',
  delay: 'rate_limit.delay',
  batchSize: 'rate_limit.store.batch.size',
  storeLatency: 'rate_limit.store.latency',
  eventLoopDelay: 'rate_limit.event_loop.delay'
} as const

/** How often the event-loop delay is sampled into its histogram (p99 of each interval). */
const LOOP_SAMPLE_MS = 1000

interface Counter { add: (value: number, attributes?: Record<string, string>) => void }
interface Histogram { record: (value: number, attributes?: Record<string, string>) => void }
interface Meter {
  createCounter: (name: string, options?: { description?: string, unit?: string }) => Counter
  createHistogram: (name: string, options?: { description?: string, unit?: string }) => Histogram
}

/**
 * Creates the instruments from the global MeterProvider, or returns undefined
 * when @opentelemetry/api cannot be imported or no MeterProvider is registered
 * (the no-op meter: nothing would be recorded, so nothing is measured). Called
 * at ready(), so an SDK registered after the plugin but before ready() is used.
 * Every recording is isolated: an instrument's throw goes to `onThrow`.
 */
export async function loadMetrics (onThrow: (error: unknown) => void): Promise<Metrics | undefined> {
  let meter: Meter
  try {
    const api = await import('@opentelemetry/api')
    meter = api.metrics.getMeter('fastify-redis-rate-limit') as unknown as Meter
    // No SDK registered: the API hands out a no-op meter; skip the per-request work entirely.
    if (meter.constructor === api.createNoopMeter().constructor) return undefined
  } catch {
    return undefined
  }
  const decisions = meter.createCounter(METRICS.decisions, { description: 'Rate limit decisions by route, policy and outcome' })
  const duration = meter.createHistogram(METRICS.duration, { description: 'Time to take a rate limit decision', unit: 'ms' })
  const storeErrors = meter.createCounter(METRICS.storeErrors, { description: 'Rate limiter store failures by cause' })
  const denyHits = meter.createCounter(METRICS.denyCacheHits, { description: 'Requests refused by the local deny cache without a store round trip' })
  const usageChanges = meter.createCounter(METRICS.usageChanges, { description: 'Usage changed after the fact (units given back or charged), by route and source: refund, settle, adjust, abort' })
  const delays = meter.createHistogram(METRICS.delay, { description: 'How long requests admitted at a reserved turn (a block\'s delay) are held', unit: 'ms' })
  const batchSize = meter.createHistogram(METRICS.batchSize, { description: 'Decisions carried by one script call to Redis' })
  const storeLatency = meter.createHistogram(METRICS.storeLatency, { description: 'Time from writing a script call to its reply (includes the wait for this process to read it)', unit: 'ms' })
  // A slow Redis shows in store latency alone; a saturated process shows in both, and here.
  const loopDelay = meter.createHistogram(METRICS.eventLoopDelay, { description: 'Event-loop delay of this process, p99 per second', unit: 'ms' })
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  const sampleLoop = isolated(() => {
    if (loop.count > 0) loopDelay.record(loop.percentile(99) / 1e6)
  }, onThrow)
  const sampler = setInterval(() => {
    sampleLoop()
    loop.reset()
  }, LOOP_SAMPLE_MS)
  sampler.unref()
  return {
    decision: isolated((route: string, policy: string, outcome: Outcome, durationMs: number) => {
      decisions.add(1, { route, policy, outcome })
      duration.record(durationMs, { route, outcome })
    }, onThrow),
    storeError: isolated((route: string, cause: StoreErrorCause) => { storeErrors.add(1, { route, cause }) }, onThrow),
    denyCacheHit: isolated((route: string, policy: string) => { denyHits.add(1, { route, policy }) }, onThrow),
    usageChange: isolated((route: string, source: UsageChangeSource) => { usageChanges.add(1, { route, source }) }, onThrow),
    delay: isolated((route: string, policy: string, delayMs: number) => { delays.record(delayMs, { route, policy }) }, onThrow),
    storeCall: isolated((size: number, latencyMs: number) => {
      batchSize.record(size)
      storeLatency.record(latencyMs)
    }, onThrow),
    close: () => {
      clearInterval(sampler)
      loop.disable()
    }
  }
}

/** The attributes of a decision's trace event (docs/api.md, "Traces"): never an identity value. */
export type DecisionAttributes = Record<string, string | number | string[]>

/** Adds a decision's event to the request's active span, once an SDK's tracer provider is registered. */
export interface Tracing {
  decision: (attributes: DecisionAttributes) => void
}

/** The event's name on the request's span. */
export const DECISION_EVENT = 'rate_limit.decision'

/**
 * An event on the active span (the HTTP instrumentation's server span of the
 * request, or any span the app made current), or undefined when
 * @opentelemetry/api cannot be imported or no TracerProvider is registered
 * (the API's proxy then delegates to a no-op). Called at ready(), as
 * loadMetrics; isolated in the same way.
 */
export async function loadTracing (onThrow: (error: unknown) => void): Promise<Tracing | undefined> {
  try {
    const api = await import('@opentelemetry/api')
    const provider = api.trace.getTracerProvider() as { getDelegate?: () => unknown }
    const delegate = typeof provider.getDelegate === 'function' ? provider.getDelegate() : provider
    // A fresh proxy delegates to the API's no-op provider: the same class means no SDK registered one.
    if (delegate === undefined || delegate === null || (delegate as object).constructor === new api.ProxyTracerProvider().getDelegate().constructor) return undefined
    return {
      decision: isolated((attributes: DecisionAttributes) => {
        const span = api.trace.getActiveSpan()
        if (span?.isRecording() === true) span.addEvent(DECISION_EVENT, attributes)
      }, onThrow)
    }
  } catch {
    return undefined
  }
}
